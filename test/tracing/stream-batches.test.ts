import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { depsOf } from '../../src/tracing/http/access.js';
import { STREAM_BATCH_SIZE } from '../../src/tracing/services/calls.js';
import { streamThreads, THREADS_BATCH_SIZE } from '../../src/tracing/services/threads.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { onPostgresServer } from '../helpers/database.js';
import { callItems, lines, post } from './helpers.js';

/** Streams of calls and threads: read batch by batch, each batch's lookups on the stream's own connection. */

let app: App;
let user: TestUser;
appWithUser((made) => ({ app, user } = made));

const newProject = () => `${user.entity}/${uniqueName('batches')}`;
const status = async (response: Awaited<ReturnType<typeof post>>) => [response.statusCode, response.json()];

describe('lookups of a stream (costs, feedback, expansion)', () => {
  it.runIf(onPostgresServer)('answers more concurrent stream_query requests (with costs, feedback, expansion) than the pool has connections', async () => {
    const project = newProject();
    await post(app, user, '/call/upsert_batch', { batch: Array.from({ length: 3 }, (_, i) => callItems(project, { id: `c${i}`, summary: { usage: { 'gpt-4o': { prompt_tokens: 1 } } } })).flat() });
    const body = { project_id: project, include_costs: true, include_feedback: true, expand_columns: ['inputs.x'] };
    // The test pool has 5 connections: 8 cursors each asking for a second connection would wait out the
    // pool's acquire timeout and fail.
    const responses = await Promise.all(Array.from({ length: 8 }, () => post(app, user, '/calls/stream_query', body)));
    expect(responses.map((r) => [r.statusCode, lines(r.body).length])).toEqual(Array.from({ length: 8 }, () => [200, 3]));
  }, 20_000);
});

describe('/threads/stream_query', () => {
  it('reads threads one batch at a time, as the consumer asks', async () => {
    const project = newProject();
    const count = THREADS_BATCH_SIZE * 2 + 1;
    const batch = Array.from({ length: count }, (_, i) => callItems(project, { id: `t${i}`, thread_id: `thread-${String(i).padStart(4, '0')}`, turn_id: `t${i}` })).flat();
    expect((await post(app, user, '/call/upsert_batch', { batch })).statusCode).toBe(200);
    const stream = streamThreads(depsOf(app), { project_id: project, sort_by: [{ field: 'thread_id', direction: 'asc' }] });
    const sizes: number[] = [];
    let first: unknown;
    for await (const rows of stream) {
      sizes.push(rows.length);
      first ??= rows[0];
    }
    expect(sizes).toEqual([THREADS_BATCH_SIZE, THREADS_BATCH_SIZE, 1]);
    expect(first).toMatchObject({ thread_id: 'thread-0000', turn_count: 1, first_turn_id: 't0', last_turn_id: 't0' });
    const response = await post(app, user, '/threads/stream_query', { project_id: project, limit: 3, offset: 600, sort_by: [{ field: 'thread_id', direction: 'desc' }] });
    expect(lines(response.body).map((t) => t.thread_id)).toEqual(['thread-0400', 'thread-0399', 'thread-0398']);
  });
});

describe('expand_columns with refs into other projects', () => {
  it('leaves a ref into another project unexpanded, in every batch of a stream, and reads nothing of that project', async () => {
    const project = newProject();
    const own = `weave:///${project}/object/m:${(await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'm', val: { t: 0.5 } } })).json().digest}`;
    // Another project of the same user, whose object exists: still not read through a call of this one.
    const other = newProject();
    const foreign = `weave:///${other}/object/m:${(await post(app, user, '/obj/create', { obj: { project_id: other, object_id: 'm', val: { t: 0.9 } } })).json().digest}`;
    const count = STREAM_BATCH_SIZE + 1;
    const batch = Array.from({ length: count }, (_, i) => callItems(project, { id: `c${i}`, inputs: { x: i === count - 1 ? foreign : own } })).flat();
    expect((await post(app, user, '/call/upsert_batch', { batch })).statusCode).toBe(200);
    // The call naming the other project comes in the stream's second batch, after the 200 went out.
    const response = await post(app, user, '/calls/stream_query', { project_id: project, expand_columns: ['inputs.x'], sort_by: [{ field: 'id', direction: 'asc' }] });
    expect(response.statusCode).toBe(200);
    const inputs = new Map((lines(response.body) as { id: string; inputs: { x: unknown } }[]).map((call) => [call.id, call.inputs.x]));
    expect(inputs.size).toBe(count);
    expect(inputs.get(`c${count - 1}`)).toBe(foreign);
    expect(inputs.get('c0')).toMatchObject({ t: 0.5 });
    const query = await post(app, user, '/calls/query', { project_id: project, expand_columns: ['inputs.x'], filter: { call_ids: [`c${count - 1}`] } });
    expect(await status(query)).toEqual([200, { calls: [expect.objectContaining({ inputs: { x: foreign } })] }]);
  });
});
