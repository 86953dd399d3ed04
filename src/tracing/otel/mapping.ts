import { createHash } from 'node:crypto';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../../http/json-depth.js';
import { ExactNumber, isJsonObject, numberOf, parsePayloadText } from '../exact-numbers.js';
import { isValidIsoDateTime, TRACING_LIMITS } from '../schemas/common.js';
import { cutText, shortText } from '../sanitize.js';
import { SPAN_KINDS, STATUS_CODES, STATUS_ERROR, type AttrValue, type KeyValue, type OtlpResourceSpans, type OtlpScope, type OtlpSpan } from './model.js';

/**
 * Span → call (reference §6, after weave's opentelemetry/constants.py and attributes.py): ids, op name,
 * times, inputs/output/usage/attributes by the priority lists below, status → exception, wandb.* keys,
 * and the whole span kept as `otel_dump` (read back as `attributes.otel_span`).
 *
 * This is the hot path of OTel ingest (bench/otel.ts), so the lookup keys are split once, the
 * resource and scope parts of the dump are built once per export, and a span becomes one complete
 * call row directly (no start/end pair to merge again).
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
const isObject = (v: unknown): v is Tree => isJsonObject(v);

/** A lookup key split once: `events.<name>` names the attributes of the span's events of that name. */
interface Lookup {
  key: string;
  parts: readonly string[];
  event?: string;
}
const lookup = (key: string): Lookup => (key.startsWith('events.') ? { key, parts: [], event: key.slice('events.'.length) } : { key, parts: key.split('.') });
const INPUTS = INPUT_KEYS.map(lookup);
const OUTPUTS = OUTPUT_KEYS.map(lookup);
const USAGE = Object.entries(USAGE_KEYS).map(([name, keys]) => ({ name, parts: keys.map((key) => key.split('.')) }));
const ATTRIBUTES = Object.entries(ATTRIBUTE_KEYS).map(([name, keys]) => ({ name, lookups: keys.map(lookup) }));
const path = (key: string): readonly string[] => key.split('.');
const WANDB_ATTRIBUTES = path('wandb.attributes');
const LANGFUSE_START = path('langfuse.startTime');
const LANGFUSE_END = path('langfuse.endTime');
const DISPLAY_NAME = path('wandb.display_name');
const THREAD_ID = path('wandb.thread_id');
const VERTEX_SESSION = path('gcp.vertex.agent.session_id');
const IS_TURN = path('wandb.is_turn');
const RUN_ID = path('wandb.wb_run_id');
const RUN_STEP = path('wandb.wb_run_step');
const RUN_STEP_END = path('wandb.wb_run_step_end');
const EXCEPTION_TYPE = path('exception.type');
const EXCEPTION_MESSAGE = path('exception.message');

/**
 * `a.b.c` keys as nested objects; a key that is both a value and a prefix of another rejects the span,
 * and so does a `__proto__` segment (it would otherwise reach Object.prototype), and a key of more
 * segments than a stored value may nest levels (its objects could not be stored, and listify, which
 * recurses, would overflow the stack on a key of thousands).
 */
export function unflatten(attributes: readonly KeyValue[]): Tree {
  const root: Tree = {};
  for (const { key, value } of attributes) {
    let node = root;
    let last = key;
    if (key === '__proto__') throw new SpanRejected(`attribute ${JSON.stringify(key)} has a __proto__ segment`);
    if (key.includes('.')) {
      const parts = key.split('.');
      if (parts.length > MAX_JSON_DEPTH) {
        throw new SpanRejected(`attribute ${JSON.stringify(shortText(key))} has ${parts.length} dot-separated segments, more than the ${MAX_JSON_DEPTH} levels of objects that are stored`);
      }
      if (parts.includes('__proto__')) throw new SpanRejected(`attribute ${JSON.stringify(key)} has a __proto__ segment`);
      for (let i = 0; i < parts.length - 1; i++) {
        const part = parts[i];
        const existing = Object.hasOwn(node, part) ? node[part] : undefined;
        if (existing === undefined) node = node[part] = {};
        else if (isObject(existing) && !isLeafObject(existing)) node = existing;
        else throw new SpanRejected(`attribute ${JSON.stringify(parts.slice(0, i + 1).join('.'))} is both a value and a prefix of ${JSON.stringify(key)}`);
      }
      last = parts[parts.length - 1];
    }
    if (Object.hasOwn(node, last) && node[last] !== undefined) throw new SpanRejected(`attribute ${JSON.stringify(key)} is both a value and a prefix of another attribute`);
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
  if (value === null || typeof value !== 'object' || value instanceof ExactNumber) return value;
  if (Array.isArray(value)) return value.map(listify);
  const keys = Object.keys(value);
  const out: Tree = {};
  let indexed = keys.length > 0;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    out[key] = listify(value[key]);
    if (indexed && key !== String(i)) indexed = false;
  }
  if (indexed) return keys.map((key) => out[key]);
  return out;
}

const DIGITS = /^\d+$/;

function get(tree: Tree, parts: readonly string[]): AttrValue | undefined {
  let node: AttrValue | undefined = tree;
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i];
    if (Array.isArray(node)) {
      if (!DIGITS.test(part)) return undefined;
      node = node[Number(part)];
    } else if (isObject(node) && Object.hasOwn(node, part)) node = node[part];
    else return undefined;
  }
  return node;
}

/**
 * JSON text in an attribute (a common way to send structured values) is parsed, keeping its exact
 * numbers (`1.0` stays a float), as Python's json module keeps them.
 */
function parsed(value: AttrValue): AttrValue {
  if (typeof value !== 'string') return value;
  const text = value.trim();
  const first = text.charCodeAt(0);
  if (first !== 0x7b /* { */ && first !== 0x5b /* [ */) return value;
  try {
    return parsePayloadText(text) as AttrValue;
  } catch {
    return value;
  }
}

function firstOf(tree: Tree, lookups: readonly Lookup[], events: ReadonlyMap<string, Tree[]> | undefined): { key: string; value: AttrValue } | undefined {
  for (const { key, parts, event } of lookups) {
    if (event !== undefined) {
      const found = events?.get(event);
      if (found?.length) return { key, value: found.length === 1 ? found[0] : found };
      continue;
    }
    const value = get(tree, parts);
    if (value !== undefined && value !== null) return { key, value: parsed(value) };
  }
  return undefined;
}

const toNumber = (v: AttrValue | undefined): number | undefined => numberOf(typeof v === 'string' && v.trim() !== '' ? Number(v) : v);

/** Nanoseconds since the epoch as ISO-8601 with microseconds; SpanRejected beyond year 9999. */
export function isoFromNanos(nanos: bigint, what = 'time'): string {
  if (nanos < 0n || nanos > MAX_NANOS) throw new SpanRejected(`${what} ${nanos} ns is out of range (years 1970 to 9999)`);
  const iso = new Date(Number(nanos / 1_000_000n)).toISOString();
  const micros = Number((nanos / 1_000n) % 1_000n);
  return `${iso.slice(0, -1)}${micros < 10 ? '00' : micros < 100 ? '0' : ''}${micros}Z`;
}

/** The last nanosecond of 9999-12-31T23:59:59.999Z. */
const MAX_NANOS = 253402300799999n * 1_000_000n + 999_999n;

/** A langfuse.startTime/endTime attribute as ISO text, if it is one PostgreSQL holds; else SpanRejected. */
function langfuseTime(value: AttrValue | undefined, what: string): string | undefined {
  if (typeof value !== 'string' || Number.isNaN(Date.parse(value))) return undefined;
  const iso = new Date(value).toISOString();
  if (!isValidIsoDateTime(iso)) throw new SpanRejected(`${what} ${JSON.stringify(value)} is out of range (years 1 to 9999)`);
  // With microseconds, as isoFromNanos writes them, so that the two compare as text.
  return `${iso.slice(0, -1)}000Z`;
}

/** A display name cut to the bound of the call routes (as weave's SDK elides long ones), never mid code point. */
function displayName(name: string | null): string | null {
  if (name === null || name.length <= TRACING_LIMITS.callNameLength) return name;
  return `${cutText(name, TRACING_LIMITS.callNameLength - 3)}...`;
}

/** An id the call routes bound: past it, SpanRejected (cutting it would merge distinct ids). */
function bounded(value: string | null, attribute: string, max: number): string | null {
  if (value !== null && value.length > max) throw new SpanRejected(`${attribute} has ${value.length} characters, more than the ${max} a call's field holds`);
  return value;
}

/** A span name as an op name: past MAX_OP_NAME, cut (never mid code point), `_` and 8 hex of its sha256. */
function opName(name: string): string {
  if (name.length <= MAX_OP_NAME) return name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 8);
  return `${cutText(name, MAX_OP_NAME - 9)}_${hash}`;
}

/** Key/values as one object, as Object.fromEntries makes it (a later repeat wins; `__proto__` is a plain key). */
function flat(kvs: readonly KeyValue[]): Tree {
  const out: Tree = {};
  for (const { key, value } of kvs) {
    if (key === '__proto__') Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
    else out[key] = value;
  }
  return out;
}

/** What every span of one resource and scope shares: its project and the resource and scope parts of its dump. */
export interface SpanContext {
  projectId: string;
  resource: Tree;
  scope: Tree;
  /** Characters of `resource` and `scope` as JSON: what each span's copy of them stores. */
  sharedChars: number;
  /** `resource` and `scope` without their attributes (counted in `dropped_attributes_count`), for spans past the export's budget. */
  cut: { resource: Tree; scope: Tree };
}

/** Characters of names and versions the cut copies keep (a scope name may be any length). */
const CUT_NAME_CHARS = 256;

/** A resource's part of the dump, its JSON length and its cut form: made once per resource, whatever its scopes. */
const resourceParts = new WeakMap<OtlpResourceSpans, { whole: Tree; chars: number; cut: Tree }>();

function resourcePart(resource: OtlpResourceSpans): { whole: Tree; chars: number; cut: Tree } {
  let part = resourceParts.get(resource);
  if (!part) {
    const whole = { attributes: flat(resource.resource.attributes), schema_url: resource.schemaUrl };
    const cut = { attributes: {}, dropped_attributes_count: resource.resource.attributes.length, schema_url: shortText(resource.schemaUrl, CUT_NAME_CHARS) };
    part = { whole, chars: JSON.stringify(whole).length, cut };
    resourceParts.set(resource, part);
  }
  return part;
}

export function spanContext(projectId: string, resource: OtlpResourceSpans, scope: OtlpScope): SpanContext {
  const shared = resourcePart(resource);
  const scopePart = { name: scope.name, version: scope.version, attributes: flat(scope.attributes) };
  const name = (text: string) => shortText(text, CUT_NAME_CHARS);
  return {
    projectId,
    resource: shared.whole,
    scope: scopePart,
    // As the two stand in the dump: "resource":{...},"scope":{...}
    sharedChars: shared.chars + JSON.stringify(scopePart).length + '"resource":,"scope":'.length,
    cut: {
      resource: shared.cut,
      scope: { name: name(scope.name), version: name(scope.version), attributes: {}, dropped_attributes_count: scope.attributes.length },
    },
  };
}

/**
 * What the spans of one export may spend on their copies of resource and scope attributes (each span's
 * otel_dump holds its own, read back as attributes.otel_span): the larger of SHARED_COPY_CHARS and the
 * export's own size, in characters of JSON. A span whose copy no longer fits stores its resource and scope
 * without their attributes. Without it, one 100 KB resource attribute sent once with 4,000 spans (a 22 KB
 * gzip body) stored 400 MB and took 2.5 GB of memory to write.
 */
export class SharedCopyBudget {
  /** Spans whose copy was cut. */
  cut = 0;
  private left: number;
  constructor(exportChars: number) {
    this.left = Math.max(SHARED_COPY_CHARS, exportChars);
  }
  /** Whether a span of `context` may keep its whole copy. */
  fits(context: SpanContext): boolean {
    return context.sharedChars <= this.left;
  }
  /** A span of `context` was stored, with its whole copy or without. */
  spend(context: SpanContext, whole: boolean): void {
    if (whole) this.left -= context.sharedChars;
    else this.cut += 1;
  }
}

export const SHARED_COPY_CHARS = 16 * 1024 * 1024;

/** The whole span as stored in otel_dump and returned as attributes.otel_span. */
function dump(span: OtlpSpan, context: SpanContext, whole: boolean): Tree {
  const shared = whole ? context : context.cut;
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
    resource: shared.resource,
    scope: shared.scope,
  };
}

const TRACE_ID = /^(?!0{32})[0-9a-f]{32}$/;
const SPAN_ID = /^(?!0{16})[0-9a-f]{16}$/;
const PARENT_ID = /^[0-9a-f]{16}$/;

/**
 * A span as one finished call (both halves known), in trace_calls' column names with the JSON columns
 * as values; the write path adds wb_user_id and the ref columns.
 */
export interface OtelCall {
  project_id: string;
  id: string;
  trace_id: string;
  parent_id: string | null;
  op_name: string;
  display_name: string | null;
  thread_id: string | null;
  turn_id: string | null;
  started_at: string;
  attributes: Tree;
  inputs: Tree;
  otel_dump: Tree;
  wb_run_id: string | null;
  wb_run_step: number | null;
  ended_at: string;
  exception: string | null;
  output: AttrValue;
  summary: Tree;
  wb_run_step_end: number | null;
}

/**
 * A span as one finished call of `context.projectId`; throws SpanRejected for a malformed span. `budget`:
 * the export's SharedCopyBudget (by default one of its own, for a span alone).
 */
export function spanToCall(context: SpanContext, span: OtlpSpan, budget = new SharedCopyBudget(0)): OtelCall {
  if (!TRACE_ID.test(span.traceId)) throw new SpanRejected(`invalid trace id ${JSON.stringify(span.traceId)} (expected 16 bytes, not all zero)`);
  if (!SPAN_ID.test(span.spanId)) throw new SpanRejected(`invalid span id ${JSON.stringify(span.spanId)} (expected 8 bytes, not all zero)`);
  if (span.parentSpanId !== '' && !PARENT_ID.test(span.parentSpanId)) throw new SpanRejected(`invalid parent span id ${JSON.stringify(span.parentSpanId)}`);
  if (span.name === '') throw new SpanRejected(`span ${span.spanId} has no name`);
  if (span.startTimeUnixNano === 0n) throw new SpanRejected(`span ${span.spanId} has no start time`);
  if (span.unreadable !== undefined) throw new SpanRejected(span.unreadable);

  const tree = unflatten(span.attributes);
  let events: Map<string, Tree[]> | undefined;
  if (span.events.length > 0) {
    events = new Map();
    for (const e of span.events) {
      const list = events.get(e.name);
      if (list) list.push(unflatten(e.attributes));
      else events.set(e.name, [unflatten(e.attributes)]);
    }
  }

  const input = firstOf(tree, INPUTS, events);
  let inputs: Tree = {};
  if (input) inputs = (input.key === 'input' || input.key === 'inputs') && isObject(input.value) ? input.value : { [input.key]: input.value };
  const outputFound = firstOf(tree, OUTPUTS, events);
  const output = outputFound ? (outputFound.key === 'output' || outputFound.key === 'outputs' ? outputFound.value : { [outputFound.key]: outputFound.value }) : null;

  const attributes: Tree = {};
  let found = false;
  for (const { name, lookups } of ATTRIBUTES) {
    const hit = firstOf(tree, lookups, events);
    if (hit) {
      attributes[name] = hit.value;
      found = true;
    }
  }
  const extra = get(tree, WANDB_ATTRIBUTES);
  if (isObject(extra)) Object.assign(attributes, extra);
  const callAttributes = found || Object.keys(attributes).length > 0 ? attributes : tree;

  let usage: Tree | undefined;
  for (const { name, parts } of USAGE) {
    for (const keyParts of parts) {
      const n = toNumber(get(tree, keyParts));
      if (n !== undefined) {
        (usage ??= {})[name] = n;
        break;
      }
    }
  }
  const model = typeof attributes.model === 'string' ? attributes.model : 'usage';
  const summary: Tree = usage ? { usage: { [model]: usage } } : {};

  const startedAt = langfuseTime(get(tree, LANGFUSE_START), 'langfuse.startTime') ?? isoFromNanos(span.startTimeUnixNano, 'startTimeUnixNano');
  const endNanos = span.endTimeUnixNano >= span.startTimeUnixNano ? span.endTimeUnixNano : span.startTimeUnixNano;
  const end = langfuseTime(get(tree, LANGFUSE_END), 'langfuse.endTime') ?? isoFromNanos(endNanos, 'endTimeUnixNano');
  // A call never ends before it starts (a langfuse.startTime after the span's end would make its latency negative).
  const endedAt = end < startedAt ? startedAt : end;

  const str = (parts: readonly string[]): string | null => {
    const v = get(tree, parts);
    return typeof v === 'string' && v !== '' ? v : null;
  };
  const int = (parts: readonly string[]): number | null => {
    const n = toNumber(get(tree, parts));
    return n !== undefined && Number.isSafeInteger(n) ? n : null;
  };
  const vertexSession = str(VERTEX_SESSION);
  const turnFlag = get(tree, IS_TURN);
  const isTurn = turnFlag === true || turnFlag === 'true' || vertexSession !== null;

  let exception: string | null = null;
  if (span.status.code === STATUS_ERROR) {
    const thrown = events?.get('exception')?.[0];
    const fromEvent = thrown ? [get(thrown, EXCEPTION_TYPE), get(thrown, EXCEPTION_MESSAGE)].filter((x) => typeof x === 'string' && x !== '').join(': ') : '';
    exception = span.status.message || fromEvent || 'Span status ERROR';
  }

  const whole = budget.fits(context);
  const otelDump = dump(span, context, whole);
  // The same bound as every other stored payload: a kvlist nested (or a JSON string attribute parsed)
  // past it would be stored and then fail every read of the project's calls.
  // The dump holds each attribute two levels down (dump > attributes > value), so it is the first to pass it.
  const stored = { inputs, output, attributes: callAttributes, 'the span as stored (otel_dump)': otelDump };
  for (const [field, value] of Object.entries(stored)) {
    if (nestsDeeperThan(value)) throw new SpanRejected(`${field} nests more than ${MAX_JSON_DEPTH} levels of objects and arrays, the most that is stored`);
  }

  const threadId = bounded(str(THREAD_ID) ?? vertexSession, 'wandb.thread_id', TRACING_LIMITS.callIdLength);
  const runId = bounded(str(RUN_ID), 'wandb.wb_run_id', TRACING_LIMITS.keyLength);
  budget.spend(context, whole);
  return {
    project_id: context.projectId,
    id: span.spanId,
    trace_id: span.traceId,
    parent_id: span.parentSpanId || null,
    op_name: opName(span.name),
    display_name: displayName(str(DISPLAY_NAME)),
    thread_id: threadId,
    turn_id: isTurn ? span.spanId : null,
    started_at: startedAt,
    attributes: callAttributes,
    inputs,
    otel_dump: otelDump,
    wb_run_id: runId,
    wb_run_step: int(RUN_STEP),
    ended_at: endedAt,
    exception,
    output,
    summary,
    wb_run_step_end: int(RUN_STEP_END),
  };
}
