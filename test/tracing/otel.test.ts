import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { context as otelContext, diag, DiagLogLevel, SpanStatusCode, trace as otelTrace, type DiagLogger } from '@opentelemetry/api';
import { OTLPTraceExporter as HttpExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtoExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BasicTracerProvider, SimpleSpanProcessor, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import protobuf from 'protobufjs/minimal.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { decodeTraceResponse } from '../../src/tracing/otel/protobuf.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { basicAuth, post } from './helpers.js';

let app: App;
let user: TestUser;
let base: string;
const warnings: string[] = [];

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  base = `${await listen(app)}/traces`;
  const capture = (...args: unknown[]) => warnings.push(args.map(String).join(' '));
  const logger: DiagLogger = { error: capture, warn: capture, info: () => {}, debug: () => {}, verbose: () => {} };
  diag.setLogger(logger, DiagLogLevel.WARN);
});
afterAll(async () => {
  diag.disable();
  await app.close();
});

/** Runs `emit` with a tracer whose spans go through `exporter`, then flushes and shuts down. */
async function trace(exporter: SpanExporter, resource: Record<string, string>, emit: (tracer: ReturnType<BasicTracerProvider['getTracer']>) => void) {
  const provider = new BasicTracerProvider({ resource: resourceFromAttributes({ 'service.name': 'otel-test', ...resource }), spanProcessors: [new SimpleSpanProcessor(exporter)] });
  emit(provider.getTracer('trainyard-test', '1.2.3'));
  await provider.forceFlush();
  await provider.shutdown();
}

async function calls(project: string): Promise<Record<string, any>[]> {
  return (await post(app, user, '/calls/query', { project_id: project })).json().calls;
}

/** A parent with a GenAI child, an OpenInference child, a failing child and a malformed child. */
function emitAgent(tracer: ReturnType<BasicTracerProvider['getTracer']>) {
  const root = tracer.startSpan('agent run', { attributes: { 'wandb.display_name': 'Agent turn 1', 'wandb.thread_id': 'thread-7', 'wandb.is_turn': true, 'input.value': '{"question":"hi"}' } });
  const context = (span: typeof root) => otelTrace.setSpan(otelContext.active(), span);
  const genai = tracer.startSpan(
    'chat gpt-4o',
    {
      attributes: {
        'gen_ai.system': 'openai',
        'gen_ai.operation.name': 'chat',
        'gen_ai.request.model': 'gpt-4o',
        'gen_ai.request.temperature': 0.2,
        'gen_ai.prompt': JSON.stringify([{ role: 'user', content: 'hi' }]),
        'gen_ai.completion': JSON.stringify([{ role: 'assistant', content: 'hello' }]),
        'gen_ai.usage.input_tokens': 12,
        'gen_ai.usage.output_tokens': 3,
      },
    },
    context(root),
  );
  genai.end();
  const oi = tracer.startSpan(
    'llm call',
    {
      attributes: {
        'openinference.span.kind': 'LLM',
        'llm.model_name': 'my-model',
        'llm.provider': 'acme',
        'input.value': '{"messages":[{"role":"user","content":"ping"}]}',
        'input.mime_type': 'application/json',
        'output.value': 'pong',
        'llm.token_count.prompt': 5,
        'llm.token_count.completion': 1,
        'llm.token_count.total': 6,
      },
    },
    context(root),
  );
  oi.end();
  const failing = tracer.startSpan('tool call', { attributes: { 'tool.name': 'search' } }, context(root));
  failing.setStatus({ code: SpanStatusCode.ERROR, message: 'search backend down' });
  failing.end();
  const malformed = tracer.startSpan('malformed', {}, context(root));
  malformed.setAttribute('foo', 1);
  malformed.setAttribute('foo.bar', 2);
  malformed.end();
  root.end();
}

function expectAgentCalls(stored: Record<string, any>[], project: string) {
  expect(stored.map((c) => c.op_name).sort()).toEqual(['agent run', 'chat gpt-4o', 'llm call', 'tool call']);
  const byName = (name: string) => stored.find((c) => c.op_name === name)!;
  const root = byName('agent run');
  expect(root).toMatchObject({
    project_id: project,
    id: expect.stringMatching(/^[0-9a-f]{16}$/),
    trace_id: expect.stringMatching(/^[0-9a-f]{32}$/),
    parent_id: null,
    display_name: 'Agent turn 1',
    thread_id: 'thread-7',
    inputs: { 'input.value': { question: 'hi' } },
    summary: { weave: { status: 'success', trace_name: 'Agent turn 1', latency_ms: expect.any(Number) } },
  });
  expect(root.turn_id).toBe(root.id);
  expect(root.started_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
  expect(root.attributes.otel_span).toMatchObject({
    name: 'agent run',
    context: { trace_id: root.trace_id, span_id: root.id },
    kind: 'SPAN_KIND_INTERNAL',
    attributes: { 'wandb.display_name': 'Agent turn 1', 'wandb.is_turn': true },
    resource: { attributes: { 'service.name': 'otel-test' } },
    scope: { name: 'trainyard-test', version: '1.2.3' },
    status: { code: 'STATUS_CODE_UNSET' },
  });

  const genai = byName('chat gpt-4o');
  expect(genai).toMatchObject({
    parent_id: root.id,
    trace_id: root.trace_id,
    inputs: { 'gen_ai.prompt': [{ role: 'user', content: 'hi' }] },
    output: { 'gen_ai.completion': [{ role: 'assistant', content: 'hello' }] },
    summary: { usage: { 'gpt-4o': { input_tokens: 12, output_tokens: 3 } } },
  });
  expect(genai.attributes).toMatchObject({ system: 'openai', model: 'gpt-4o', operation: 'chat', model_parameters: { model: 'gpt-4o', temperature: 0.2 } });

  const oi = byName('llm call');
  expect(oi).toMatchObject({
    inputs: { 'input.value': { messages: [{ role: 'user', content: 'ping' }] } },
    output: { 'output.value': 'pong' },
    summary: { usage: { 'my-model': { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 } } },
  });
  expect(oi.attributes).toMatchObject({ kind: 'LLM', model: 'my-model', provider: 'acme' });

  const failing = byName('tool call');
  expect(failing).toMatchObject({ exception: 'search backend down', summary: { weave: { status: 'error' } } });
  // No known key: the raw attributes, un-flattened.
  expect(failing.attributes).toMatchObject({ tool: { name: 'search' } });
}

describe('OTLP/HTTP protobuf from the OpenTelemetry JS SDK', () => {
  it('stores spans as calls with the mapped fields and reports the malformed span as rejected', async () => {
    const project = `${user.entity}/${uniqueName('otel')}`;
    warnings.length = 0;
    const exporter = new ProtoExporter({ url: `${base}/otel/v1/traces`, headers: { authorization: basicAuth(user.key), project_id: project } });
    await trace(exporter, {}, emitAgent);
    const stored = await calls(project);
    expectAgentCalls(stored, project);
    // The exporter decoded our protobuf ExportTraceServiceResponse and logged its partial success.
    const partial = warnings.find((w) => w.includes('Partial Success'));
    expect(partial).toContain('"rejectedSpans":');
    expect(partial).toContain('attribute \\"foo\\" is both a value and a prefix of \\"foo.bar\\"');
  });

  it('takes gzip, a wandb-api-key header and the project from wandb.entity / wandb.project resource attributes', async () => {
    const name = uniqueName('otelgz');
    const exporter = new ProtoExporter({ url: `${base}/otel/v1/traces`, compression: 'gzip' as never, headers: { 'wandb-api-key': user.key } });
    await trace(exporter, { 'wandb.entity': user.entity, 'wandb.project': name }, emitAgent);
    expectAgentCalls(await calls(`${user.entity}/${name}`), `${user.entity}/${name}`);
  });
});

describe('OTLP/JSON from the OpenTelemetry JS SDK', () => {
  it('stores the same calls through exporter-trace-otlp-http with a Bearer key', async () => {
    const project = `${user.entity}/${uniqueName('oteljson')}`;
    warnings.length = 0;
    const exporter = new HttpExporter({ url: `${base}/otel/v1/trace`, headers: { authorization: `Bearer ${user.key}`, project_id: project } });
    await trace(exporter, {}, emitAgent);
    expectAgentCalls(await calls(project), project);
    expect(warnings.find((w) => w.includes('Partial Success'))).toContain('"rejectedSpans":1');
  });
});

describe('the OTLP routes by hand', () => {
  const span = (overrides: Record<string, unknown> = {}) => ({
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: 'b7ad6b7169203331',
    name: 'by hand',
    kind: 1,
    startTimeUnixNano: '1735689600123456789',
    endTimeUnixNano: '1735689601000000000',
    attributes: [{ key: 'input', value: { kvlistValue: { values: [{ key: 'q', value: { intValue: '7' } }] } } }],
    ...overrides,
  });
  const otlp = (spans: unknown[]) => ({ resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 's' }, spans }] }] });
  const send = (body: unknown, headers: Record<string, string>, url = '/otel/v1/traces') =>
    app.inject({ method: 'POST', url: `/traces${url}`, headers: { 'content-type': 'application/json', ...headers }, payload: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body) });

  it('keeps nanosecond timestamps to the microsecond and unwraps an input object', async () => {
    const project = `${user.entity}/${uniqueName('hand')}`;
    const response = await send(otlp([span()]), { authorization: basicAuth(user.key), project_id: project });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({});
    const [call] = await calls(project);
    expect(call).toMatchObject({ id: 'b7ad6b7169203331', started_at: '2025-01-01T00:00:00.123456Z', ended_at: '2025-01-01T00:00:01.000000Z', inputs: { q: 7 } });
  });

  it('answers weave\'s {project_id, traces} form with partial_success for rejected spans', async () => {
    const project = `${user.entity}/${uniqueName('hand')}`;
    const response = await send({ project_id: project, traces: otlp([span(), span({ spanId: 'zz', name: 'bad id' })]) }, { authorization: basicAuth(user.key) }, '/otel/v1/trace');
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toEqual({ partial_success: { rejected_spans: 1, error_message: '1 span(s) rejected: span zz "bad id": invalid span id "zz" (expected 8 bytes, not all zero)' } });
    expect(await calls(project)).toHaveLength(1);
  });

  it('rejects only the span whose thread id is longer than a call holds, cuts a long display name, and takes attributes named like Object methods', async () => {
    const project = `${user.entity}/${uniqueName('hand')}`;
    const attr = (key: string, value: string) => ({ key, value: { stringValue: value } });
    const spans = [
      span({ spanId: '0000000000000001', attributes: [attr('wandb.thread_id', 't'.repeat(257))] }),
      span({ spanId: '0000000000000002', attributes: [attr('wandb.thread_id', 't'.repeat(256)), attr('wandb.display_name', `${'d'.repeat(1020)}😀😀😀`)] }),
      span({ spanId: '0000000000000003', attributes: [attr('constructor', 'c'), attr('toString', 's'), attr('http.valueOf', 'v')] }),
      span({ spanId: '0000000000000004', attributes: [attr('__proto__', 'p')] }),
    ];
    const response = await send(otlp(spans), { authorization: basicAuth(user.key), project_id: project });
    expect(response.json()).toEqual({
      partialSuccess: {
        rejectedSpans: 2,
        errorMessage:
          '2 span(s) rejected: span 0000000000000001 "by hand": wandb.thread_id has 257 characters, more than the 256 a call\'s field holds; ' +
          'span 0000000000000004 "by hand": attribute "__proto__" has a __proto__ segment',
      },
    });
    const stored = new Map((await calls(project)).map((call) => [call.id, call]));
    expect([...stored.keys()].sort()).toEqual(['0000000000000002', '0000000000000003']);
    expect(stored.get('0000000000000002')).toMatchObject({ thread_id: 't'.repeat(256), display_name: `${'d'.repeat(1020)}...` });
    expect(stored.get('0000000000000003')!.attributes).toMatchObject({ constructor: 'c', toString: 's', http: { valueOf: 'v' } });
  });

  it('answers a protobuf client in protobuf, and an empty export with an empty body', async () => {
    const response = await send(Buffer.alloc(0), { authorization: basicAuth(user.key), 'content-type': 'application/x-protobuf', project_id: `${user.entity}/p` });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('application/x-protobuf');
    expect(response.rawPayload.length).toBe(0);
    expect(decodeTraceResponse(response.rawPayload)).toBeUndefined();
  });

  it('refuses a body over 20 MiB after decompression with 413', async () => {
    const bomb = gzipSync(Buffer.alloc(21 * 1024 * 1024));
    const response = await send(bomb, { authorization: basicAuth(user.key), 'content-type': 'application/x-protobuf', 'content-encoding': 'gzip', project_id: `${user.entity}/p` });
    expect(response.statusCode).toBe(413);
    expect(response.json()).toEqual({ reason: 'The OTLP request is larger than 20 MiB after decompression; export smaller batches.' });
  });

  it('needs a project, a key, and a supported content type', async () => {
    const noProject = await send(otlp([span()]), { authorization: basicAuth(user.key) });
    expect(noProject.statusCode).toBe(400);
    expect(noProject.json()).toEqual({ reason: 'No project for resource_spans[0]: send a project_id header ("entity/project") or the resource attributes wandb.entity and wandb.project.' });
    const noKey = await send(otlp([span()]), { project_id: `${user.entity}/p` });
    expect(noKey.statusCode).toBe(401);
    expect(noKey.json()).toEqual({ reason: 'Missing API key. Send it as HTTP Basic auth (user "api", the key as password), "Authorization: Bearer <key>" or a wandb-api-key header.' });
    const badKey = await send(otlp([span()]), { 'wandb-api-key': 'nope', project_id: `${user.entity}/p` });
    expect(badKey.statusCode).toBe(401);
    const text = await send('hello', { authorization: basicAuth(user.key), 'content-type': 'text/plain', project_id: `${user.entity}/p` });
    expect(text.statusCode).toBe(415);
    expect(text.json()).toEqual({ reason: 'Unsupported content type text/plain: send application/x-protobuf or application/json (OTLP/HTTP).' });
    const garbage = await send(Buffer.from([0xff, 0xff, 0xff]), { authorization: basicAuth(user.key), 'content-type': 'application/x-protobuf', project_id: `${user.entity}/p` });
    expect(garbage.statusCode).toBe(400);
    expect(garbage.json().reason).toMatch(/^The body is not a valid OTLP ExportTraceServiceRequest \(protobuf\): /);
  });

  /** OTLP/JSON AnyValue text: `levels` arrayValues around the int 1, built as text (JSON.stringify recurses). */
  const deepJson = (levels: number) => `${'{"arrayValue":{"values":['.repeat(levels)}{"intValue":"1"}${']}}'.repeat(levels)}`;
  /** An export as text with each `"@deep@"` placeholder replaced by `deep`. */
  const withDeep = (body: unknown, deep: string) => JSON.stringify(body).replaceAll('"@deep@"', deep);
  const TOO_DEEP = 'nests more than 256 levels of arrays and key-value lists, the most that is stored';

  describe('attribute values nested past the stored bound', () => {
    it('reject only the span holding an OTLP/JSON value nested 257 or 10,000 levels, as partial success, and store the others', async () => {
      const project = `${user.entity}/${uniqueName('deep')}`;
      const spans = [
        span({ spanId: '0000000000000001', name: 'fine' }),
        span({ spanId: '0000000000000002', name: 'at the bound', attributes: [{ key: 'input', value: '@256@' }] }),
        span({ spanId: '0000000000000003', name: 'one past', attributes: [{ key: 'input', value: '@257@' }] }),
        span({ spanId: '0000000000000004', name: 'very deep', attributes: [{ key: 'a', value: { stringValue: 'x' } }, { key: 'input', value: '@deep@' }] }),
        span({ spanId: '0000000000000005', name: 'deep event', events: [{ name: 'e', timeUnixNano: '1735689600500000000', attributes: [{ key: 'payload', value: '@deep@' }] }] }),
      ];
      const text = withDeep(otlp(spans), deepJson(10_000)).replace('"@256@"', deepJson(256)).replace('"@257@"', deepJson(257));
      const response = await send(text, { authorization: basicAuth(user.key), project_id: project });
      expect(response.statusCode, response.body.slice(0, 300)).toBe(200);
      expect(response.json()).toEqual({
        partialSuccess: {
          rejectedSpans: 4,
          errorMessage:
            '4 span(s) rejected: ' +
            // At the bound the value is read, and what would be stored is refused as before (inputs hold it one level down).
            'span 0000000000000002 "at the bound": inputs nests more than 256 levels of objects and arrays, the most that is stored; ' +
            `span 0000000000000003 "one past": attribute "input" ${TOO_DEEP}; ` +
            `span 0000000000000004 "very deep": attribute "input" ${TOO_DEEP}; ` +
            `span 0000000000000005 "deep event": event attribute "payload" ${TOO_DEEP}`,
        },
      });
      expect((await calls(project)).map((call) => call.id)).toEqual(['0000000000000001']);
    });

    it('fail an OTLP/JSON export whose resource attribute nests 10,000 levels with a 400', async () => {
      const project = `${user.entity}/${uniqueName('deep')}`;
      const body = { resourceSpans: [{ resource: { attributes: [{ key: 'deep', value: '@deep@' }] }, scopeSpans: [{ scope: { name: 's' }, spans: [span()] }] }] };
      const response = await send(withDeep(body, deepJson(10_000)), { authorization: basicAuth(user.key), project_id: project });
      expect(response.statusCode).toBe(400);
      expect(response.json()).toEqual({ reason: `The body is not an OTLP/JSON ExportTraceServiceRequest: resource attribute "deep" ${TOO_DEEP}` });
      expect(await calls(project)).toEqual([]);
    });

    it('reject only the span holding a protobuf value nested 10,000 levels, and read on after it', async () => {
      const project = `${user.entity}/${uniqueName('deep')}`;
      const request = pbRequest([
        // The deep attribute comes before the span's id and name: the reader skips it and reads them.
        pbSpan({ spanId: '0000000000000001', name: 'deep first', attributes: [['input', 10_000]] }),
        pbSpan({ spanId: '0000000000000002', name: 'deep link', links: [['context', 10_000]] }),
        pbSpan({ spanId: '0000000000000003', name: 'fine', attributes: [['input', 3]] }),
      ]);
      const response = await send(request, { authorization: basicAuth(user.key), 'content-type': 'application/x-protobuf', project_id: project });
      expect(response.statusCode, response.body.slice(0, 300)).toBe(200);
      expect(decodeTraceResponse(response.rawPayload)).toEqual({
        rejectedSpans: 2,
        errorMessage: `2 span(s) rejected: span 0000000000000001 "deep first": attribute "input" ${TOO_DEEP}; span 0000000000000002 "deep link": link attribute "context" ${TOO_DEEP}`,
      });
      const stored = await calls(project);
      expect(stored.map((call) => [call.id, call.inputs])).toEqual([['0000000000000003', { input: [[[1]]] }]]);
    });

    it('fail a protobuf export whose scope attribute nests 10,000 levels with a 400', async () => {
      const project = `${user.entity}/${uniqueName('deep')}`;
      const request = pbRequest([pbSpan({ spanId: '0000000000000001', name: 'fine' })], [['deep', 10_000]]);
      const response = await send(request, { authorization: basicAuth(user.key), 'content-type': 'application/x-protobuf', project_id: project });
      expect(response.statusCode).toBe(400);
      expect(response.json()).toEqual({ reason: `The body is not a valid OTLP ExportTraceServiceRequest (protobuf): scope attribute "deep" ${TOO_DEEP}` });
      expect(await calls(project)).toEqual([]);
    });

    it('reject only the span with a dotted attribute key of more segments than are stored, naming the key cut short', async () => {
      const project = `${user.entity}/${uniqueName('deep')}`;
      const attr = (key: string) => ({ key, value: { stringValue: 'v' } });
      const spans = [
        span({ spanId: '0000000000000001', name: '256 segments', attributes: [attr(Array(256).fill('k').join('.'))] }),
        span({ spanId: '0000000000000002', name: '257 segments', attributes: [attr(Array(257).fill('k').join('.'))] }),
        span({ spanId: '0000000000000003', name: '10,000 segments', attributes: [attr(Array(10_000).fill('a').join('.'))] }),
      ];
      const response = await send(otlp(spans), { authorization: basicAuth(user.key), project_id: project });
      expect(response.statusCode, response.body.slice(0, 300)).toBe(200);
      const cut = `${'k.'.repeat(32)}…`;
      expect(response.json()).toEqual({
        partialSuccess: {
          rejectedSpans: 2,
          errorMessage:
            `2 span(s) rejected: span 0000000000000002 "257 segments": attribute "${cut}" has 257 dot-separated segments, more than the 256 levels of objects that are stored; ` +
            `span 0000000000000003 "10,000 segments": attribute "${'a.'.repeat(32)}…" has 10000 dot-separated segments, more than the 256 levels of objects that are stored`,
        },
      });
      expect((await calls(project)).map((call) => call.id)).toEqual(['0000000000000001']);
    });
  });

  it('never stores a call that ends before it starts, whatever langfuse.startTime and langfuse.endTime say', async () => {
    const project = `${user.entity}/${uniqueName('langfuse')}`;
    const time = (key: string, value: string) => ({ key, value: { stringValue: value } });
    const spans = [
      // The span itself ends at 00:00:01; langfuse says it started at 00:00:05.
      span({ spanId: '0000000000000001', attributes: [time('langfuse.startTime', '2025-01-01T00:00:05Z')] }),
      span({ spanId: '0000000000000002', attributes: [time('langfuse.startTime', '2025-01-01T00:00:05.5Z'), time('langfuse.endTime', '2025-01-01T00:00:03Z')] }),
      span({ spanId: '0000000000000003', attributes: [time('langfuse.startTime', '2025-01-01T00:00:00.5Z')] }),
    ];
    const response = await send(otlp(spans), { authorization: basicAuth(user.key), project_id: project });
    expect(response.json()).toEqual({});
    const stored = new Map((await calls(project)).map((call) => [call.id, [call.started_at, call.ended_at, call.summary.weave.latency_ms]]));
    expect(Object.fromEntries(stored)).toEqual({
      '0000000000000001': ['2025-01-01T00:00:05.000000Z', '2025-01-01T00:00:05.000000Z', 0],
      '0000000000000002': ['2025-01-01T00:00:05.500000Z', '2025-01-01T00:00:05.500000Z', 0],
      '0000000000000003': ['2025-01-01T00:00:00.500000Z', '2025-01-01T00:00:01.000000Z', 500],
    });
  });

  it('cuts a long span name to an op name never mid code point', async () => {
    const project = `${user.entity}/${uniqueName('opname')}`;
    // 118 characters and then emoji: the cut at 119 would fall between the halves of a surrogate pair.
    const name = `${'o'.repeat(118)}${'😀'.repeat(10)}`;
    const response = await send(otlp([span({ name })]), { authorization: basicAuth(user.key), project_id: project });
    expect(response.json()).toEqual({});
    const [call] = await calls(project);
    expect(call.op_name).toBe(`${'o'.repeat(118)}_${createHash('sha256').update(name).digest('hex').slice(0, 8)}`);
  });

  describe('OTLP/JSON boolValue and intValue', () => {
    it('read true and false as JSON booleans or text, and int64s as whole numbers or decimal digits', async () => {
      const project = `${user.entity}/${uniqueName('values')}`;
      const attributes = [
        { key: 'b.json_false', value: { boolValue: false } },
        { key: 'b.text_false', value: { boolValue: 'false' } },
        { key: 'b.text_true', value: { boolValue: 'true' } },
        { key: 'b.null', value: { boolValue: null } },
        { key: 'i.text', value: { intValue: '-42' } },
        { key: 'i.number', value: { intValue: 7 } },
        { key: 'i.whole_float', value: { intValue: 3.0 } },
      ];
      const response = await send(otlp([span({ attributes })]), { authorization: basicAuth(user.key), project_id: project });
      expect(response.json()).toEqual({});
      const [call] = await calls(project);
      const { otel_span: _, ...tree } = call.attributes;
      expect(tree).toEqual({ b: { json_false: false, text_false: false, text_true: true, null: false }, i: { text: -42, number: 7, whole_float: 3 } });
    });

    const NOT_INT64 = 'is not an int64 (a whole number from -2^63 to 2^63-1, as a JSON number or decimal digits in a string)';
    it.each([
      ['the text "no"', { boolValue: 'no' }, 'boolValue "no" is not a boolean (true or false)'],
      ['the number 1', { boolValue: 1 }, 'boolValue 1 is not a boolean (true or false)'],
      ['an object', { boolValue: {} }, 'boolValue an object is not a boolean (true or false)'],
      ['letters', { intValue: 'abc' }, `intValue "abc" ${NOT_INT64}`],
      ['a fraction', { intValue: 1.5 }, `intValue 1.5 ${NOT_INT64}`],
      ['empty text', { intValue: '' }, `intValue "" ${NOT_INT64}`],
      ['digits past int64', { intValue: '9223372036854775808' }, `intValue "9223372036854775808" ${NOT_INT64}`],
      ['an array', { intValue: [1] }, `intValue an array ${NOT_INT64}`],
      ['long text, named cut short', { intValue: 'x'.repeat(1000) }, `intValue "${'x'.repeat(64)}…" ${NOT_INT64}`],
    ])('refuse the export with a 400 naming the value: %s', async (_, value, message) => {
      const project = `${user.entity}/${uniqueName('values')}`;
      const response = await send(otlp([span({ attributes: [{ key: 'v', value }] })]), { authorization: basicAuth(user.key), project_id: project });
      expect(response.statusCode).toBe(400);
      expect(response.json()).toEqual({ reason: `The body is not an OTLP/JSON ExportTraceServiceRequest: ${message}` });
      expect(await calls(project)).toEqual([]);
    });
  });
});

/** A protobuf AnyValue of `levels` arrayValues around the int 1; iterative, as the writer's forks are. */
function pbDeep(writer: protobuf.Writer, levels: number): void {
  for (let i = 0; i < levels; i++) writer.uint32((5 << 3) | 2).fork().uint32((1 << 3) | 2).fork();
  writer.uint32((3 << 3) | 0).int64(1);
  for (let i = 0; i < 2 * levels; i++) writer.ldelim();
}

/** A KeyValue (field `no` of its message) whose value nests `levels` arrays. */
function pbAttribute(writer: protobuf.Writer, no: number, [key, levels]: [string, number]): void {
  writer.uint32((no << 3) | 2).fork().uint32((1 << 3) | 2).string(key).uint32((2 << 3) | 2).fork();
  pbDeep(writer, levels);
  writer.ldelim().ldelim();
}

interface PbSpanSpec {
  spanId: string;
  name: string;
  attributes?: [string, number][];
  links?: [string, number][];
}

/** A fixed64 time field, as its two little-endian halves. */
function pbTime(writer: protobuf.Writer, no: number, nanos: bigint): void {
  writer.uint32((no << 3) | 1).fixed32(Number(nanos & 0xffffffffn)).fixed32(Number(nanos >> 32n));
}

/** A Span's fields, its attributes and links first. */
function pbSpan(spec: PbSpanSpec): (writer: protobuf.Writer) => void {
  return (writer) => {
    for (const attribute of spec.attributes ?? []) pbAttribute(writer, 9, attribute);
    for (const link of spec.links ?? []) {
      writer.uint32((13 << 3) | 2).fork().uint32((1 << 3) | 2).bytes(Buffer.from('0af7651916cd43dd8448eb211c80319c', 'hex'));
      writer.uint32((2 << 3) | 2).bytes(Buffer.from('00f067aa0ba902b7', 'hex'));
      pbAttribute(writer, 4, link);
      writer.ldelim();
    }
    writer.uint32((1 << 3) | 2).bytes(Buffer.from('0af7651916cd43dd8448eb211c80319c', 'hex'));
    writer.uint32((2 << 3) | 2).bytes(Buffer.from(spec.spanId, 'hex'));
    writer.uint32((5 << 3) | 2).string(spec.name);
    pbTime(writer, 7, 1735689600000000000n);
    pbTime(writer, 8, 1735689601000000000n);
  };
}

/** An ExportTraceServiceRequest of one resource and one scope (with `scopeAttributes`) holding `spans`. */
function pbRequest(spans: ((writer: protobuf.Writer) => void)[], scopeAttributes: [string, number][] = []): Buffer {
  const writer = protobuf.Writer.create();
  writer.uint32((1 << 3) | 2).fork(); // resource_spans
  writer.uint32((2 << 3) | 2).fork(); // scope_spans
  writer.uint32((1 << 3) | 2).fork().uint32((1 << 3) | 2).string('s'); // scope
  for (const attribute of scopeAttributes) pbAttribute(writer, 3, attribute);
  writer.ldelim();
  for (const write of spans) {
    writer.uint32((2 << 3) | 2).fork();
    write(writer);
    writer.ldelim();
  }
  writer.ldelim().ldelim();
  return Buffer.from(writer.finish());
}
