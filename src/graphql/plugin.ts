import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { execute, GraphQLError, parse, validate, type DocumentNode } from 'graphql';
import { z } from 'zod';
import { principalOf } from '../auth/plugin.js';
import { AppError } from '../errors.js';
import { registerJsonBodyParser } from '../http/json-body.js';
import { WandbRequestError, type WandbService } from '../wandb/service.js';
import { rootValue, type GraphQLContext } from './resolvers.js';
import { schema } from './schema.js';

/** The documents the SDKs send are a few thousand characters; the longest, with fragments, about 3,000. */
const GRAPHQL_QUERY_LENGTH = 100_000;
/** graphql-js stops parsing past this many tokens: a bound on the work one document can ask for. */
const MAX_TOKENS = 20_000;

const GraphQLBody = z.object({
  query: z.string().max(GRAPHQL_QUERY_LENGTH).describe('A GraphQL document over the W&B schema subset in src/graphql/schema.ts.'),
  variables: z
    .record(z.string().max(256), z.unknown())
    .refine((variables) => Object.keys(variables).length <= 100, 'at most 100 variables')
    .nullish(),
  operationName: z.string().max(256).nullish(),
});

const GraphQLResponse = z.object({
  data: z.record(z.string(), z.unknown()).nullable().optional(),
  errors: z.array(z.object({ message: z.string(), path: z.array(z.union([z.string(), z.number()])).optional() })).optional(),
});

const UNSUPPORTED_HINT = " trainyard serves only the part of W&B's GraphQL API that the weave and wandb SDKs use (docs/training.md, \"W&B API\").";

/** A client's mistake, reported in `errors`; anything else is the server's and goes to the error handler. */
function isClientError(error: GraphQLError): boolean {
  const original = error.originalError;
  if (!original || original instanceof GraphQLError) return true;
  if (original instanceof WandbRequestError) return true;
  return original instanceof AppError && original.statusCode < 500;
}

function formatError(error: GraphQLError): { message: string; path?: (string | number)[] } {
  let message = error.message;
  if (/^Cannot query field |^Unknown argument |^Field ".*" is not defined by type /.test(message)) message += UNSUPPORTED_HINT;
  return error.path ? { message, path: [...error.path] } : { message };
}

/**
 * POST /graphql: a GraphQL engine (graphql-js) over the subset of W&B's schema that the weave SDKs ask at
 * init and the wandb SDK uses for runs and artifacts. Requests are parsed, validated and executed
 * against the schema, so aliases, fragments, variables with defaults and `@include` behave as on W&B;
 * a field outside the subset is a validation error that says so (HTTP 200, `errors`).
 */
export const graphqlPlugin: FastifyPluginAsyncZod<{ wandb: WandbService }> = async (app, options) => {
  // Run and artifact fields are stored as text, which cannot hold U+0000: a 422 naming the field instead.
  registerJsonBodyParser(app, { rejectNul: true });
  app.post(
    '/graphql',
    {
      schema: {
        tags: ['tracing'],
        summary: 'GraphQL: the W&B API subset of the weave and wandb SDKs',
        description:
          'The viewer and project queries the weave SDKs send at init, and the runs and artifacts operations of the wandb SDK (docs/training.md, "W&B API"). ' +
          'Any other field is a GraphQL error naming it. The npm weave SDK sends it to https://<host>/graphql only, so over plain http use weave.init("entity/project").',
        body: GraphQLBody,
        response: { 200: GraphQLResponse },
      },
    },
    async (request) => {
      const principal = principalOf(request);
      let document: DocumentNode;
      try {
        document = parse(request.body.query, { maxTokens: MAX_TOKENS, noLocation: true });
      } catch (error) {
        if (error instanceof GraphQLError) return { errors: [formatError(error)] };
        throw error;
      }
      const invalid = validate(schema, document);
      if (invalid.length) return { errors: invalid.map(formatError) };
      const contextValue: GraphQLContext = { principal, wandb: options.wandb, baseUrl: `${request.protocol}://${request.host}` };
      const result = await execute({
        schema,
        document,
        rootValue,
        contextValue,
        variableValues: request.body.variables ?? {},
        operationName: request.body.operationName || undefined,
      });
      const serverFault = result.errors?.find((error) => !isClientError(error));
      if (serverFault) throw serverFault.originalError;
      return result.errors?.length ? { data: (result.data as Record<string, unknown> | null | undefined) ?? null, errors: result.errors.map(formatError) } : { data: result.data as Record<string, unknown> };
    },
  );
};
