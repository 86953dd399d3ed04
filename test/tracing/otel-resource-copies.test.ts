import { gzipSync } from 'node:zlib';
import protobuf from 'protobufjs/minimal.js';
import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { decodeTraceResponse } from '../../src/tracing/otel/protobuf.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { basicAuth, lines, post } from './helpers.js';

/**
 * Each span's stored otel_dump (read back as attributes.otel_span) holds a copy of its resource and scope.
 * One export may spend at most 16 MiB (or its own size, when larger) on those copies: later spans are
 * stored without the resource and scope attributes, counted in their dropped_attributes_count, and the
 * answer says so in OTLP's partial success (no span rejected).
 */

let app: App;
let user: TestUser;
appWithUser((made) => ({ app, user } = made));

const MIB = 1024 * 1024;
const SPANS = 20;
const spanId = (i: number) => (i + 1).toString(16).padStart(16, '0');

/** An OTLP/JSON export of SPANS spans under one resource with a 1 MiB attribute. */
function exportWithBigResource() {
  const spans = Array.from({ length: SPANS }, (_, i) => ({
    traceId: '0af7651916cd43dd8448eb211c80319c',
    spanId: spanId(i),
    name: `span ${i}`,
    startTimeUnixNano: '1735689600000000000',
    endTimeUnixNano: '1735689601000000000',
    attributes: [{ key: 'input.value', value: { stringValue: `q${i}` } }],
  }));
  return {
    resourceSpans: [
      {
        resource: { attributes: [{ key: 'service.name', value: { stringValue: 'svc' } }, { key: 'big', value: { stringValue: 'x'.repeat(MIB) } }] },
        scopeSpans: [{ scope: { name: 'scope', version: '1.0', attributes: [{ key: 'lib', value: { stringValue: 'l' } }] }, spans }],
      },
    ],
  };
}

const WARNING =
  '5 span(s) stored without their resource and scope attributes (otel_span.resource and otel_span.scope, their dropped_attributes_count says how many): ' +
  "the export's copies of them reached 16 MiB, the most one export stores. Send fewer spans per export, or a smaller resource.";

async function otelSpans(project: string): Promise<{ id: string; otel: { resource: unknown; scope: unknown } }[]> {
  const response = await post(app, user, '/calls/stream_query', { project_id: project, sort_by: [{ field: 'id', direction: 'asc' }] });
  expect(response.statusCode).toBe(200);
  return lines(response.body).map((call) => ({ id: call.id as string, otel: (call.attributes as { otel_span: { resource: unknown; scope: unknown } }).otel_span }));
}

describe('copies of an export\'s resource and scope', () => {
  it('stop at 16 MiB: later spans keep no resource or scope attributes, and the answer warns in partialSuccess', async () => {
    const project = `${user.entity}/${uniqueName('otelres')}`;
    const response = await app.inject({
      method: 'POST',
      url: '/traces/otel/v1/traces',
      headers: { authorization: basicAuth(user.key), project_id: project, 'content-type': 'application/json', 'content-encoding': 'gzip' },
      payload: gzipSync(JSON.stringify(exportWithBigResource())),
    });
    expect([response.statusCode, response.json()]).toEqual([200, { partialSuccess: { rejectedSpans: 0, errorMessage: WARNING } }]);

    const stored = await otelSpans(project);
    expect(stored.map((s) => s.id)).toEqual(Array.from({ length: SPANS }, (_, i) => spanId(i)));
    // 15 copies of about 1 MiB fit in 16 MiB, in the order the spans came.
    for (const { otel } of stored.slice(0, 15)) {
      expect(otel.resource).toEqual({ attributes: { 'service.name': 'svc', big: 'x'.repeat(MIB) }, schema_url: '' });
      expect(otel.scope).toEqual({ name: 'scope', version: '1.0', attributes: { lib: 'l' } });
    }
    for (const { otel } of stored.slice(15)) {
      expect(otel.resource).toEqual({ attributes: {}, dropped_attributes_count: 2, schema_url: '' });
      expect(otel.scope).toEqual({ name: 'scope', version: '1.0', attributes: {}, dropped_attributes_count: 1 });
    }
  }, 60_000);

  it('warn in weave\'s {project_id, traces} form too', async () => {
    const project = `${user.entity}/${uniqueName('otelres')}`;
    const weave = await post(app, user, '/otel/v1/trace', { project_id: project, traces: exportWithBigResource() });
    expect([weave.statusCode, weave.json()]).toEqual([200, { partial_success: { rejected_spans: 0, error_message: WARNING } }]);
  }, 60_000);

  it('warn in protobuf\'s ExportTraceServiceResponse too', async () => {
    const project = `${user.entity}/${uniqueName('otelres')}`;
    const response = await app.inject({
      method: 'POST',
      url: '/traces/otel/v1/traces',
      headers: { authorization: basicAuth(user.key), project_id: project, 'content-type': 'application/x-protobuf', 'content-encoding': 'gzip' },
      payload: gzipSync(protobufExport()),
    });
    expect(response.statusCode).toBe(200);
    expect(decodeTraceResponse(response.rawPayload)).toEqual({ rejectedSpans: 0, errorMessage: WARNING });
    const stored = await otelSpans(project);
    expect(stored.map((s) => (s.otel.resource as { dropped_attributes_count?: number }).dropped_attributes_count)).toEqual([...Array(15).fill(undefined), 2, 2, 2, 2, 2]);
  }, 60_000);

  it('a small resource is copied into every span, with no warning', async () => {
    const project = `${user.entity}/${uniqueName('otelres')}`;
    const body = exportWithBigResource();
    body.resourceSpans[0].resource.attributes.pop();
    const response = await app.inject({
      method: 'POST',
      url: '/traces/otel/v1/traces',
      headers: { authorization: basicAuth(user.key), project_id: project, 'content-type': 'application/json' },
      payload: JSON.stringify(body),
    });
    expect([response.statusCode, response.json()]).toEqual([200, {}]);
    const stored = await otelSpans(project);
    expect(stored).toHaveLength(SPANS);
    for (const { otel } of stored) expect(otel.resource).toEqual({ attributes: { 'service.name': 'svc' }, schema_url: '' });
  });
});

/** exportWithBigResource as an OTLP protobuf ExportTraceServiceRequest. */
function protobufExport(): Buffer {
  const writer = protobuf.Writer.create();
  const keyValue = (field: number, key: string, value: string) => {
    writer.uint32((field << 3) | 2).fork().uint32((1 << 3) | 2).string(key);
    writer.uint32((2 << 3) | 2).fork().uint32((1 << 3) | 2).string(value).ldelim();
    writer.ldelim();
  };
  const time = (field: number, nanos: bigint) => writer.uint32((field << 3) | 1).fixed32(Number(nanos & 0xffffffffn)).fixed32(Number(nanos >> 32n));
  writer.uint32((1 << 3) | 2).fork(); // resource_spans
  writer.uint32((1 << 3) | 2).fork(); // resource
  keyValue(1, 'service.name', 'svc');
  keyValue(1, 'big', 'x'.repeat(MIB));
  writer.ldelim();
  writer.uint32((2 << 3) | 2).fork(); // scope_spans
  writer.uint32((1 << 3) | 2).fork().uint32((1 << 3) | 2).string('scope').uint32((2 << 3) | 2).string('1.0');
  keyValue(3, 'lib', 'l');
  writer.ldelim();
  for (let i = 0; i < SPANS; i++) {
    writer.uint32((2 << 3) | 2).fork();
    writer.uint32((1 << 3) | 2).bytes(Buffer.from('0af7651916cd43dd8448eb211c80319c', 'hex'));
    writer.uint32((2 << 3) | 2).bytes(Buffer.from(spanId(i), 'hex'));
    writer.uint32((5 << 3) | 2).string(`span ${i}`);
    time(7, 1735689600000000000n);
    time(8, 1735689601000000000n);
    writer.ldelim();
  }
  writer.ldelim().ldelim();
  return Buffer.from(writer.finish());
}
