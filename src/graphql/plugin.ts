import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { principalOf } from '../auth/plugin.js';
import { answerGraphQL, GraphQLRequestError } from './viewer.js';

/** The documents the weave SDKs send are a few hundred characters. */
const GRAPHQL_QUERY_LENGTH = 100_000;

const GraphQLBody = z.object({
  query: z.string().max(GRAPHQL_QUERY_LENGTH).describe('A GraphQL document: `viewer { username defaultEntity { name } }`, `project(name, entityName) { name }` or `upsertModel(input) { model { name description } }`.'),
  variables: z
    .record(z.string().max(256), z.unknown())
    .refine((variables) => Object.keys(variables).length <= 100, 'at most 100 variables')
    .nullish(),
  operationName: z.string().max(256).nullish(),
});

const GraphQLResponse = z.object({
  data: z.record(z.string(), z.unknown()).nullable().optional(),
  errors: z.array(z.object({ message: z.string() })).optional(),
});

/**
 * POST /graphql: the W&B app-server query the weave SDKs send at init to find the key's default entity
 * (reference §4.3). The key's user is the viewer and its own entity the default entity. Any other
 * operation is answered with a GraphQL error body (HTTP 200, `errors`), as GraphQL servers do.
 */
export const graphqlPlugin: FastifyPluginAsyncZod = async (app) => {
  app.post(
    '/graphql',
    {
      schema: {
        tags: ['tracing'],
        summary: 'GraphQL: the init operations of the weave SDKs',
        description:
          'Answers `query { viewer { username defaultEntity { name } } }` (also id, entity, admin) for the key\'s user, `project(name, entityName) { name }` ' +
          '(existing for any entity the key reaches) and `upsertModel` (a success that changes nothing); anything else is a GraphQL error. ' +
          'The npm weave SDK sends it to https://<host>/graphql only, so over plain http use weave.init("entity/project").',
        body: GraphQLBody,
        response: { 200: GraphQLResponse },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      try {
        const viewer = { id: principal.userId, username: principal.username, admin: principal.isAdmin, entity: principal.entity, entities: principal.entities };
        return { data: answerGraphQL(request.body.query, viewer, request.body.variables ?? {}) };
      } catch (error) {
        if (error instanceof GraphQLRequestError) return { data: null, errors: [{ message: error.message }] };
        throw error;
      }
    },
  );
};
