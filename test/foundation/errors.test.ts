import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POOL_TIMEOUT_MESSAGE } from '../../src/db/faults.js';
import { registerJsonBodyParser } from '../../src/http/json-body.js';
import { z } from 'zod';
import { CreateKeyBody, CreateUserBody } from '../../src/admin/routes.js';
import type { App } from '../../src/app.js';
import { ConflictError, NotFoundError } from '../../src/errors.js';
import { createTestApp, createUserWithKey, type TestUser } from '../helpers/app.js';
import { expectBadInputRejected } from '../helpers/bad-input.js';
import { databaseFingerprint } from '../helpers/tenants.js';

let app: App;
let admin: TestUser;

beforeAll(async () => {
  app = await createTestApp({ BODY_LIMIT_MB: '1' }, (a) => {
    a.get('/v1/probe/boom', async () => {
      throw new Error('secret internal detail at /srv/db.ts:12');
    });
    for (const url of ['/v1/probe/gone', '/v1/models/gone', '/traces/gone']) {
      a.get(url, async () => {
        throw new NotFoundError('widget', 'w-1', { extra: url.startsWith('/traces') ? { deleted_at: '2026-01-01T00:00:00Z' } : {} });
      });
    }
    a.get('/v1/models/conflict', async () => {
      throw new ConflictError('Already there.', { param: 'name', code: 'duplicate' });
    });
    a.get('/v1/probe/out-of-range', async () => sql`select 2147483648::int as n`.execute(a.db));
    a.get('/v1/probe/pool-exhausted', async () => {
      throw new Error(POOL_TIMEOUT_MESSAGE);
    });
    a.post('/v1/probe/store', async (request) => request.body);
    a.post('/v1/models/validate', { schema: { body: z.object({ temperature: z.number().min(0).max(2) }) } }, async () => ({}));
  });
  admin = await createUserWithKey(app, { isAdmin: true });
});
afterAll(async () => {
  await app.close();
});

const json = (_body: string) => ({ 'content-type': 'application/json' });

describe('validation errors (422, FastAPI detail form)', () => {
  it('name each missing and mistyped body field with its location, input and context', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/v1/admin/keys',
      headers: { ...admin.headers, ...json('') },
      payload: JSON.stringify({ name: 'x'.repeat(201), kind: 'robot' }),
    });
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({
      detail: [
        { type: 'missing', loc: ['body', 'username'], msg: 'Field required', input: { name: 'x'.repeat(201), kind: 'robot' } },
        {
          type: 'string_too_long',
          loc: ['body', 'name'],
          msg: 'String should have at most 200 characters',
          input: 'x'.repeat(201),
          ctx: { max_length: 200 },
        },
        { type: 'literal_error', loc: ['body', 'kind'], msg: "Input should be 'user' or 'worker'", input: 'robot', ctx: { expected: "'user' or 'worker'" } },
      ],
    });
  });

  it('report a missing body as the body missing', async () => {
    const response = await app.inject({ method: 'POST', url: '/v1/admin/users', headers: admin.headers });
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({ detail: [{ type: 'missing', loc: ['body'], msg: 'Field required', input: null }] });
  });

  it('report invalid JSON as json_invalid with the position', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/v1/admin/users',
      headers: { ...admin.headers, ...json('') },
      payload: '{"username": "x",}',
    });
    expect(response.statusCode).toBe(422);
    const [detail] = response.json().detail;
    expect(detail).toMatchObject({ type: 'json_invalid', loc: ['body', 17], msg: 'JSON decode error', input: {} });
    expect(detail.ctx.error).toEqual(expect.any(String));
  });

  it('locate query and path errors under "query" and "path"', async () => {
    const query = await app.inject({ method: 'GET', url: '/v1/admin/keys?username=', headers: admin.headers });
    expect(query.statusCode).toBe(422);
    expect(query.json()).toEqual({
      detail: [{ type: 'string_too_short', loc: ['query', 'username'], msg: 'String should have at least 1 character', input: '', ctx: { min_length: 1 } }],
    });
    const path = await app.inject({ method: 'POST', url: '/v1/admin/keys/not-a-uuid/revoke', headers: admin.headers });
    expect(path.statusCode).toBe(422);
    expect(path.json().detail[0]).toMatchObject({ type: 'uuid_parsing', loc: ['path', 'key_id'], msg: 'Input should be a valid UUID', input: 'not-a-uuid' });
  });

  it('give the openai SDKs an error envelope beside the detail on the inference API', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/v1/models/validate',
      headers: { ...admin.headers, ...json('') },
      payload: JSON.stringify({ temperature: 3 }),
    });
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({
      detail: [{ type: 'less_than_equal', loc: ['body', 'temperature'], msg: 'Input should be less than or equal to 2', input: 3, ctx: { le: 2 } }],
      error: {
        message: 'body.temperature: Input should be less than or equal to 2',
        type: 'invalid_request_error',
        param: 'temperature',
        code: 'less_than_equal',
      },
    });
  });

  it('every generated invalid body for the admin routes is rejected with nothing written', async () => {
    await expectBadInputRejected(app, {
      request: { method: 'POST', url: '/v1/admin/users', headers: admin.headers },
      schema: CreateUserBody,
      valid: { username: 'never-created', is_admin: false },
      family: 'training',
    });
    await expectBadInputRejected(app, {
      request: { method: 'POST', url: '/v1/admin/keys', headers: admin.headers },
      schema: CreateKeyBody,
      valid: { username: admin.username, name: 'ci', kind: 'user' },
      family: 'training',
    });
  });

  it('the bad-input helper fails on a route that accepts a bad body', async () => {
    const loose = z.object({ username: z.string(), extra: z.number() });
    await expect(
      expectBadInputRejected(app, {
        request: { method: 'POST', url: '/v1/admin/users', headers: admin.headers },
        schema: loose,
        valid: { username: 'accepted-anyway', extra: 1 },
        family: 'training',
      }),
    ).rejects.toThrow(/extra is missing: .*expected 201 to be greater than or equal to 400/);
  });
});

describe('NUL characters', () => {
  it('are refused with the field named where a scope asks for it, and kept where it does not', async () => {
    const strict = await createTestApp({}, (a) =>
      a.register(async (scope) => {
        registerJsonBodyParser(scope, { rejectNul: true });
        scope.post('/v1/probe/strict', { config: { auth: 'none' } }, async (request) => request.body);
      }),
    );
    try {
      const refused = await strict.inject({
        method: 'POST',
        url: '/v1/probe/strict',
        headers: { 'content-type': 'application/json' },
        payload: '{"groups":[{"text":"ok"},{"text":"bad\\u0000"}]}',
      });
      expect(refused.statusCode).toBe(422);
      expect(refused.json()).toEqual({
        detail: [
          {
            type: 'string_nul',
            loc: ['body', 'groups', 1, 'text'],
            msg: 'String should not contain the NUL character (\\u0000)',
            input: null,
            ctx: { error: 'PostgreSQL cannot store U+0000 in text' },
          },
        ],
      });
      const escaped = await strict.inject({
        method: 'POST',
        url: '/v1/probe/strict',
        headers: { 'content-type': 'application/json' },
        payload: JSON.stringify({ note: 'a \\u0000 is only text here' }),
      });
      expect(escaped.statusCode).toBe(200);
      expect(escaped.json()).toEqual({ note: 'a \\u0000 is only text here' });
    } finally {
      await strict.close();
    }
    const lenient = await app.inject({
      method: 'POST',
      url: '/v1/probe/store',
      headers: { ...admin.headers, 'content-type': 'application/json' },
      payload: JSON.stringify({ text: 'nul\u0000' }),
    });
    expect(lenient.json()).toEqual({ text: 'nul\u0000' });
  });
});

describe('other client errors', () => {
  it('415 for a body that is not JSON', async () => {
    const before = await databaseFingerprint(app);
    const response = await app.inject({
      method: 'POST',
      url: '/v1/admin/users',
      headers: { ...admin.headers, 'content-type': 'text/plain' },
      payload: 'username=x',
    });
    expect(response.statusCode).toBe(415);
    expect(response.json()).toEqual({ detail: 'Unsupported content type: text/plain. Send application/json.' });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('413 for a body over the configured limit', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/v1/admin/users',
      headers: { ...admin.headers, ...json('') },
      payload: JSON.stringify({ username: 'big', padding: 'x'.repeat(1024 * 1024) }),
    });
    expect(response.statusCode).toBe(413);
    expect(response.json()).toEqual({ detail: 'Request body is larger than the limit of 1048576 bytes.' });
  });

  it('404 for an unknown route in each API form, without needing a key', async () => {
    // Unserved /v1 paths outside the training API's families read as OpenAI routes the gateway does not serve.
    expect((await app.inject({ method: 'GET', url: '/v1/nothing-here' })).json()).toEqual({
      error: { message: 'No route for GET /v1/nothing-here.', type: 'invalid_request_error', param: null, code: 'not_found' },
    });
    expect((await app.inject({ method: 'GET', url: '/v1/preview/nothing-here' })).json()).toEqual({ detail: 'No route for GET /v1/preview/nothing-here.' });
    const inference = await app.inject({ method: 'POST', url: '/v1/chat/completions/extra/x' });
    expect(inference.statusCode).toBe(404);
    expect(inference.json()).toEqual({
      error: { message: 'No route for POST /v1/chat/completions/extra/x.', type: 'invalid_request_error', param: null, code: 'not_found' },
    });
    expect((await app.inject({ method: 'POST', url: '/traces/nothing?x=1' })).json()).toEqual({ reason: 'No route for POST /traces/nothing.' });
  });

  it('404 for an unknown route without reading its JSON body, valid or not, with or without a key', async () => {
    for (const payload of ['{"not json', `{"deep": ${'['.repeat(100_000)}${']'.repeat(100_000)}}`]) {
      for (const headers of [{}, admin.headers]) {
        const response = await app.inject({ method: 'POST', url: '/nope', headers: { ...headers, ...json('') }, payload });
        expect(response.statusCode).toBe(404);
        expect(response.json()).toEqual({ detail: 'No route for POST /nope.' });
      }
    }
  });

  it('typed service errors map to each API form with their extra fields', async () => {
    const training = await app.inject({ method: 'GET', url: '/v1/probe/gone', headers: admin.headers });
    expect(training.statusCode).toBe(404);
    expect(training.json()).toEqual({ detail: 'widget w-1 not found' });
    const tracing = await app.inject({ method: 'GET', url: '/traces/gone', headers: admin.headers });
    expect(tracing.json()).toEqual({ reason: 'widget w-1 not found', deleted_at: '2026-01-01T00:00:00Z' });
    const inference = await app.inject({ method: 'GET', url: '/v1/models/conflict', headers: admin.headers });
    expect(inference.statusCode).toBe(409);
    expect(inference.json()).toEqual({ error: { message: 'Already there.', type: 'invalid_request_error', param: 'name', code: 'duplicate' } });
  });

  it('a value the database refuses is a 422, not a 500', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/probe/out-of-range', headers: admin.headers });
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({
      detail: [
        {
          type: 'value_error',
          loc: ['body'],
          msg: 'Value error, a value in the request is out of the range or form the database accepts (too large a number, too long a name, or a NUL character)',
          input: null,
          ctx: { error: 'SQLSTATE 22003' },
        },
      ],
    });
  });

  it('a database pool with no free connection answers 503, not a hang or a 500', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/probe/pool-exhausted', headers: admin.headers });
    expect(response.statusCode).toBe(503);
    expect(response.json()).toEqual({
      detail: 'The database is busy: no connection became free in time (DATABASE_POOL_TIMEOUT_MS). Try again shortly.',
    });
  });

  it('an unexpected error is a 500 with no internals in the body', async () => {
    const response = await app.inject({ method: 'GET', url: '/v1/probe/boom', headers: admin.headers });
    expect(response.statusCode).toBe(500);
    expect(response.json()).toEqual({
      detail: 'Internal server error. The request id in the x-request-id header identifies it in the server log.',
    });
    expect(response.body).not.toContain('secret');
  });

  it('409 when a name is taken, in the training form', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/v1/admin/users',
      headers: { ...admin.headers, ...json('') },
      payload: JSON.stringify({ username: admin.username }),
    });
    expect(response.statusCode).toBe(409);
    expect(response.json()).toEqual({ detail: `The name ${admin.username} is already taken by a user or team.` });
  });
});
