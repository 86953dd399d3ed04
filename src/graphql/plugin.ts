import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { execute, GraphQLError, Kind, parse, validate, visit, BREAK, type DocumentNode } from 'graphql';
import { z } from 'zod';
import { principalOf } from '../auth/plugin.js';
import { isRefusedValue, UNSTORABLE_CHARACTER } from '../db/refusals.js';
import { AppError } from '../errors.js';
import { bodyMayHoldUnstorable, registerJsonBodyParser, walkJson } from '../http/json-body.js';
import { WandbRequestError, type WandbService } from '../wandb/service.js';
import { checkExpandedCost, checkWrittenFields, GRAPHQL_LIMITS } from './limits.js';
import { rootValue, type GraphQLContext } from './resolvers.js';
import { schema } from './schema.js';

/** The documents the SDKs send are a few thousand characters at most; the token bound (limits.ts) is the tighter one. */
const GRAPHQL_QUERY_LENGTH = 100_000;

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
  if (original instanceof WandbRequestError || isRefusedValue(original)) return true;
  return original instanceof AppError && original.statusCode < 500;
}

function unstorable(where: string, text: string): string | undefined {
  const found = UNSTORABLE_CHARACTER.exec(text)?.[0];
  if (found === undefined) return undefined;
  const what = found === '\u0000' ? 'U+0000' : `a lone UTF-16 surrogate (U+${found.charCodeAt(0).toString(16).toUpperCase()})`;
  return `${where} holds ${what}, which is not text that can be stored; remove it.`;
}

/** `$name` and the keys after it, written as the message names a place in a variable (`$input.tags[2]`). */
function variablePath(name: string, keys: readonly (string | number)[]): string {
  let text = `$${name}`;
  for (const key of keys) text += typeof key === 'number' ? `[${key}]` : `.${key}`;
  return text;
}

/**
 * The first string argument or variable (at any depth) holding what `unstorable` refuses, described.
 * `variablesMayHold`: false when the body's text has no escape that could put such a string in a variable
 * (`bodyMayHoldUnstorable`); the variables, however large, are then not walked. A walk builds a message
 * only for the string it finds.
 */
export function unstorableString(document: DocumentNode, variables: Record<string, unknown>, variablesMayHold = true): string | undefined {
  let message: string | undefined;
  visit(document, {
    [Kind.STRING](node) {
      message = unstorable('A string in the query', node.value);
      return message ? BREAK : undefined;
    },
  });
  if (message || !variablesMayHold) return message;
  for (const [name, value] of Object.entries(variables)) {
    if (typeof value === 'string') {
      if (UNSTORABLE_CHARACTER.test(value)) return unstorable(`Variable $${name}`, value);
      continue;
    }
    walkJson(value, (item, path) => {
      // An object's keys are strings, an array's indexes numbers: only an object's key is text.
      const key = path[path.length - 1];
      if (typeof key === 'string' && UNSTORABLE_CHARACTER.test(key)) message = unstorable(`A key of variable ${variablePath(name, path.slice(0, -1))}`, key);
      else if (typeof item === 'string' && UNSTORABLE_CHARACTER.test(item)) message = unstorable(`Variable ${variablePath(name, path)}`, item);
      return message !== undefined;
    });
    if (message) return message;
  }
  return undefined;
}

function formatError(error: GraphQLError): { message: string; path?: (string | number)[] } {
  // The database's own wording of a refused value names no field and may quote internals.
  let message = isRefusedValue(error.originalError) ? 'A value in the request is out of the range or form that can be stored.' : error.message;
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
  // Strings holding U+0000 are refused below, as GraphQL errors, wherever they come from.
  registerJsonBodyParser(app);
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
        document = parse(request.body.query, { maxTokens: GRAPHQL_LIMITS.tokens, noLocation: true });
      } catch (error) {
        if (error instanceof GraphQLError) return { errors: [formatError(error)] };
        throw error;
      }
      // Bounds first: validate() is quadratic in same-named fields, execution exponential in fragment chains.
      const tooLarge = checkWrittenFields(document);
      if (tooLarge) return { errors: [{ message: tooLarge }] };
      const invalid = validate(schema, document);
      if (invalid.length) return { errors: invalid.map(formatError) };
      const refused = checkExpandedCost(document, request.body.variables ?? {}) ?? unstorableString(document, request.body.variables ?? {}, bodyMayHoldUnstorable(request));
      if (refused) return { errors: [{ message: refused }] };
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
