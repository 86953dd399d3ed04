import { promisify } from 'node:util';
import { gunzip, inflate } from 'node:zlib';
import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { principalOf } from '../../auth/plugin.js';
import { InvalidRequestError, PayloadTooLargeError, UnsupportedMediaTypeError } from '../../errors.js';
import { decodeJsonText } from '../../http/body-encoding.js';
import { parseJsonBody } from '../../http/json-body.js';
import { depsOf, projectFor } from '../http/access.js';
import { otelAuthHook } from '../http/otel-auth.js';
import { OtlpJsonRequest, readJsonTraceRequest } from '../otel/json.js';
import type { OtlpTraceRequest } from '../otel/model.js';
import { decodeTraceRequest, encodeTraceResponse } from '../otel/protobuf.js';
import { tags } from '../schemas/common.js';
import { exportSpans, MAX_OTLP_BYTES, resourceProjects } from '../services/otel.js';

const gunzipAsync = promisify(gunzip);
const inflateAsync = promisify(inflate);

type Encoding = 'protobuf' | 'json' | 'other';
interface OtlpBody {
  encoding: Encoding;
  bytes: Buffer;
}

/** A compressed body may be a little larger than its content; the real limit is checked after decompression. */
const RAW_LIMIT = MAX_OTLP_BYTES + 1024 * 1024;

const tooLarge = () => new PayloadTooLargeError(`The OTLP request is larger than ${MAX_OTLP_BYTES / (1024 * 1024)} MiB after decompression; export smaller batches.`);

function encodingOf(contentType: string | undefined): Encoding {
  const type = (contentType ?? '').split(';', 1)[0].trim().toLowerCase();
  if (type === 'application/x-protobuf' || type === 'application/protobuf') return 'protobuf';
  if (type === 'application/json') return 'json';
  return 'other';
}

async function decompress(request: FastifyRequest, raw: Buffer): Promise<Buffer> {
  const encoding = String(request.headers['content-encoding'] ?? 'identity').trim().toLowerCase();
  if (encoding === 'identity' || encoding === '') return raw;
  const inflater = encoding === 'gzip' ? gunzipAsync : encoding === 'deflate' ? inflateAsync : undefined;
  if (!inflater) throw new UnsupportedMediaTypeError(`Unsupported Content-Encoding ${encoding}: send gzip or none.`);
  try {
    return await inflater(raw, { maxOutputLength: MAX_OTLP_BYTES });
  } catch (error) {
    if ((error as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE' || error instanceof RangeError) throw tooLarge();
    // The coding is one this route decodes; the data is what is wrong (OTLP exporters take a 415 for a setting to change).
    throw new InvalidRequestError(`The body is not valid ${encoding} data: ${(error as Error).message}`);
  }
}

const PartialSuccess = z.object({ rejected_spans: z.number(), error_message: z.string() });
const OtelResponse = z
  .object({
    partial_success: PartialSuccess.optional().describe('JSON requests in the weave OtelExportReq form ({project_id, traces})'),
    partialSuccess: z.object({ rejectedSpans: z.number(), errorMessage: z.string() }).optional().describe('OTLP/JSON requests'),
  })
  .describe('Protobuf requests get a protobuf ExportTraceServiceResponse (empty unless spans were rejected).');

/**
 * POST /otel/v1/traces (what OTLP exporters call) and /otel/v1/trace (weave's reference route), in a
 * scope of their own: their bodies are protobuf or JSON, possibly gzipped, read as bytes here.
 */
export const otelRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);
  app.removeContentTypeParser(['application/json']);
  const parser = (request: FastifyRequest, body: Buffer, done: (err: Error | null, body?: OtlpBody) => void) => {
    decompress(request, body).then(
      (bytes) => done(null, { encoding: encodingOf(request.headers['content-type']), bytes }),
      (error: Error) => done(error),
    );
  };
  app.addContentTypeParser(['application/json', 'application/x-protobuf', 'application/protobuf'], { parseAs: 'buffer', bodyLimit: RAW_LIMIT }, parser);
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: RAW_LIMIT }, parser);

  const options = {
    // Content-Encoding is inflated here (decompress), not refused app-wide.
    config: { auth: 'none' as const, decodesContentEncoding: true },
    bodyLimit: RAW_LIMIT,
    onRequest: otelAuthHook(app.auth),
    schema: {
      tags,
      summary: 'Ingest OpenTelemetry spans (OTLP/HTTP)',
      description:
        'An ExportTraceServiceRequest as application/x-protobuf (optionally Content-Encoding: gzip) or OTLP/JSON; or weave\'s ' +
        '{project_id, traces} JSON form. Project: the project_id header, else the wandb.entity and wandb.project resource attributes. ' +
        'Key: Basic, Bearer or a wandb-api-key header. Each span becomes a finished call; malformed spans are reported as partial success. ' +
        'Once the spans\' copies of their resource and scope pass 16 MiB (or the export\'s size), later spans are stored without those attributes, ' +
        'reported as partial success with no span rejected. ' +
        `At most ${MAX_OTLP_BYTES / (1024 * 1024)} MiB after decompression (413).`,
      consumes: ['application/x-protobuf', 'application/json'],
      body: OtlpJsonRequest,
      response: { 200: OtelResponse },
    },
    // The body arrives as bytes; it is decoded (and its JSON form checked) in the handler.
    validatorCompiler: () => (data: unknown) => ({ value: data }),
  };

  const handler = async (request: FastifyRequest, reply: import('fastify').FastifyReply) => {
    const body = request.body as OtlpBody | undefined;
    const encoding = body?.encoding ?? encodingOf(request.headers['content-type']);
    const bytes = body?.bytes ?? Buffer.alloc(0);
    if (bytes.length > MAX_OTLP_BYTES) throw tooLarge();
    let traces: OtlpTraceRequest;
    let size = bytes.length;
    let bodyProject: string | undefined;
    let wrapped = false;
    if (encoding === 'protobuf') {
      traces = decodeTraceRequest(bytes);
    } else if (encoding === 'json') {
      const text = decodeJsonText(request, bytes, 'bad_request');
      size = text.length;
      const json = parseJsonBody(text);
      if (json !== null && typeof json === 'object' && !Array.isArray(json) && 'traces' in json) {
        // weave's OtelExportReq: {project_id, traces: <ExportTraceServiceRequest as JSON>}
        wrapped = true;
        const projectId = (json as { project_id?: unknown }).project_id;
        bodyProject = typeof projectId === 'string' && projectId ? projectId : undefined;
        traces = readJsonTraceRequest((json as { traces: unknown }).traces, text.length);
      } else {
        traces = readJsonTraceRequest(json, text.length);
      }
    } else {
      throw new UnsupportedMediaTypeError(`Unsupported content type ${request.headers['content-type'] ?? '(none)'}: send application/x-protobuf or application/json (OTLP/HTTP).`);
    }
    const header = request.headers.project_id;
    const headerProject = (Array.isArray(header) ? header[0] : header)?.trim() || undefined;
    const projects = resourceProjects(traces, headerProject ?? bodyProject);
    for (const projectId of new Set(projects)) projectFor(request, projectId);

    const result = await exportSpans(deps, { userId: principalOf(request).userId, request: traces, projects, size });
    // A message with no span rejected is a warning (spans stored without their resource attributes).
    const partial = result.rejectedSpans > 0 || result.errorMessage ? { rejectedSpans: result.rejectedSpans, errorMessage: result.errorMessage } : undefined;
    if (encoding === 'protobuf') return reply.type('application/x-protobuf').send(encodeTraceResponse(partial));
    if (!partial) return {};
    return wrapped
      ? { partial_success: { rejected_spans: partial.rejectedSpans, error_message: partial.errorMessage } }
      : { partialSuccess: { rejectedSpans: partial.rejectedSpans, errorMessage: partial.errorMessage } };
  };

  app.post('/otel/v1/traces', options, handler);
  app.post('/otel/v1/trace', { ...options, schema: { ...options.schema, summary: 'Ingest OpenTelemetry spans (weave reference route)' } }, handler);
};
