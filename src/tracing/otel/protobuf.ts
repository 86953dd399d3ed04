import protobuf from 'protobufjs/minimal.js';
import { InvalidRequestError } from '../../errors.js';
import { ExactOtlpNumbers } from '../exact-numbers.js';
import { attributeTooDeep, checkDepth, emptySpan, ValueTooDeep, type AttrValue, type KeyValue, type OtlpEvent, type OtlpLink, type OtlpResourceSpans, type OtlpScope, type OtlpScopeSpans, type OtlpSpan, type OtlpTraceRequest } from './model.js';

/**
 * OTLP/HTTP protobuf: `opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest` decoded with
 * protobufjs' Reader, field by field, from the public OTLP field numbers (opentelemetry-proto,
 * trace/v1, common/v1, resource/v1). No .proto file or generated code: the schema is this file.
 * Unknown fields are skipped, as protobuf requires.
 */

const { Reader, Writer } = protobuf;
/** A request's reader, with the bound on the exact numbers its values may keep. */
type Reader = protobuf.Reader & { readonly numbers: ExactOtlpNumbers };

const hex = (bytes: Uint8Array): string => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');

/** fixed64 as an exact bigint (a double would lose the nanoseconds of current timestamps). */
function fixed64(reader: Reader): bigint {
  const low = reader.fixed32();
  const high = reader.fixed32();
  return (BigInt(high) << 32n) | BigInt(low);
}

/** int64 as a number when it fits, else as its decimal text. */
function int64(reader: protobuf.Reader): number | string {
  const value = reader.int64() as unknown as number | { toNumber(): number; toString(): string };
  if (typeof value === 'number') return value;
  const n = value.toNumber();
  return Number.isSafeInteger(n) ? n : value.toString();
}

/** An attribute's int64: a number when it fits, else an ExactNumber of its digits. */
function int64Value(reader: Reader, numbers: ExactOtlpNumbers): AttrValue {
  const value = int64(reader);
  return typeof value === 'number' ? value : numbers.integer(value);
}

/** Reads the messages of a length-delimited field: `each(tag)` handles one field, returning false to skip it. */
function message(reader: protobuf.Reader, length: number, each: (field: number) => boolean): void {
  const end = reader.pos + length;
  while (reader.pos < end) {
    const tag = reader.uint32();
    if (!each(tag >>> 3)) reader.skipType(tag & 7);
  }
}

/** An AnyValue `levels` arrays and key-value lists down, its typed numbers kept by `numbers` (ValueTooDeep past MAX_JSON_DEPTH). */
function anyValue(reader: Reader, length: number, numbers: ExactOtlpNumbers, levels: number): AttrValue {
  let value: AttrValue = null;
  message(reader, length, (field) => {
    switch (field) {
      case 1: value = reader.string(); return true;
      case 2: value = reader.bool(); return true;
      case 3: value = int64Value(reader, numbers); return true;
      case 4: value = numbers.double(reader.double()); return true;
      case 5: {
        checkDepth(levels + 1);
        const values: AttrValue[] = [];
        message(reader, reader.uint32(), (f) => (f === 1 ? (values.push(anyValue(reader, reader.uint32(), numbers, levels + 1)), true) : false));
        value = values;
        return true;
      }
      case 6: {
        checkDepth(levels + 1);
        const out: Record<string, AttrValue> = {};
        message(reader, reader.uint32(), (f) => {
          if (f !== 1) return false;
          const kv = keyValue(reader, reader.uint32(), numbers, levels + 1);
          out[kv.key] = kv.value;
          return true;
        });
        value = out;
        return true;
      }
      case 7: value = Buffer.from(reader.bytes()).toString('base64'); return true;
      default: return false;
    }
  });
  return value;
}

/** A KeyValue whose value is `levels` arrays and key-value lists down. */
function keyValue(reader: Reader, length: number, numbers: ExactOtlpNumbers, levels: number): KeyValue {
  const kv: KeyValue = { key: '', value: null };
  message(reader, length, (field) => {
    if (field === 1) kv.key = reader.string();
    else if (field === 2) kv.value = anyValue(reader, reader.uint32(), numbers, levels);
    else return false;
    return true;
  });
  return kv;
}

/**
 * An attribute (a top-level KeyValue) of `length` bytes, or, when its value nests past MAX_JSON_DEPTH,
 * its key alone (`tooDeep`): the value is skipped whole, and the reader continues after the attribute.
 */
function attribute(reader: Reader, length: number, numbers: ExactOtlpNumbers): KeyValue | { tooDeep: string } {
  const start = reader.pos;
  try {
    return keyValue(reader, length, numbers, 0);
  } catch (error) {
    if (!(error instanceof ValueTooDeep)) throw error;
  }
  reader.pos = start;
  let key = '';
  message(reader, length, (field) => (field === 1 ? ((key = reader.string()), true) : false));
  return { tooDeep: key };
}

/** Reads an attribute of `span` (or of its event or link, `where`) into `into`; one nested too deep makes the span unreadable. */
function spanAttribute(reader: Reader, span: OtlpSpan, into: KeyValue[], where?: string): void {
  const kv = attribute(reader, reader.uint32(), reader.numbers);
  if ('tooDeep' in kv) span.unreadable ??= attributeTooDeep(kv.tooDeep, where);
  else into.push(kv);
}

/** A resource's or scope's attribute; one nested too deep (it is copied into every span) fails the request. */
function sharedAttribute(reader: Reader, where: string): KeyValue {
  const kv = attribute(reader, reader.uint32(), ExactOtlpNumbers.plain);
  if ('tooDeep' in kv) throw new Error(attributeTooDeep(kv.tooDeep, where));
  return kv;
}

function event(reader: Reader, length: number, span: OtlpSpan): OtlpEvent {
  const e: OtlpEvent = { timeUnixNano: 0n, name: '', attributes: [], droppedAttributesCount: 0 };
  message(reader, length, (field) => {
    switch (field) {
      case 1: e.timeUnixNano = fixed64(reader); return true;
      case 2: e.name = reader.string(); return true;
      case 3: spanAttribute(reader, span, e.attributes, 'event'); return true;
      case 4: e.droppedAttributesCount = reader.uint32(); return true;
      default: return false;
    }
  });
  return e;
}

function link(reader: Reader, length: number, span: OtlpSpan): OtlpLink {
  const l: OtlpLink = { traceId: '', spanId: '', traceState: '', attributes: [], droppedAttributesCount: 0, flags: 0 };
  message(reader, length, (field) => {
    switch (field) {
      case 1: l.traceId = hex(reader.bytes()); return true;
      case 2: l.spanId = hex(reader.bytes()); return true;
      case 3: l.traceState = reader.string(); return true;
      case 4: spanAttribute(reader, span, l.attributes, 'link'); return true;
      case 5: l.droppedAttributesCount = reader.uint32(); return true;
      case 6: l.flags = reader.fixed32(); return true;
      default: return false;
    }
  });
  return l;
}

function span(reader: Reader, length: number): OtlpSpan {
  const s = emptySpan();
  message(reader, length, (field) => {
    switch (field) {
      case 1: s.traceId = hex(reader.bytes()); return true;
      case 2: s.spanId = hex(reader.bytes()); return true;
      case 3: s.traceState = reader.string(); return true;
      case 4: s.parentSpanId = hex(reader.bytes()); return true;
      case 5: s.name = reader.string(); return true;
      case 6: s.kind = reader.int32(); return true;
      case 7: s.startTimeUnixNano = fixed64(reader); return true;
      case 8: s.endTimeUnixNano = fixed64(reader); return true;
      case 9: spanAttribute(reader, s, s.attributes); return true;
      case 10: s.droppedAttributesCount = reader.uint32(); return true;
      case 11: s.events.push(event(reader, reader.uint32(), s)); return true;
      case 12: s.droppedEventsCount = reader.uint32(); return true;
      case 13: s.links.push(link(reader, reader.uint32(), s)); return true;
      case 14: s.droppedLinksCount = reader.uint32(); return true;
      case 15:
        message(reader, reader.uint32(), (f) => {
          if (f === 2) s.status.message = reader.string();
          else if (f === 3) s.status.code = reader.int32();
          else return false;
          return true;
        });
        return true;
      case 16: s.flags = reader.fixed32(); return true;
      default: return false;
    }
  });
  return s;
}

function scope(reader: Reader, length: number): OtlpScope {
  const sc: OtlpScope = { name: '', version: '', attributes: [] };
  message(reader, length, (field) => {
    if (field === 1) sc.name = reader.string();
    else if (field === 2) sc.version = reader.string();
    else if (field === 3) sc.attributes.push(sharedAttribute(reader, 'scope'));
    else return false;
    return true;
  });
  return sc;
}

function scopeSpans(reader: Reader, length: number): OtlpScopeSpans {
  const ss: OtlpScopeSpans = { scope: { name: '', version: '', attributes: [] }, spans: [], schemaUrl: '' };
  message(reader, length, (field) => {
    if (field === 1) ss.scope = scope(reader, reader.uint32());
    else if (field === 2) ss.spans.push(span(reader, reader.uint32()));
    else if (field === 3) ss.schemaUrl = reader.string();
    else return false;
    return true;
  });
  return ss;
}

function resourceSpans(reader: Reader, length: number): OtlpResourceSpans {
  const rs: OtlpResourceSpans = { resource: { attributes: [] }, scopeSpans: [], schemaUrl: '' };
  message(reader, length, (field) => {
    if (field === 1) {
      message(reader, reader.uint32(), (f) => (f === 1 ? (rs.resource.attributes.push(sharedAttribute(reader, 'resource')), true) : false));
    } else if (field === 2) rs.scopeSpans.push(scopeSpans(reader, reader.uint32()));
    else if (field === 3) rs.schemaUrl = reader.string();
    else return false;
    return true;
  });
  return rs;
}

/** Decodes an ExportTraceServiceRequest; a body that is not one is a 400. */
export function decodeTraceRequest(body: Uint8Array): OtlpTraceRequest {
  const reader: Reader = Object.assign(Reader.create(body), { numbers: new ExactOtlpNumbers(body.length) });
  const request: OtlpTraceRequest = { resourceSpans: [] };
  try {
    message(reader, body.length, (field) => (field === 1 ? (request.resourceSpans.push(resourceSpans(reader, reader.uint32())), true) : false));
  } catch (error) {
    throw new InvalidRequestError(`The body is not a valid OTLP ExportTraceServiceRequest (protobuf): ${(error as Error).message}`, { code: 'invalid_otlp' });
  }
  return request;
}

/** ExportTraceServiceResponse: empty, or with `partial_success { rejected_spans = 1; error_message = 2; }` (field 1). */
export function encodeTraceResponse(partial?: { rejectedSpans: number; errorMessage: string }): Buffer {
  if (!partial) return Buffer.alloc(0);
  const writer = Writer.create();
  writer.uint32((1 << 3) | 2).fork();
  writer.uint32((1 << 3) | 0).int64(partial.rejectedSpans);
  writer.uint32((2 << 3) | 2).string(partial.errorMessage);
  writer.ldelim();
  return Buffer.from(writer.finish());
}

/** Reads an ExportTraceServiceResponse (for tests and the benchmark). */
export function decodeTraceResponse(body: Uint8Array): { rejectedSpans: number; errorMessage: string } | undefined {
  const reader = Reader.create(body);
  let partial: { rejectedSpans: number; errorMessage: string } | undefined;
  message(reader, body.length, (field) => {
    if (field !== 1) return false;
    partial = { rejectedSpans: 0, errorMessage: '' };
    message(reader, reader.uint32(), (f) => {
      if (f === 1) partial!.rejectedSpans = Number(int64(reader));
      else if (f === 2) partial!.errorMessage = reader.string();
      else return false;
      return true;
    });
    return true;
  });
  return partial;
}
