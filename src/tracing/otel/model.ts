import type { ExactNumber } from '../exact-numbers.js';

/**
 * An OTLP trace export request as the mapping reads it, decoded from protobuf (./protobuf.ts) or from
 * OTLP/JSON (./json.ts). Ids are lowercase hex; times are nanoseconds since the epoch. A double with a
 * whole value and an int64 beyond 2^53 are ExactNumbers, so that they are stored and read back as sent
 * (`1.0` a float, every digit of the integer), as the Python server keeps them.
 */

export type AttrValue = string | number | ExactNumber | boolean | null | AttrValue[] | { [key: string]: AttrValue };

export interface KeyValue {
  key: string;
  value: AttrValue;
}

export interface OtlpEvent {
  timeUnixNano: bigint;
  name: string;
  attributes: KeyValue[];
  droppedAttributesCount: number;
}

export interface OtlpLink {
  traceId: string;
  spanId: string;
  traceState: string;
  attributes: KeyValue[];
  droppedAttributesCount: number;
  flags: number;
}

export interface OtlpSpan {
  traceId: string;
  spanId: string;
  traceState: string;
  parentSpanId: string;
  name: string;
  kind: number;
  startTimeUnixNano: bigint;
  endTimeUnixNano: bigint;
  attributes: KeyValue[];
  droppedAttributesCount: number;
  events: OtlpEvent[];
  droppedEventsCount: number;
  links: OtlpLink[];
  droppedLinksCount: number;
  status: { code: number; message: string };
  flags: number;
}

export interface OtlpScope {
  name: string;
  version: string;
  attributes: KeyValue[];
}

export interface OtlpScopeSpans {
  scope: OtlpScope;
  spans: OtlpSpan[];
  schemaUrl: string;
}

export interface OtlpResourceSpans {
  resource: { attributes: KeyValue[] };
  scopeSpans: OtlpScopeSpans[];
  schemaUrl: string;
}

export interface OtlpTraceRequest {
  resourceSpans: OtlpResourceSpans[];
}

export const SPAN_KINDS = ['SPAN_KIND_UNSPECIFIED', 'SPAN_KIND_INTERNAL', 'SPAN_KIND_SERVER', 'SPAN_KIND_CLIENT', 'SPAN_KIND_PRODUCER', 'SPAN_KIND_CONSUMER'];
export const STATUS_CODES = ['STATUS_CODE_UNSET', 'STATUS_CODE_OK', 'STATUS_CODE_ERROR'];
export const STATUS_ERROR = 2;

export function emptySpan(): OtlpSpan {
  return {
    traceId: '',
    spanId: '',
    traceState: '',
    parentSpanId: '',
    name: '',
    kind: 0,
    startTimeUnixNano: 0n,
    endTimeUnixNano: 0n,
    attributes: [],
    droppedAttributesCount: 0,
    events: [],
    droppedEventsCount: 0,
    links: [],
    droppedLinksCount: 0,
    status: { code: 0, message: '' },
    flags: 0,
  };
}
