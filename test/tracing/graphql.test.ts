import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, type TestUser } from '../helpers/app.js';
import { expectBadInputRejected } from '../helpers/bad-input.js';
import { basicAuth } from './helpers.js';
import { z } from 'zod';

let app: App;
let user: TestUser;

appWithUser((made) => ({ app, user } = made));

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

  it('answers a field outside the served subset, a bad document or an unreachable entity with a GraphQL error body', async () => {
    const hint = " trainyard serves only the part of W&B's GraphQL API that the weave and wandb SDKs use (docs/training.md, \"W&B API\").";
    const cases: [string, unknown][] = [
      ['{ project(name: "p", entityName: "someone-else") { name } }', { data: { project: null }, errors: [{ message: 'This API key cannot reach entity "someone-else".', path: ['project'] }] }],
      ['{ models { name } }', { errors: [{ message: `Cannot query field "models" on type "Query". Did you mean "model"?${hint}` }] }],
      ['{ viewer { photo } }', { errors: [{ message: `Cannot query field "photo" on type "User". Did you mean "photoUrl"?${hint}` }] }],
      ['{ viewer(id: 1) { username } }', { errors: [{ message: `Unknown argument "id" on field "Query.viewer".${hint}` }] }],
      ['mutation { deleteModel(id: "x") { success } }', { errors: [{ message: `Cannot query field "deleteModel" on type "Mutation". Did you mean "upsertModel"?${hint}` }] }],
      ['subscription { viewer { username } }', { data: null, errors: [{ message: 'Schema is not configured to execute subscription operation.' }] }],
      ['{ viewer { username }', { errors: [{ message: 'Syntax Error: Expected Name, found <EOF>.' }] }],
      ['{ viewer }', { errors: [{ message: 'Field "viewer" of type "User" must have a selection of subfields. Did you mean "viewer { ... }"?' }] }],
    ];
    for (const [query, body] of cases) {
      const response = await ask(query);
      expect(response.statusCode, query).toBe(200);
      expect(response.json(), query).toEqual(body);
    }
  });

  it('answers Python weave\'s Project query and UpsertModel mutation for an entity the key reaches (reference §4.3)', async () => {
    const askWith = (query: string, variables: Record<string, unknown>) =>
      app.inject({ method: 'POST', url: '/graphql', headers: { authorization: basicAuth(user.key), 'content-type': 'application/json' }, payload: { query, variables } });
    const project = await askWith(
      'query Project($name: String!, $entityName: String!) {\n  project(name: $name, entityName: $entityName) {\n    name\n  }\n}\n',
      { name: 'my-project', entityName: user.entity },
    );
    expect(project.statusCode).toBe(200);
    expect(project.json()).toEqual({ data: { project: { name: 'my-project' } } });
    const upsert = await askWith(
      'mutation UpsertModel($name: String!, $id: String, $entity: String!, $description: String, $repo: String) {\n' +
        '  upsertModel(input: {id: $id, name: $name, entityName: $entity, description: $description, repo: $repo}) {\n    model {\n      name\n      description\n    }\n  }\n}\n',
      { name: 'my-project', entity: user.entity, description: null, id: null, repo: null },
    );
    expect(upsert.statusCode).toBe(200);
    expect(upsert.json()).toEqual({ data: { upsertModel: { model: { name: 'my-project', description: null } } } });
    const other = await askWith('query Project($name: String!, $entityName: String!) { project(name: $name, entityName: $entityName) { name } }', {
      name: 'p',
      entityName: 'not-mine',
    });
    expect(other.json()).toEqual({ data: { project: null }, errors: [{ message: 'This API key cannot reach entity "not-mine".', path: ['project'] }] });
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
