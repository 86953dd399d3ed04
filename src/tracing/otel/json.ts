import { z } from 'zod';
import { InvalidRequestError } from '../../errors.js';
import { ExactOtlpNumbers } from '../exact-numbers.js';
import { emptySpan, SPAN_KINDS, STATUS_CODES, type AttrValue, type KeyValue, type OtlpResourceSpans, type OtlpSpan, type OtlpTraceRequest } from './model.js';

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

function anyValue(v: unknown, numbers: ExactOtlpNumbers): AttrValue {
  if (v === null || typeof v !== 'object') return null;
  const o = v as Record<string, unknown>;
  const s = pick(o, 'stringValue', 'string_value');
  if (s !== undefined) return str(s);
  const b = pick(o, 'boolValue', 'bool_value');
  if (b !== undefined) return Boolean(b);
  const i = pick(o, 'intValue', 'int_value');
  if (i !== undefined) {
    // int64 as its digits (the JSON mapping's form) is kept whole; a bare number is what JSON.parse made of it.
    const digits = typeof i === 'string' ? int64Digits(i) : typeof i === 'number' && Number.isInteger(i) ? int64Digits(BigInt(i).toString()) : undefined;
    if (digits !== undefined) return numbers.integer(digits);
    const n = Number(i);
    return Number.isSafeInteger(n) ? n : String(i);
  }
  const d = pick(o, 'doubleValue', 'double_value');
  if (d !== undefined) return numbers.double(typeof d === 'number' ? d : Number(d));
  const a = pick(o, 'arrayValue', 'array_value');
  if (a !== undefined) return asList((a as Record<string, unknown> | null)?.values ?? []).map((item) => anyValue(item, numbers));
  const kv = pick(o, 'kvlistValue', 'kvlist_value');
  if (kv !== undefined) return Object.fromEntries(keyValues((kv as Record<string, unknown> | null)?.values, numbers).map((x) => [x.key, x.value]));
  const bytes = pick(o, 'bytesValue', 'bytes_value');
  if (bytes !== undefined) return str(bytes);
  return null;
}

function keyValues(v: unknown, numbers: ExactOtlpNumbers): KeyValue[] {
  return asList(v).map((kv) => ({ key: str(kv.key), value: anyValue(kv.value, numbers) }));
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
  s.attributes = keyValues(o.attributes, numbers);
  s.droppedAttributesCount = int(pick(o, 'droppedAttributesCount', 'dropped_attributes_count'));
  s.events = asList(o.events).map((e) => ({
    timeUnixNano: nanos(pick(e, 'timeUnixNano', 'time_unix_nano')),
    name: str(e.name),
    attributes: keyValues(e.attributes, numbers),
    droppedAttributesCount: int(pick(e, 'droppedAttributesCount', 'dropped_attributes_count')),
  }));
  s.droppedEventsCount = int(pick(o, 'droppedEventsCount', 'dropped_events_count'));
  s.links = asList(o.links).map((l) => ({
    traceId: id(pick(l, 'traceId', 'trace_id'), 16),
    spanId: id(pick(l, 'spanId', 'span_id'), 8),
    traceState: str(pick(l, 'traceState', 'trace_state')),
    attributes: keyValues(l.attributes, numbers),
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
 * its exact numbers, ExactOtlpNumbers); a body whose structure is wrong is a 400.
 */
export function readJsonTraceRequest(body: unknown, size: number): OtlpTraceRequest {
  const numbers = new ExactOtlpNumbers(size);
  const parsed = OtlpJsonRequest.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new InvalidRequestError(`The body is not an OTLP/JSON ExportTraceServiceRequest: ${issue.path.join('.') || 'body'}: ${issue.message}`, { code: 'invalid_otlp' });
  }
  const resourceSpans: OtlpResourceSpans[] = asList(pick(parsed.data, 'resourceSpans', 'resource_spans')).map((rs) => ({
    resource: { attributes: keyValues((rs.resource as Record<string, unknown> | undefined)?.attributes, ExactOtlpNumbers.plain) },
    schemaUrl: str(pick(rs, 'schemaUrl', 'schema_url')),
    scopeSpans: asList(pick(rs, 'scopeSpans', 'scope_spans')).map((ss) => {
      const scope = (ss.scope ?? {}) as Record<string, unknown>;
      return {
        scope: { name: str(scope.name), version: str(scope.version), attributes: keyValues(scope.attributes, ExactOtlpNumbers.plain) },
        schemaUrl: str(pick(ss, 'schemaUrl', 'schema_url')),
        spans: asList(ss.spans).map((item) => span(item, numbers)),
      };
    }),
  }));
  return { resourceSpans };
}
