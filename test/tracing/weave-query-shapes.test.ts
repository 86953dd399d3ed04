import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { callItems, lines, post } from './helpers.js';

/**
 * Calls-query answers in the shapes weave's own server gives (its client tests in test_client_trace.py
 * compare them): costs absent rather than empty, the costed summary kept under `columns`, `<column>_dump`
 * column names, and bare run ids read as runs of the query's project.
 */

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

const newProject = () => `${user.entity}/${uniqueName('shapes')}`;
const usage = (model: string) => ({ usage: { [model]: { prompt_tokens: 10, completion_tokens: 5, requests: 1, total_tokens: 15 } } });

async function priced(project: string) {
  const created = await post(app, user, '/cost/create', { project_id: project, costs: { 'my-model': { prompt_token_cost: 2, completion_token_cost: 3, effective_date: '2000-01-01T00:00:00Z' } } });
  expect(created.statusCode).toBe(200);
}

describe('include_costs', () => {
  it('leaves summary.weave.costs out when no model of the call has a price, on every calls reader', async () => {
    const project = newProject();
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'unpriced', summary: usage('no-such-model') }) });
    const [queried] = (await post(app, user, '/calls/query', { project_id: project, include_costs: true })).json().calls;
    const [streamed] = lines((await post(app, user, '/calls/stream_query', { project_id: project, include_costs: true })).body);
    const read = (await post(app, user, '/call/read', { project_id: project, id: 'unpriced', include_costs: true })).json().call;
    for (const call of [queried, streamed, read]) {
      expect(Object.keys(call.summary.weave).sort()).toEqual(['latency_ms', 'status', 'trace_name']);
      expect(call.summary.usage).toEqual(usage('no-such-model').usage);
    }
  });

  it('keeps the costed summary when columns leave summary out', async () => {
    const project = newProject();
    await priced(project);
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', inputs: { q: 1 }, output: 'answer', summary: usage('my-model') }) });
    const [call] = (await post(app, user, '/calls/query', { project_id: project, include_costs: true, columns: ['id', 'inputs'] })).json().calls;
    expect(call.inputs).toEqual({ q: 1 });
    expect(call.output).toBeNull();
    expect(call.summary.usage).toEqual(usage('my-model').usage);
    expect(call.summary.weave).toMatchObject({ status: 'success', costs: { 'my-model': { prompt_tokens: 10, completion_tokens: 5, prompt_tokens_total_cost: 20, completion_tokens_total_cost: 15 } } });
  });

  it('without include_costs, columns that leave summary out still read it as null', async () => {
    const project = newProject();
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', summary: usage('my-model') }) });
    const [call] = (await post(app, user, '/calls/query', { project_id: project, columns: ['id', 'inputs'] })).json().calls;
    expect(call.summary).toBeNull();
  });
});

describe('columns', () => {
  it('reads <column>_dump names as the column itself', async () => {
    const project = newProject();
    await post(app, user, '/call/upsert_batch', { batch: callItems(project, { id: 'c', inputs: { q: 'in' }, output: { a: 'out' }, attributes: { env: 'prod' }, summary: { n: 1 } }) });
    const [dumped] = (await post(app, user, '/calls/query', { project_id: project, columns: ['output_dump', 'inputs_dump'] })).json().calls;
    expect([dumped.output, dumped.inputs, dumped.attributes, dumped.summary]).toEqual([{ a: 'out' }, { q: 'in' }, {}, null]);
    const [streamed] = lines((await post(app, user, '/calls/stream_query', { project_id: project, columns: ['attributes_dump', 'summary_dump'] })).body);
    expect([streamed.output, streamed.attributes, (streamed.summary as { n: number }).n]).toEqual([null, { env: 'prod' }, 1]);
  });
});

describe('filter.wb_run_ids', () => {
  it('reads a bare run id as a run of the query\'s project, and a full id as it is', async () => {
    const project = newProject();
    const other = newProject();
    const starts = (projectId: string, ids: string[], runId: string) =>
      ids.flatMap((id) => callItems(projectId, { id }).map((item) => {
        const start = (item as { mode: string; req: { start?: Record<string, unknown> } }).req.start;
        if (start) start.wb_run_id = runId;
        return item;
      }));
    await post(app, user, '/call/upsert_batch', { batch: [...starts(project, ['a', 'b'], `${project}/run-1`), ...starts(project, ['c'], `${project}/run-2`)] });
    await post(app, user, '/call/upsert_batch', { batch: starts(other, ['x'], `${other}/run-1`) });

    const ids = async (runIds: string[]) => (await post(app, user, '/calls/query', { project_id: project, filter: { wb_run_ids: runIds }, sort_by: [{ field: 'id', direction: 'asc' }] })).json().calls.map((c: { id: string }) => c.id);
    expect(await ids(['run-1'])).toEqual(['a', 'b']);
    expect(await ids([`${project}/run-1`])).toEqual(['a', 'b']);
    expect(await ids(['run-1', `${project}/run-2`])).toEqual(['a', 'b', 'c']);
    expect(await ids([`${other}/run-1`])).toEqual([]);
    const stats = await post(app, user, '/calls/query_stats', { project_id: project, filter: { wb_run_ids: ['run-2'] } });
    expect(stats.json()).toEqual({ count: 1 });
  });
});
