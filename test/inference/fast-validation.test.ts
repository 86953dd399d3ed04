import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { App } from '../../src/app.js';
import { parseJsonBody } from '../../src/http/json-body.js';
import { coerceLaxFields, holdIntegers, parseExactJson, stringifyExact } from '../../src/inference/exact-json.js';
import { fastChatBody, fastCompletionBody } from '../../src/inference/fast-validation.js';
import { engineRequestText } from '../../src/inference/gateway.js';
import type { Route } from '../../src/inference/router.js';
import { ChatCompletionRequest, COMPLETION_LAX_FIELDS, CompletionRequest, LAX_FIELDS } from '../../src/inference/schemas.js';
import { createUserWithKey, type TestUser } from '../helpers/app.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { backendEntry, checkpointAdapter, createGatewayApp, createTrainedModel } from './gateway-helpers.js';

/** Switches the routes' fast path off, to compare an answer with the one the schema alone gives. */
const fastPath = vi.hoisted(() => ({ on: true }));
vi.mock('../../src/inference/fast-validation.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../src/inference/fast-validation.js')>();
  return {
    ...real,
    fastChatBody: (body: unknown) => (fastPath.on ? real.fastChatBody(body) : undefined),
    fastCompletionBody: (body: unknown) => (fastPath.on ? real.fastCompletionBody(body) : undefined),
  };
});

// ---- Bodies around the schemas' bounds ----

const MODEL = 'fake/base-model';
const NAME_MAX = 4096;

/** A field's value: the plain forms the fast path takes, their bounds, and every other kind. */
const scalar = fc.oneof(
  fc.constantFrom(-2, -1.5, -1, -0, 0, 1e-6, 0.5, 1, 1.5, 2, 2.0000001, 3, 100, 2 ** 53 - 1, 2 ** 53, -(2 ** 53) + 1, 1e300),
  fc.integer({ min: -3, max: 300 }),
  fc.double({ min: -3, max: 3, noNaN: true }),
  fc.constantFrom(true, false, null, '16', '0.5', 'true', 'yes', '1', ' 2 ', '', 'x', [], {}, [1], 9223372036854775807n, -9223372036854775808n, 9223372036854775808n, 12345678901234567890n),
);
const name = fc.oneof(
  fc.constantFrom(MODEL, '', 'other/model', 'x'.repeat(NAME_MAX), 'x'.repeat(NAME_MAX + 1), 'stop'),
  fc.string({ maxLength: 8 }),
  scalar,
);
const contentPart = fc.oneof(
  fc.record({ type: fc.constant('text'), text: fc.string({ maxLength: 5 }) }),
  fc.record({ image_url: fc.record({ url: fc.constant('data:image/png;base64,AAAA') }) }),
  fc.record({ text: fc.string({ maxLength: 5 }) }),
);
const content = fc.oneof(fc.string({ maxLength: 12 }), fc.constant(null), fc.array(contentPart, { maxLength: 2 }), scalar);
const role = fc.oneof(fc.constantFrom('user', 'system', 'assistant', 'tool', ''), name);
/** Messages: `{role, content}` mostly, in either key order, sometimes with more keys or fewer. */
const message = fc.oneof(
  { weight: 6, arbitrary: fc.record({ role: fc.constantFrom('user', 'system', 'assistant'), content: fc.string({ maxLength: 12 }) }) },
  { weight: 1, arbitrary: fc.record({ content: fc.string({ maxLength: 12 }), role: fc.constantFrom('user', 'assistant') }) },
  { weight: 2, arbitrary: fc.record({ role, content }, { requiredKeys: [] }) },
  { weight: 1, arbitrary: fc.record({ role: fc.constant('user'), content: fc.constant('Hi'), name: name, tool_calls: fc.constant(null), extra: scalar }, { requiredKeys: ['role'] }) },
  { weight: 1, arbitrary: scalar },
);
const messages = fc.oneof({ weight: 8, arbitrary: fc.array(message, { minLength: 1, maxLength: 3 }) }, { weight: 1, arbitrary: fc.constant([]) }, { weight: 1, arbitrary: scalar });
const stop = fc.oneof(fc.constantFrom('\n', '', 'x'.repeat(NAME_MAX + 1)), fc.array(fc.constantFrom('a', '', '###'), { maxLength: 3 }), scalar);
const streamOptions = fc.oneof(
  fc.record({ include_usage: fc.oneof(fc.boolean(), scalar), continuous_usage_stats: fc.oneof(fc.boolean(), scalar) }, { requiredKeys: [] }),
  fc.record({ continuous_usage_stats: fc.boolean(), include_usage: fc.boolean() }),
  fc.record({ include_usage: fc.boolean(), other: scalar }),
  scalar,
);
/** Mostly values within a field's bounds, sometimes one at or just past them. */
const edge = (within: fc.Arbitrary<unknown>, ...bounds: unknown[]) => fc.oneof({ weight: 8, arbitrary: within }, { weight: 1, arbitrary: fc.constantFrom(...bounds) });
/** Each field's plain values. */
const sampling = {
  max_tokens: edge(fc.integer({ min: 1, max: 200 }), 0, 1, -1, 2 ** 53 - 1),
  n: edge(fc.integer({ min: 1, max: 3 }), 0, 1),
  seed: edge(fc.integer(), 0, -1, 2 ** 53 - 1, -(2 ** 53) + 1, 2 ** 53),
  temperature: edge(fc.double({ min: 0, max: 2, noNaN: true }), 0, -0, 1e-6, 2, 2.0000001, -0.1),
  top_p: edge(fc.double({ min: Number.MIN_VALUE, max: 1, noNaN: true }), 0, 1, 1.0000001),
  top_k: edge(fc.integer({ min: -1, max: 50 }), -2, -1, 0),
  min_p: edge(fc.double({ min: 0, max: 1, noNaN: true }), -0.1, 0, 1, 1.1),
  frequency_penalty: edge(fc.double({ min: -2, max: 2, noNaN: true }), -2, 2, -2.1, 2.1),
  presence_penalty: edge(fc.constantFrom(-1, 0, 0.1), -2, 2, -2.5, 2.5),
  stop: edge(fc.oneof(fc.constantFrom('\n', '###'), fc.array(fc.constantFrom('a', '###'), { maxLength: 3 })), '', ['a', ''], 'x'.repeat(NAME_MAX), 'x'.repeat(NAME_MAX + 1)),
  stream: fc.boolean(),
  user: edge(fc.string({ maxLength: 6 }), '', 'x'.repeat(NAME_MAX), 'x'.repeat(NAME_MAX + 1)),
};
const chatFields = { ...sampling, logprobs: fc.boolean(), max_completion_tokens: edge(fc.integer({ min: 1, max: 5 }), 0) };
const completionFields = { ...sampling, logprobs: edge(fc.integer({ min: -1, max: 5 }), -2), echo: fc.boolean() };

/** Anything in any field: other types, nulls, numeric strings, big integers, lists and objects. */
const anything = fc.oneof(scalar, name, messages, stop, streamOptions, content);
/** Fields the fast path leaves to the schema, and keys no schema names. */
const OTHER_KEYS = ['top_logprobs', 'prompt_logprobs', 'min_tokens', 'use_beam_search', 'engine_xargs', 'request_id', 'prompt_embeds', 'suffix', 'unknown_field', 'stream_options'];

/**
 * Common bodies (a model and messages or a prompt, some plain fields, in either order), a third of
 * them changed in one or two places: a field given any value, or a key added.
 */
function bodies(required: Record<string, fc.Arbitrary<unknown>>, fields: Record<string, fc.Arbitrary<unknown>>): fc.Arbitrary<Record<string, unknown>> {
  const keys = [...Object.keys(required), ...Object.keys(fields), 'model', ...OTHER_KEYS];
  return fc
    .tuple(
      fc.record({ model: fc.constant(MODEL), ...required }),
      fc.record(fields, { requiredKeys: [] }),
      fc.option(fc.record({ stream: fc.constant(true), stream_options: fc.record({ include_usage: fc.boolean() }, { requiredKeys: [] }) })),
      fc.oneof({ weight: 2, arbitrary: fc.constant([]) }, { weight: 1, arbitrary: fc.array(fc.tuple(fc.constantFrom(...keys), anything), { minLength: 1, maxLength: 2 }) }),
      fc.boolean(),
    )
    .map(([first, rest, streamed, changes, modelLast]) => {
      const body: Record<string, unknown> = modelLast ? { ...rest, ...first } : { ...first, ...rest, ...streamed };
      for (const [key, value] of changes) body[key] = value;
      return body;
    });
}

const chatBody = bodies({ messages: fc.array(fc.record({ role: fc.constantFrom('user', 'system', 'assistant'), content: fc.string({ maxLength: 12 }) }), { minLength: 1, maxLength: 3 }) }, chatFields);
const prompt = edge(fc.string({ maxLength: 12 }), ['a', 'b'], [1, 2, 3], [[1, 2]], [], '');
const completionBody = bodies({ prompt }, completionFields);

/** What the routes' hooks make of a body text before validation (routes.ts exactBodies). */
function beforeValidation(text: string, lax: Readonly<Record<string, 'int' | 'float' | 'bool'>>): unknown {
  const { value, exact } = parseExactJson(text);
  const coerced = coerceLaxFields(value, lax);
  if (exact || coerced) holdIntegers(value);
  return value;
}

const kinds = [
  { endpoint: 'chat', path: '/v1/chat/completions', bodies: chatBody, fast: fastChatBody, schema: ChatCompletionRequest, lax: LAX_FIELDS },
  { endpoint: 'completions', path: '/v1/completions', bodies: completionBody, fast: fastCompletionBody, schema: CompletionRequest, lax: COMPLETION_LAX_FIELDS },
] as const;

describe.each(kinds)('the fast path of $endpoint validation', ({ bodies, fast, schema, lax }) => {
  it('accepts only bodies the schema accepts, giving the schema\'s output field for field, in its order', () => {
    let accepted = 0;
    fc.assert(
      fc.property(bodies, (body) => {
        let value: unknown;
        try {
          value = beforeValidation(stringifyExact(body), lax);
        } catch {
          return; // An int64 bound the hooks refuse before validation.
        }
        const output = fast(value);
        if (output === undefined) return;
        accepted++;
        const full = schema.safeParse(value);
        expect(full.success, JSON.stringify(full.error?.issues)).toBe(true);
        expect(output).toEqual(full.data);
        expect(JSON.stringify(output)).toBe(JSON.stringify(full.data));
      }),
      { numRuns: 300 },
    );
    // The generator reaches the fast path often (a third of the time or so), not only its refusals.
    expect(accepted).toBeGreaterThan(30);
  });

  it('outputs the body\'s fields in the schema\'s order, as zod does', () => {
    const reordered = { ...(fast === fastChatBody ? { messages: [{ role: 'user', content: 'Hi' }] } : { prompt: 'Hi' }), stream: false, max_tokens: 5, model: MODEL };
    expect(Object.keys(fast(reordered)!)).toEqual(Object.keys(schema.parse(reordered)));
  });
});

describe('the fast path leaves to the schema', () => {
  const base = { model: MODEL, messages: [{ role: 'user', content: 'Hi' }] };
  it.each([
    ['an unknown key', { ...base, extra: 1 }],
    ['a null field', { ...base, temperature: null }],
    ['a numeric string', { ...base, max_tokens: '16' }],
    ['an empty model', { ...base, model: '' }],
    ['no messages', { model: MODEL }],
    ['a message with a name', { ...base, messages: [{ role: 'user', content: 'Hi', name: 'a' }] }],
    ['content parts', { ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }] }],
    ['a message whose content comes before its role', { ...base, messages: [{ content: 'Hi', role: 'user' }] }],
    ['stream_options without stream', { ...base, stream_options: { include_usage: true } }],
    ['n > 1 under greedy sampling', { ...base, n: 2, temperature: 0 }],
    ['a fractional max_tokens', { ...base, max_tokens: 1.5 }],
    ['an integer beyond 2^53', { ...base, seed: 2 ** 53 }],
  ])('%s', (_name, body) => {
    expect(fastChatBody(body)).toBeUndefined();
  });
});

describe('the engine body as the client wrote it', () => {
  const route = (overrides: Partial<Route> = {}) => ({ engineModel: MODEL, baseModel: MODEL, trainable: false, ...overrides }) as Route;
  const text = '{"model":"fake/base-model", "messages":[{"role":"user","content":"Hi"}]}\n';
  const body = { model: MODEL, messages: [{ role: 'user', content: 'Hi' }] };

  it('is the text itself when nothing in it changes', () => {
    expect(engineRequestText(text, body, route(), false)).toBe(text);
  });

  it('gets the metered stream_options at its end when streamed without them', () => {
    expect(engineRequestText(text, { ...body, stream: true }, route(), true)).toBe(
      '{"model":"fake/base-model", "messages":[{"role":"user","content":"Hi"}],"stream_options":{"include_usage":true,"continuous_usage_stats":false}}',
    );
  });

  it('is not used for a renamed model, a trainable one, engine_xargs or a stream with stream_options', () => {
    expect(engineRequestText(text, body, route({ engineModel: 'adapter-1' }), false)).toBeUndefined();
    expect(engineRequestText(text, body, route({ trainable: true }), false)).toBeUndefined();
    expect(engineRequestText(text, { ...body, engine_xargs: { a: 1 } }, route(), false)).toBeUndefined();
    expect(engineRequestText(text, { ...body, stream: true, stream_options: { include_usage: true } }, route(), true)).toBeUndefined();
  });
});

describe('JSON bodies', () => {
  it('drop __proto__ and constructor.prototype keys, written plainly or with escapes', () => {
    for (const text of ['{"a":1,"__proto__":{"x":1}}', '{"a":1,"\\u005f_proto__":{"x":1}}', '{"a":1,"_\\u005Fpr\\u006fto__":{"x":1}}']) {
      const value = parseJsonBody(text) as Record<string, unknown>;
      expect(Object.keys(value)).toEqual(['a']);
      expect(Object.hasOwn(value, '__proto__')).toBe(false);
      expect((value as { x?: unknown }).x).toBeUndefined();
    }
    for (const text of ['{"a":1,"constructor":{"prototype":{"x":1}}}', '{"a":1,"\\u0063onstructor":{"prototype":{"x":1}}}']) {
      expect(parseJsonBody(text)).toEqual({ a: 1 });
    }
  });

  it('read a byte order mark as secure-json-parse does', () => {
    expect(parseJsonBody('\ufeff{"a":1}')).toEqual({ a: 1 });
  });

  it('answer invalid JSON with json_invalid at its position', () => {
    expect(() => parseJsonBody('{"a":1,}')).toThrowError(
      expect.objectContaining({
        detail: [{ type: 'json_invalid', loc: ['body', 7], msg: 'JSON decode error', input: {}, ctx: { error: expect.stringContaining('position 7') } }],
      }),
    );
  });
});

// ---- Through the app ----

let engine: FakeEngine;
let app: App;
let trainableApp: App;
let user: TestUser;
let trainableUser: TestUser;

beforeAll(async () => {
  engine = await startFakeEngine();
  [app, trainableApp] = await Promise.all([
    createGatewayApp([backendEntry('main', [engine.url])]),
    createGatewayApp([backendEntry('main', [engine.url])], { TRAINABLE_BASE_MODELS: MODEL }),
  ]);
  [user, trainableUser] = await Promise.all([createUserWithKey(app), createUserWithKey(trainableApp)]);
  await createTrainedModel(app, { entity: user.entity, project: 'proj', name: 'agent', steps: [1] });
});
afterAll(async () => {
  await Promise.all([app.close(), trainableApp.close()]);
  await engine.close();
});

const postText = (path: string, text: string, target = app, key = user) =>
  target.inject({ method: 'POST', url: path, headers: { ...key.headers, 'content-type': 'application/json' }, payload: text });
const lastRaw = () => engine.requests.at(-1)!.rawBody;

/** An answer without what differs between two requests (ids, timestamps). */
const comparable = (body: string) => body.replace(/"(id|created)":("[^"]*"|\d+)/g, '"$1":_').replace(/chatcmpl-[\w-]+|cmpl-[\w-]+/g, '_');

describe.each(kinds)('$endpoint through the app', ({ path, bodies }) => {
  it('answers every body as the schema alone does, and sends the engine a body of the same meaning', async () => {
    await fc.assert(
      fc.asyncProperty(bodies, async (body) => {
        const text = stringifyExact(body);
        const sent = () => engine.requests.filter((request) => request.path === path).map((request) => request.rawBody);
        const before = sent().length;
        fastPath.on = true;
        const fast = await postText(path, text);
        const fastSent = sent().slice(before);
        fastPath.on = false;
        const full = await postText(path, text);
        const fullSent = sent().slice(before + fastSent.length);
        fastPath.on = true;
        expect(fast.statusCode).toBe(full.statusCode);
        expect(comparable(fast.body)).toBe(comparable(full.body));
        expect(fastSent.map((raw) => parseExactJson(raw).value)).toEqual(fullSent.map((raw) => parseExactJson(raw).value));
      }),
      { numRuns: 100 },
    );
  }, 60_000);
});

describe('what the engine receives', () => {
  const messages = '"messages":[{"role":"user","content":"Say something short."}]';

  it('is the client\'s exact text for a common body', async () => {
    const text = `{ "model": "${MODEL}", ${messages}, "max_tokens": 100, "temperature": 0.70 }`;
    const response = await postText('/v1/chat/completions', text);
    expect(response.statusCode, response.body).toBe(200);
    expect(lastRaw()).toBe(text);

    const completion = `{"prompt":"Hi","model":"${MODEL}","max_tokens":2}`;
    expect((await postText('/v1/completions', completion)).statusCode).toBe(200);
    expect(lastRaw()).toBe(completion);
  });

  it('is the client\'s text with the metered stream_options for a stream without them', async () => {
    const text = `{"model":"${MODEL}",${messages},"stream":true}  `;
    const response = await postText('/v1/chat/completions', text);
    expect(response.statusCode, response.body).toBe(200);
    expect(lastRaw()).toBe(`{"model":"${MODEL}",${messages},"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":false}}`);
  });

  it('is the serialised body, in the schema\'s order, for a stream with stream_options', async () => {
    const response = await postText('/v1/chat/completions', `{${messages},"model":"${MODEL}","stream_options":{"include_usage":true},"stream":true}`);
    expect(response.statusCode, response.body).toBe(200);
    expect(lastRaw()).toBe(`{"model":"${MODEL}","stream":true,"stream_options":{"include_usage":true},${messages}}`);
  });

  it('is the serialised body for a checkpoint, under its adapter name and with the rollout fields', async () => {
    const response = await postText('/v1/chat/completions', `{"model":"${user.entity}/proj/agent:step1", ${messages}, "max_tokens": 5}`);
    expect(response.statusCode, response.body).toBe(200);
    const adapter = await checkpointAdapter(app, { entity: user.entity, project: 'proj', name: 'agent', step: 1 });
    expect(lastRaw()).toBe(`{"model":"${adapter}","max_tokens":5,${messages},"logprobs":true,"return_tokens_as_token_ids":true}`);
  });

  it('is the serialised body for a trainable base model', async () => {
    const response = await postText('/v1/completions', `{"model":"${MODEL}", "prompt": "Hi", "max_tokens": 2}`, trainableApp, trainableUser);
    expect(response.statusCode, response.body).toBe(200);
    expect(lastRaw()).toBe(`{"model":"${MODEL}","max_tokens":2,"prompt":"Hi","logprobs":0,"return_tokens_as_token_ids":true}`);
  });

  it('is the serialised body when a lax field was coerced', async () => {
    const response = await postText('/v1/chat/completions', `{"model":"${MODEL}", ${messages}, "max_tokens": "16", "stream": "false"}`);
    expect(response.statusCode, response.body).toBe(200);
    expect(lastRaw()).toBe(`{"model":"${MODEL}","max_tokens":16,"stream":false,${messages}}`);
  });

  it('is the serialised body, digits kept, when it holds an integer beyond 2^53', async () => {
    const response = await postText('/v1/chat/completions', `{"model":"${MODEL}", ${messages}, "seed": 9223372036854775807}`);
    expect(response.statusCode, response.body).toBe(200);
    expect(lastRaw()).toBe(`{"model":"${MODEL}","seed":9223372036854775807,${messages}}`);
  });

  it('is the serialised body when secure-json-parse dropped a key', async () => {
    const response = await postText('/v1/chat/completions', `{"model":"${MODEL}", ${messages}, "__proto__": {"x": 1}}`);
    expect(response.statusCode, response.body).toBe(200);
    expect(lastRaw()).toBe(`{"model":"${MODEL}",${messages}}`);
  });
});
