import { z } from 'zod';
import { InvalidRequestError } from '../../errors.js';
import { ExactOtlpNumbers } from '../exact-numbers.js';
import { shortText } from '../sanitize.js';
import { attributeTooDeep, checkDepth, emptySpan, SPAN_KINDS, STATUS_CODES, ValueTooDeep, type AttrValue, type KeyValue, type OtlpResourceSpans, type OtlpSpan, type OtlpTraceRequest } from './model.js';

/**
 * OTLP/JSON (the protobuf JSON mapping: lowerCamelCase names, ids as hex, 64-bit numbers as strings,
 * enums as numbers or names). The proto field names (snake_case) are accepted too, as protobuf JSON
 * parsers do, and ids given as base64 (what a generic protobuf-to-JSON converter writes).
 */

const loose = z.looseObject({});
const list = z.array(loose).nullish();
const INTEGER = /^-?\d+$/;
const Int = z.union([z.number(), z.string().regex(INTEGER)]).nullish();

/** Only the structure is checked here; values are read leniently below. */
export const OtlpJsonRequest = z
  .looseObject({
    resourceSpans: list,
    resource_spans: list,
  })
  .describe('OTLP/JSON ExportTraceServiceRequest');

const pick = (o: Record<string, unknown>, camel: string, snake: string): unknown => (o[camel] !== undefined ? o[camel] : o[snake]);
const asList = (v: unknown): Record<string, unknown>[] => (Array.isArray(v) ? v.filter((x): x is Record<string, unknown> => x !== null && typeof x === 'object') : []);
const str = (v: unknown): string => (typeof v === 'string' ? v : '');
const int = (v: unknown): number => {
  const parsed = Int.safeParse(v);
  return parsed.success && parsed.data != null ? Number(parsed.data) : 0;
};
const nanos = (v: unknown): bigint => {
  if (typeof v === 'string' && /^\d+$/.test(v)) return BigInt(v);
  if (typeof v === 'number' && Number.isFinite(v) && v >= 0) return BigInt(Math.trunc(v));
  return 0n;
};
const enumValue = (v: unknown, names: readonly string[]): number => (typeof v === 'string' ? Math.max(0, names.indexOf(v)) : int(v));

/** An id as hex: hex as sent, or base64 turned into hex; anything else stays as sent, and is rejected later. */
function id(v: unknown, bytes: number): string {
  const text = str(v);
  if (text === '' || new RegExp(`^[0-9a-fA-F]{${bytes * 2}}$`).test(text)) return text.toLowerCase();
  const decoded = Buffer.from(text, 'base64');
  return decoded.length === bytes && /^[A-Za-z0-9+/_-]+=*$/.test(text) ? decoded.toString('hex') : text;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** Decimal text that is an int64, as its digits; undefined for anything else. */
function int64Digits(text: string): string | undefined {
  if (text.length > 20 || !INTEGER.test(text)) return undefined;
  const value = BigInt(text);
  return value >= INT64_MIN && value <= INT64_MAX ? value.toString() : undefined;
}

const invalid = (message: string) => new InvalidRequestError(`The body is not an OTLP/JSON ExportTraceServiceRequest: ${message}`, { code: 'invalid_otlp' });

/** A client's value as a message names it: text and numbers as sent (text cut short), a structure by its kind. */
function named(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(shortText(v));
  if (Array.isArray(v)) return 'an array';
  return v !== null && typeof v === 'object' ? 'an object' : String(v);
}

/**
 * A boolValue: a JSON boolean, or the text "true" or "false"; null is the default, false (proto3 JSON).
 * Anything else is a 400: the collector's OTLP/JSON reader refuses the export too, where storing the
 * truthiness would turn `"false"` into true.
 */
function boolValue(b: unknown): boolean {
  if (typeof b === 'boolean') return b;
  if (b === 'true' || b === 'false') return b === 'true';
  if (b === null) return false;
  throw invalid(`boolValue ${named(b)} is not a boolean (true or false)`);
}

/**
 * An intValue: an int64 as decimal digits (the JSON mapping's form) kept whole, or a whole JSON number;
 * null is the default, 0. Anything else is a 400, as in the collector, which reads int64 from a number or
 * a decimal string only. A bare number beyond 2^53 is what JSON.parse made of it: 2^63 is an int64 near
 * the top, rounded up, and stays the text JavaScript writes for it, as before.
 */
function intValue(i: unknown, numbers: ExactOtlpNumbers): AttrValue {
  if (i === null) return 0;
  const digits = typeof i === 'string' ? int64Digits(i) : typeof i === 'number' && Number.isInteger(i) ? int64Digits(BigInt(i).toString()) : undefined;
  if (digits !== undefined) return numbers.integer(digits);
  if (i === 2 ** 63) return String(i);
  throw invalid(`intValue ${named(i)} is not an int64 (a whole number from -2^63 to 2^63-1, as a JSON number or decimal digits in a string)`);
}

/** An AnyValue `levels` arrays and key-value lists down (ValueTooDeep past MAX_JSON_DEPTH). */
function anyValue(v: unknown, numbers: ExactOtlpNumbers, levels: number): AttrValue {
  if (v === null || typeof v !== 'object') return null;
  const o = v as Record<string, unknown>;
  const s = pick(o, 'stringValue', 'string_value');
  if (s !== undefined) return str(s);
  const b = pick(o, 'boolValue', 'bool_value');
  if (b !== undefined) return boolValue(b);
  const i = pick(o, 'intValue', 'int_value');
  if (i !== undefined) return intValue(i, numbers);
  const d = pick(o, 'doubleValue', 'double_value');
  if (d !== undefined) return numbers.double(typeof d === 'number' ? d : Number(d));
  const a = pick(o, 'arrayValue', 'array_value');
  if (a !== undefined) {
    checkDepth(levels + 1);
    return asList((a as Record<string, unknown> | null)?.values ?? []).map((item) => anyValue(item, numbers, levels + 1));
  }
  const kv = pick(o, 'kvlistValue', 'kvlist_value');
  if (kv !== undefined) {
    checkDepth(levels + 1);
    return Object.fromEntries(keyValues((kv as Record<string, unknown> | null)?.values, numbers, levels + 1).map((x) => [x.key, x.value]));
  }
  const bytes = pick(o, 'bytesValue', 'bytes_value');
  if (bytes !== undefined) return str(bytes);
  return null;
}

function keyValues(v: unknown, numbers: ExactOtlpNumbers, levels: number): KeyValue[] {
  return asList(v).map((kv) => ({ key: str(kv.key), value: anyValue(kv.value, numbers, levels) }));
}

/**
 * A span's (event's, link's) attributes; one nested past MAX_JSON_DEPTH is left out and makes the
 * span unreadable, so that the mapping rejects that span alone.
 */
function spanAttributes(v: unknown, numbers: ExactOtlpNumbers, span: OtlpSpan, where?: string): KeyValue[] {
  const out: KeyValue[] = [];
  for (const kv of asList(v)) {
    try {
      out.push({ key: str(kv.key), value: anyValue(kv.value, numbers, 0) });
    } catch (error) {
      if (!(error instanceof ValueTooDeep)) throw error;
      span.unreadable ??= attributeTooDeep(str(kv.key), where);
    }
  }
  return out;
}

/** A resource's or scope's attributes; one nested past MAX_JSON_DEPTH (copied into every span) is a 400. */
function sharedAttributes(v: unknown, where: string): KeyValue[] {
  return asList(v).map((kv) => {
    try {
      return { key: str(kv.key), value: anyValue(kv.value, ExactOtlpNumbers.plain, 0) };
    } catch (error) {
      if (error instanceof ValueTooDeep) throw invalid(attributeTooDeep(str(kv.key), where));
      throw error;
    }
  });
}

function span(o: Record<string, unknown>, numbers: ExactOtlpNumbers): OtlpSpan {
  const s = emptySpan();
  s.traceId = id(pick(o, 'traceId', 'trace_id'), 16);
  s.spanId = id(pick(o, 'spanId', 'span_id'), 8);
  s.parentSpanId = id(pick(o, 'parentSpanId', 'parent_span_id'), 8);
  s.traceState = str(pick(o, 'traceState', 'trace_state'));
  s.name = str(o.name);
  s.kind = enumValue(o.kind, SPAN_KINDS);
  s.startTimeUnixNano = nanos(pick(o, 'startTimeUnixNano', 'start_time_unix_nano'));
  s.endTimeUnixNano = nanos(pick(o, 'endTimeUnixNano', 'end_time_unix_nano'));
  s.attributes = spanAttributes(o.attributes, numbers, s);
  s.droppedAttributesCount = int(pick(o, 'droppedAttributesCount', 'dropped_attributes_count'));
  s.events = asList(o.events).map((e) => ({
    timeUnixNano: nanos(pick(e, 'timeUnixNano', 'time_unix_nano')),
    name: str(e.name),
    attributes: spanAttributes(e.attributes, numbers, s, 'event'),
    droppedAttributesCount: int(pick(e, 'droppedAttributesCount', 'dropped_attributes_count')),
  }));
  s.droppedEventsCount = int(pick(o, 'droppedEventsCount', 'dropped_events_count'));
  s.links = asList(o.links).map((l) => ({
    traceId: id(pick(l, 'traceId', 'trace_id'), 16),
    spanId: id(pick(l, 'spanId', 'span_id'), 8),
    traceState: str(pick(l, 'traceState', 'trace_state')),
    attributes: spanAttributes(l.attributes, numbers, s, 'link'),
    droppedAttributesCount: int(pick(l, 'droppedAttributesCount', 'dropped_attributes_count')),
    flags: int(l.flags),
  }));
  s.droppedLinksCount = int(pick(o, 'droppedLinksCount', 'dropped_links_count'));
  const status = (o.status ?? {}) as Record<string, unknown>;
  s.status = { code: enumValue(status.code, STATUS_CODES), message: str(status.message) };
  s.flags = int(o.flags);
  return s;
}

/**
 * Reads an OTLP/JSON ExportTraceServiceRequest, parsed from a text of `size` characters (the bound on
 * its exact numbers, ExactOtlpNumbers); a body whose structure is wrong is a 400, and so is a boolValue
 * or intValue that is none, or a resource or scope attribute nested past MAX_JSON_DEPTH.
 */
export function readJsonTraceRequest(body: unknown, size: number): OtlpTraceRequest {
  const numbers = new ExactOtlpNumbers(size);
  const parsed = OtlpJsonRequest.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw invalid(`${issue.path.join('.') || 'body'}: ${issue.message}`);
  }
  const resourceSpans: OtlpResourceSpans[] = asList(pick(parsed.data, 'resourceSpans', 'resource_spans')).map((rs) => ({
    resource: { attributes: sharedAttributes((rs.resource as Record<string, unknown> | undefined)?.attributes, 'resource') },
    schemaUrl: str(pick(rs, 'schemaUrl', 'schema_url')),
    scopeSpans: asList(pick(rs, 'scopeSpans', 'scope_spans')).map((ss) => {
      const scope = (ss.scope ?? {}) as Record<string, unknown>;
      return {
        scope: { name: str(scope.name), version: str(scope.version), attributes: sharedAttributes(scope.attributes, 'scope') },
        schemaUrl: str(pick(ss, 'schemaUrl', 'schema_url')),
        spans: asList(ss.spans).map((item) => span(item, numbers)),
      };
    }),
  }));
  return { resourceSpans };
}
