import { MAX_JSON_DEPTH } from '../../http/json-depth.js';
import type { ExactNumber } from '../exact-numbers.js';
import { shortText } from '../sanitize.js';

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
  /** Why the decoder could not read the span whole (an attribute nested too deep); the mapping rejects it. */
  unreadable?: string;
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

/**
 * A decoder met an AnyValue nesting deeper than MAX_JSON_DEPTH levels of arrays and key-value lists: it
 * stops there (a value deeper than that could not be stored, and reading it recursively could overflow
 * the stack), and the attribute's reader names the attribute (attributeTooDeep).
 */
export class ValueTooDeep extends Error {}

/** Throws ValueTooDeep for an array or key-value list `levels` levels down (the outermost is 1) past MAX_JSON_DEPTH. */
export function checkDepth(levels: number): void {
  if (levels > MAX_JSON_DEPTH) throw new ValueTooDeep();
}

/** The message of an attribute (`where`: of a span, `event`, `link`, `resource`, `scope`) nested past MAX_JSON_DEPTH. */
export function attributeTooDeep(key: string, where?: string): string {
  return `${where ? `${where} ` : ''}attribute ${JSON.stringify(shortText(key))} nests more than ${MAX_JSON_DEPTH} levels of arrays and key-value lists, the most that is stored`;
}

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
