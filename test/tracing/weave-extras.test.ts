import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { backendEntry, createGatewayApp } from '../inference/gateway-helpers.js';
import { post, runWeaveFixture } from './helpers.js';

let engine: FakeEngine;
let app: App;
let user: TestUser;
let project: string;
let seen: Record<string, any>;

beforeAll(async () => {
  engine = await startFakeEngine({ chunks: 5 });
  app = await createGatewayApp([backendEntry('local', [engine.url])]);
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('sdk-extras')}`;
  const baseUrl = await listen(app);
  seen = await runWeaveFixture('test/tracing/fixtures/weave-eval.ts', { baseUrl, key: user.key, project, env: { GATEWAY_URL: `${baseUrl}/v1` } });
}, 120_000);
afterAll(async () => {
  await app.close();
  await engine.close();
});

describe('the npm weave SDK: evaluations and wrapped OpenAI', () => {
  it('EvaluationLogger writes each score as runnable feedback on its prediction call', async () => {
    const rows = (await post(app, user, '/feedback/query', { project_id: project, fields: ['feedback_type', 'weave_ref', 'runnable_ref', 'call_ref', 'payload'], sort_by: [{ field: 'created_at', direction: 'asc' }] })).json().result;
    expect(rows).toHaveLength(2);
    for (const row of rows) {
      expect(row).toMatchObject({
        feedback_type: 'wandb.runnable.correct',
        weave_ref: expect.stringMatching(new RegExp(`^weave:///${project}/call/`)),
        runnable_ref: expect.stringMatching(new RegExp(`^weave:///${project}/object/correct:`)),
      });
    }
    expect(rows.map((r: Record<string, any>) => r.payload)).toEqual([{ output: true }, { output: false }]);
    // The feedback hangs on the predict calls, which include_feedback shows.
    const predictIds = rows.map((r: Record<string, any>) => r.weave_ref.split('/').pop());
    const calls = (await post(app, user, '/calls/query', { project_id: project, filter: { call_ids: predictIds }, include_feedback: true })).json().calls;
    expect(calls).toHaveLength(2);
    for (const call of calls) expect(call.summary.weave.feedback).toEqual([expect.objectContaining({ feedback_type: 'wandb.runnable.correct' })]);
  });

  it('wrapOpenAI through the gateway records usage that include_costs prices with the project\'s price', async () => {
    expect(seen.content).toBe('Hello from the fake engine');
    await post(app, user, '/cost/create', { project_id: project, costs: { 'fake/base-model': { prompt_token_cost: 0.001, completion_token_cost: 0.002, effective_date: '2020-01-01T00:00:00Z' } } });
    const calls = (await post(app, user, '/calls/query', { project_id: project, include_costs: true, query: { $expr: { $contains: { input: { $getField: 'op_name' }, substr: { $literal: 'openai' } } } } })).json().calls;
    const llm = calls.find((c: Record<string, any>) => c.summary?.usage?.['fake/base-model']);
    expect(llm, JSON.stringify(calls.map((c: Record<string, any>) => c.op_name))).toBeDefined();
    expect(llm.summary.weave.costs['fake/base-model']).toMatchObject({
      prompt_tokens: 7,
      completion_tokens: 5,
      prompt_tokens_total_cost: expect.closeTo(0.007, 10),
      completion_tokens_total_cost: expect.closeTo(0.01, 10),
      pricing_level: 'project',
      pricing_level_id: project,
      created_by: expect.any(String),
    });
  });
});
