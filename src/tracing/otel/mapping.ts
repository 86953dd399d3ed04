import { createHash } from 'node:crypto';
import type { EndedCall, StartedCall } from '../schemas/calls.js';
import { SPAN_KINDS, STATUS_CODES, STATUS_ERROR, type AttrValue, type KeyValue, type OtlpResourceSpans, type OtlpScope, type OtlpSpan } from './model.js';

/**
 * Span → call (reference §6, after weave's opentelemetry/constants.py and attributes.py): ids, op name,
 * times, inputs/output/usage/attributes by the priority lists below, status → exception, wandb.* keys,
 * and the whole span kept as `otel_dump` (read back as `attributes.otel_span`).
 */

/** Why a span was not stored; counted in partial_success. */
export class SpanRejected extends Error {}

const INPUT_KEYS = [
  'ai.prompt', 'gen_ai.prompt', 'input.value', 'mlflow.spanInputs', 'gen_ai.input.messages', 'pydantic_ai.all_messages',
  'traceloop.entity.input', 'gcp.vertex.agent.tool_call_args', 'gcp.vertex.agent.llm_request', 'events.gen_ai.user.message', 'input', 'inputs',
];
const OUTPUT_KEYS = [
  'ai.response', 'gen_ai.completion', 'output.value', 'gen_ai.output.messages', 'mlflow.spanOutputs', 'final_result', 'gen_ai.content.completion',
  'traceloop.entity.output', 'gcp.vertex.agent.tool_response', 'gcp.vertex.agent.llm_response', 'events.gen_ai.choice', 'output', 'outputs',
];
const USAGE_KEYS: Record<string, string[]> = {
  input_tokens: ['gen_ai.usage.input_tokens'],
  prompt_tokens: ['gen_ai.usage.prompt_tokens', 'llm.token_count.prompt', 'ai.usage.promptTokens'],
  completion_tokens: ['gen_ai.usage.completion_tokens', 'llm.token_count.completion', 'ai.usage.completionTokens'],
  output_tokens: ['gen_ai.usage.output_tokens'],
  total_tokens: ['llm.usage.total_tokens', 'llm.token_count.total'],
};
const ATTRIBUTE_KEYS: Record<string, string[]> = {
  system: ['gen_ai.system', 'llm.system', 'gen_ai.system_instructions', 'system_prompt'],
  kind: ['weave.span.kind', 'traceloop.span.kind', 'openinference.span.kind'],
  model: ['gen_ai.response.model', 'gen_ai.request.model', 'llm.model_name', 'ai.model.id'],
  provider: ['llm.provider', 'ai.model.provider'],
  model_parameters: ['gen_ai.request', 'llm.invocation_parameters'],
  agent: ['gen_ai.agent.name'],
  tools: ['gen_ai.agent.tools'],
  operation: ['gen_ai.operation.name'],
};

const MAX_OP_NAME = 128;

type Tree = { [key: string]: AttrValue };
const isObject = (v: unknown): v is Tree => v !== null && typeof v === 'object' && !Array.isArray(v);

/** `a.b.c` keys as nested objects; a key that is both a value and a prefix of another rejects the span. */
export function unflatten(attributes: readonly KeyValue[]): Tree {
  const root: Tree = {};
  for (const { key, value } of attributes) {
    const parts = key.split('.');
    let node = root;
    for (let i = 0; i < parts.length - 1; i++) {
      const existing = node[parts[i]];
      if (existing === undefined) node = node[parts[i]] = {};
      else if (isObject(existing) && !isLeafObject(existing)) node = existing;
      else throw new SpanRejected(`attribute ${JSON.stringify(parts.slice(0, i + 1).join('.'))} is both a value and a prefix of ${JSON.stringify(key)}`);
    }
    const last = parts[parts.length - 1];
    if (node[last] !== undefined) throw new SpanRejected(`attribute ${JSON.stringify(key)} is both a value and a prefix of another attribute`);
    node[last] = isObject(value) ? markLeaf(value) : value;
  }
  return listify(root) as Tree;
}

// A kvlist value is a leaf even though it is an object: no dotted key may descend into it.
const LEAF = Symbol('leaf');
function markLeaf(value: Tree): Tree {
  Object.defineProperty(value, LEAF, { value: true, enumerable: false });
  return value;
}
const isLeafObject = (value: Tree): boolean => (value as { [LEAF]?: boolean })[LEAF] === true;

/** Objects keyed 0..n-1 (OpenInference's `llm.input_messages.0.message.role`) become lists. */
function listify(value: AttrValue): AttrValue {
  if (Array.isArray(value)) return value.map(listify);
  if (!isObject(value)) return value;
  const keys = Object.keys(value);
  const out: Tree = {};
  for (const key of keys) out[key] = listify(value[key]);
  if (keys.length > 0 && keys.every((key, i) => key === String(i))) return keys.map((key) => out[key]);
  return out;
}

function get(tree: Tree, path: string): AttrValue | undefined {
  let node: AttrValue | undefined = tree;
  for (const part of path.split('.')) {
    if (Array.isArray(node) && /^\d+$/.test(part)) node = node[Number(part)];
    else if (isObject(node) && Object.hasOwn(node, part)) node = node[part];
    else return undefined;
  }
  return node;
}

/** JSON text in an attribute (a common way to send structured values) is parsed. */
function parsed(value: AttrValue): AttrValue {
  if (typeof value !== 'string') return value;
  const text = value.trim();
  if (!(text.startsWith('{') || text.startsWith('['))) return value;
  try {
    return JSON.parse(text) as AttrValue;
  } catch {
    return value;
  }
}

function firstOf(tree: Tree, keys: readonly string[], events: ReadonlyMap<string, Tree[]>): { key: string; value: AttrValue } | undefined {
  for (const key of keys) {
    if (key.startsWith('events.')) {
      const found = events.get(key.slice('events.'.length));
      if (found?.length) return { key, value: found.length === 1 ? found[0] : found };
      continue;
    }
    const value = get(tree, key);
    if (value !== undefined && value !== null) return { key, value: parsed(value) };
  }
  return undefined;
}

const toNumber = (v: AttrValue | undefined): number | undefined => {
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : v;
  return typeof n === 'number' && Number.isFinite(n) ? n : undefined;
};

/** Nanoseconds since the epoch as ISO-8601 with microseconds. */
export function isoFromNanos(nanos: bigint): string {
  const ms = nanos / 1_000_000n;
  const micros = (nanos / 1_000n) % 1_000n;
  const iso = new Date(Number(ms)).toISOString();
  return `${iso.slice(0, -1)}${micros.toString().padStart(3, '0')}Z`;
}

function opName(name: string): string {
  if (name.length <= MAX_OP_NAME) return name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 8);
  return `${name.slice(0, MAX_OP_NAME - 9)}_${hash}`;
}

const flat = (kvs: readonly KeyValue[]) => Object.fromEntries(kvs.map((kv) => [kv.key, kv.value]));

/** The whole span as stored in otel_dump and returned as attributes.otel_span. */
function dump(span: OtlpSpan, resource: OtlpResourceSpans, scope: OtlpScope): Tree {
  return {
    name: span.name,
    context: { trace_id: span.traceId, span_id: span.spanId, trace_state: span.traceState },
    parent_id: span.parentSpanId || null,
    kind: SPAN_KINDS[span.kind] ?? String(span.kind),
    start_time_unix_nano: span.startTimeUnixNano.toString(),
    end_time_unix_nano: span.endTimeUnixNano.toString(),
    attributes: flat(span.attributes),
    dropped_attributes_count: span.droppedAttributesCount,
    events: span.events.map((e) => ({ name: e.name, time_unix_nano: e.timeUnixNano.toString(), attributes: flat(e.attributes), dropped_attributes_count: e.droppedAttributesCount })),
    dropped_events_count: span.droppedEventsCount,
    links: span.links.map((l) => ({ trace_id: l.traceId, span_id: l.spanId, trace_state: l.traceState, attributes: flat(l.attributes), flags: l.flags })),
    dropped_links_count: span.droppedLinksCount,
    status: { code: STATUS_CODES[span.status.code] ?? String(span.status.code), message: span.status.message },
    flags: span.flags,
    resource: { attributes: flat(resource.resource.attributes), schema_url: resource.schemaUrl },
    scope: { name: scope.name, version: scope.version, attributes: flat(scope.attributes) },
  };
}

const HEX = (bytes: number) => new RegExp(`^[0-9a-f]{${bytes * 2}}$`);
const TRACE_ID = HEX(16);
const SPAN_ID = HEX(8);

/** A span as the start and end of one call in `projectId`; throws SpanRejected for a malformed span. */
export function spanToCall(projectId: string, span: OtlpSpan, resource: OtlpResourceSpans, scope: OtlpScope): { start: StartedCall; end: EndedCall } {
  if (!TRACE_ID.test(span.traceId) || /^0+$/.test(span.traceId)) throw new SpanRejected(`invalid trace id ${JSON.stringify(span.traceId)} (expected 16 bytes, not all zero)`);
  if (!SPAN_ID.test(span.spanId) || /^0+$/.test(span.spanId)) throw new SpanRejected(`invalid span id ${JSON.stringify(span.spanId)} (expected 8 bytes, not all zero)`);
  if (span.parentSpanId !== '' && !SPAN_ID.test(span.parentSpanId)) throw new SpanRejected(`invalid parent span id ${JSON.stringify(span.parentSpanId)}`);
  if (span.name === '') throw new SpanRejected(`span ${span.spanId} has no name`);
  if (span.startTimeUnixNano === 0n) throw new SpanRejected(`span ${span.spanId} has no start time`);

  const tree = unflatten(span.attributes);
  const events = new Map<string, Tree[]>();
  for (const e of span.events) events.set(e.name, [...(events.get(e.name) ?? []), unflatten(e.attributes)]);

  const input = firstOf(tree, INPUT_KEYS, events);
  let inputs: Tree = {};
  if (input) inputs = (input.key === 'input' || input.key === 'inputs') && isObject(input.value) ? input.value : { [input.key]: input.value };
  const outputFound = firstOf(tree, OUTPUT_KEYS, events);
  const output = outputFound ? ((outputFound.key === 'output' || outputFound.key === 'outputs') ? outputFound.value : { [outputFound.key]: outputFound.value }) : null;

  const attributes: Tree = {};
  for (const [name, keys] of Object.entries(ATTRIBUTE_KEYS)) {
    const found = firstOf(tree, keys, events);
    if (found) attributes[name] = found.value;
  }
  const extra = get(tree, 'wandb.attributes');
  if (isObject(extra)) Object.assign(attributes, extra);
  const callAttributes = Object.keys(attributes).length > 0 ? attributes : tree;

  const usage: Tree = {};
  for (const [name, keys] of Object.entries(USAGE_KEYS)) {
    for (const key of keys) {
      const n = toNumber(get(tree, key));
      if (n !== undefined) {
        usage[name] = n;
        break;
      }
    }
  }
  const model = typeof attributes.model === 'string' ? attributes.model : 'usage';
  const summary: Tree = Object.keys(usage).length > 0 ? { usage: { [model]: usage } } : {};

  const langfuseStart = get(tree, 'langfuse.startTime');
  const langfuseEnd = get(tree, 'langfuse.endTime');
  const startedAt = typeof langfuseStart === 'string' && !Number.isNaN(Date.parse(langfuseStart)) ? new Date(langfuseStart).toISOString() : isoFromNanos(span.startTimeUnixNano);
  const endNanos = span.endTimeUnixNano >= span.startTimeUnixNano ? span.endTimeUnixNano : span.startTimeUnixNano;
  const endedAt = typeof langfuseEnd === 'string' && !Number.isNaN(Date.parse(langfuseEnd)) ? new Date(langfuseEnd).toISOString() : isoFromNanos(endNanos);

  const str = (path: string): string | null => {
    const v = get(tree, path);
    return typeof v === 'string' && v !== '' ? v : null;
  };
  const int = (path: string): number | null => {
    const n = toNumber(get(tree, path));
    return n !== undefined && Number.isSafeInteger(n) ? n : null;
  };
  const vertexSession = str('gcp.vertex.agent.session_id');
  const isTurn = get(tree, 'wandb.is_turn') === true || get(tree, 'wandb.is_turn') === 'true' || vertexSession !== null;

  let exception: string | null = null;
  if (span.status.code === STATUS_ERROR) {
    const thrown = events.get('exception')?.[0];
    const fromEvent = thrown ? [get(thrown, 'exception.type'), get(thrown, 'exception.message')].filter((x) => typeof x === 'string' && x !== '').join(': ') : '';
    exception = span.status.message || fromEvent || 'Span status ERROR';
  }

  return {
    start: {
      project_id: projectId,
      id: span.spanId,
      trace_id: span.traceId,
      parent_id: span.parentSpanId || null,
      op_name: opName(span.name),
      display_name: str('wandb.display_name'),
      thread_id: str('wandb.thread_id') ?? vertexSession,
      turn_id: isTurn ? span.spanId : null,
      started_at: startedAt,
      attributes: callAttributes,
      inputs,
      otel_dump: dump(span, resource, scope),
      wb_run_id: str('wandb.wb_run_id'),
      wb_run_step: int('wandb.wb_run_step'),
    },
    end: {
      project_id: projectId,
      id: span.spanId,
      ended_at: endedAt,
      exception,
      output,
      summary,
      wb_run_step_end: int('wandb.wb_run_step_end'),
    },
  };
}
