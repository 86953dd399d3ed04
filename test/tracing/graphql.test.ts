import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, type TestUser } from '../helpers/app.js';
import { expectBadInputRejected } from '../helpers/bad-input.js';
import { basicAuth } from './helpers.js';
import { z } from 'zod';

let app: App;
let user: TestUser;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
});
afterAll(async () => {
  await app.close();
});

const ask = (query: string, key = user.key) =>
  app.inject({ method: 'POST', url: '/graphql', headers: { authorization: basicAuth(key), 'content-type': 'application/json' }, payload: { query } });

describe('POST /graphql', () => {
  it('answers the weave SDKs\' DefaultEntity query from the key\'s user', async () => {
    const response = await ask('query DefaultEntity {\n  viewer {\n    username\n    defaultEntity {\n      name\n    }\n  }\n}\n');
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ data: { viewer: { username: user.username, defaultEntity: { name: user.entity } } } });
  });

  it('honours aliases, an anonymous query and __typename', async () => {
    const response = await ask('{ me: viewer { __typename name: username defaultEntity { name } } }');
    expect(response.json()).toEqual({ data: { me: { __typename: 'User', name: user.username, defaultEntity: { name: user.entity } } } });
  });

  it('answers any other query with a GraphQL error body', async () => {
    const cases: [string, string][] = [
      ['query Project($name: String!, $entityName: String!) { project(name: $name, entityName: $entityName) { name } }', 'Field "project" takes no arguments here.'],
      ['{ models { name } }', 'Cannot query field "models" on type "Query". Only viewer { username defaultEntity { name } } is supported.'],
      ['{ viewer { email } }', 'Cannot query field "email" on type "User".'],
      ['mutation UpsertModel { upsertModel { model { name } } }', 'Only the viewer query is supported, not a mutation.'],
      ['{ viewer { username }', 'Syntax Error: Expected Name, found <EOF>.'],
      ['{ viewer }', 'Field "viewer" of type "User" must have a selection of subfields.'],
    ];
    for (const [query, message] of cases) {
      const response = await ask(query);
      expect(response.statusCode, query).toBe(200);
      expect(response.json(), query).toEqual({ data: null, errors: [{ message }] });
    }
  });

  it('needs a key, and rejects bad bodies', async () => {
    const anonymous = await app.inject({ method: 'POST', url: '/graphql', payload: { query: '{ viewer { username } }' } });
    expect(anonymous.statusCode).toBe(401);
    await expectBadInputRejected(app, {
      request: { method: 'POST', url: '/graphql', headers: user.headers },
      schema: z.object({ query: z.string() }),
      valid: { query: '{ viewer { username } }' },
      family: 'tracing',
    });
  });
});
