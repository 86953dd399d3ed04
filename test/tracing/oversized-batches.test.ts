import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { post } from './helpers.js';

let app: App;
let user: TestUser;

beforeAll(async () => {
  // No auth cache: every request below authenticates against the database.
  app = await createTestApp({ AUTH_CACHE_TTL_MS: '0' });
  user = await createUserWithKey(app);
});
afterAll(async () => {
  await app.close();
});

/** Auth, a listing and the system check, each of which needs a working database connection. */
async function expectDatabaseServing(project: string) {
  const listing = await post(app, user, '/feedback/query', { project_id: project, limit: 1 });
  expect(listing.statusCode, listing.body).toBe(200);
  expect(listing.json().result).toHaveLength(1);
  const check = await app.inject({ method: 'GET', url: '/v1/system-check' });
  expect(check.json().database).toEqual({ success: true, duration_ms: expect.any(Number) });
  const models = await app.inject({ method: 'GET', url: '/v1/models', headers: user.headers });
  expect(models.statusCode, models.body).toBe(200);
}

describe('multi-row writes past the bind-parameter limit', () => {
  it('/feedback/batch/create stores 10,000 items and the database keeps serving', async () => {
    const project = `${user.entity}/${uniqueName('big')}`;
    const batch = Array.from({ length: 10_000 }, (_, i) => ({
      project_id: project,
      weave_ref: `weave:///${project}/call/c${i}`,
      feedback_type: 'custom',
      payload: { i },
    }));
    const response = await post(app, user, '/feedback/batch/create', { batch });
    expect(response.statusCode, response.body.slice(0, 500)).toBe(200);
    expect(response.json().res).toHaveLength(10_000);
    const count = await post(app, user, '/feedback/query', { project_id: project, fields: ['count(*)'] });
    expect(count.json().result).toEqual([{ 'count(*)': 10_000 }]);
    await expectDatabaseServing(project);
  });

  it('/cost/create stores 10,000 model prices and the database keeps serving', async () => {
    const project = `${user.entity}/${uniqueName('big')}`;
    const costs = Object.fromEntries(
      Array.from({ length: 10_000 }, (_, i) => [`model-${i}`, { prompt_token_cost: 1e-6, completion_token_cost: 2e-6 }]),
    );
    const response = await post(app, user, '/cost/create', { project_id: project, costs });
    expect(response.statusCode, response.body.slice(0, 500)).toBe(200);
    expect(response.json().ids).toHaveLength(10_000);
    await post(app, user, '/feedback/create', { project_id: project, weave_ref: `weave:///${project}/call/c`, feedback_type: 'x', payload: {} });
    await expectDatabaseServing(project);
  });
});
