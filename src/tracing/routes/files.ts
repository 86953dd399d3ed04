import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { MultipartFile } from '@fastify/multipart';
import { z } from 'zod';
import { InvalidRequestError, PayloadTooLargeError, UnprocessableError } from '../../errors.js';
import { RequestValidationError, zodIssuesToDetail } from '../../http/validation.js';
import { depsOf, projectFor } from '../http/access.js';
import { Key, ProjectId, tags } from '../schemas/common.js';
import { FileContentBody, FileCreateResponse } from '../schemas/files.js';
import * as files from '../services/files.js';

/**
 * busboy's parse errors carry no code, only these messages: a content type without a boundary, and a body
 * that ends before its closing boundary (none, a different one, or a part cut short).
 */
const MULTIPART_PARSE_ERROR = /^(Multipart: Boundary not found|Unexpected end of multipart data|\w+ terminated early due to unexpected end of multipart data)$/;
/** Its search for the boundary refuses one of more than 252 characters (RFC 2046 allows 70) with this. */
const BOUNDARY_TOO_LONG = 'The needle cannot have a length bigger than 256.';

/** The form's text fields, as the JSON routes bound the same values (the file is the other part). */
const FIELD_SCHEMAS = { project_id: ProjectId, expected_digest: Key } as const;
const FormFields = z.object(FIELD_SCHEMAS).partial();
/**
 * busboy cuts a field value at this many bytes, and says so only in a flag (its default is 1 MiB, which
 * an error message then echoed whole): room for the longest value the fields admit, 2,048 characters of
 * up to 4 bytes of UTF-8.
 */
const FIELD_SIZE_BYTES = 4 * Math.max(...Object.values(FIELD_SCHEMAS).map((schema) => schema.maxLength ?? 0));

/** A field busboy cut is longer than its schema admits: the 422 the schema gives, on the part that came. */
function fieldTooLong(name: keyof typeof FIELD_SCHEMAS, value: string): UnprocessableError {
  const max = FIELD_SCHEMAS[name].maxLength;
  return new UnprocessableError(`String should have at most ${max} characters`, ['body', name], {
    type: 'string_too_long',
    input: value,
    ctx: { max_length: max },
  });
}

/** A body that is not the multipart form its Content-Type announces is the client's error (400). */
function malformed(error: unknown): InvalidRequestError | undefined {
  if (!(error instanceof Error)) return undefined;
  const why = error.message === BOUNDARY_TOO_LONG ? 'boundary parameter too long' : MULTIPART_PARSE_ERROR.test(error.message) ? error.message : undefined;
  if (why === undefined) return undefined;
  return new InvalidRequestError(
    `Malformed multipart body (${why}): send multipart/form-data with a boundary parameter, fields project_id and file, each part complete, and the closing boundary.`,
    { code: 'malformed_multipart' },
  );
}

/**
 * /file/create (multipart: `project_id`, `file`) and /file/content, with the /files/* aliases the
 * Python client uses. The upload is held in memory up to config.traceFileLimitBytes (413 beyond).
 */
export const fileRoutes: FastifyPluginAsyncZod = async (app) => {
  const deps = depsOf(app);
  const limit = app.config.traceFileLimitBytes;

  for (const url of ['/file/create', '/files/create']) {
    app.post(
      url,
      {
        schema: {
          tags,
          summary: url === '/file/create' ? 'Upload a file' : 'Upload a file (alias)',
          description: `multipart/form-data with fields project_id and file (and optionally expected_digest). At most ${limit} bytes.`,
          consumes: ['multipart/form-data'],
          response: { 200: FileCreateResponse },
        },
      },
      async (request) => {
        if (!request.isMultipart()) {
          throw new InvalidRequestError('Send the file as multipart/form-data with fields project_id and file.', { code: 'not_multipart' });
        }
        const fields: Record<string, string> = {};
        let upload: { name: string; content: Buffer } | undefined;
        let cut: UnprocessableError | undefined;
        try {
          for await (const part of request.parts({ limits: { fileSize: limit, files: 1, fieldSize: FIELD_SIZE_BYTES } })) {
            if (part.type === 'file') {
              upload = { name: part.filename || '<unnamed_file>', content: await (part as MultipartFile).toBuffer() };
            } else if (typeof part.value === 'string') {
              fields[part.fieldname] = part.value;
              // Refused once the whole body is read. A field the route does not read is ignored, cut or not,
              // as the JSON routes ignore unknown keys.
              if (part.valueTruncated && Object.hasOwn(FIELD_SCHEMAS, part.fieldname)) {
                cut ??= fieldTooLong(part.fieldname as keyof typeof FIELD_SCHEMAS, part.value);
              }
            }
          }
        } catch (error) {
          if ((error as { code?: string }).code === 'FST_REQ_FILE_TOO_LARGE') {
            throw new PayloadTooLargeError(`The file is larger than the limit of ${limit} bytes (TRACE_FILE_LIMIT_MB).`);
          }
          if ((error as { code?: string }).code === 'FST_FILES_LIMIT') {
            throw new InvalidRequestError('Send one file per request.', { code: 'too_many_files' });
          }
          throw malformed(error) ?? error;
        }
        if (cut) throw cut;
        if (fields.project_id === undefined) throw new UnprocessableError('Field required', ['body', 'project_id'], { type: 'missing' });
        const valid = FormFields.safeParse(fields);
        if (!valid.success) throw new RequestValidationError(zodIssuesToDetail(valid.error.issues, 'body', fields));
        if (!upload) throw new UnprocessableError('Field required', ['body', 'file'], { type: 'missing' });
        const projectId = projectFor(request, fields.project_id);
        return files.createFile(deps, { projectId, name: upload.name, content: upload.content, expectedDigest: fields.expected_digest });
      },
    );
  }

  for (const url of ['/file/content', '/files/content']) {
    app.post(
      url,
      {
        schema: {
          tags,
          summary: url === '/file/content' ? 'Read a file' : 'Read a file (alias)',
          body: FileContentBody,
          produces: ['application/octet-stream'],
          response: { 200: z.string().describe('The raw bytes') },
        },
      },
      async (request, reply) => {
        const projectId = projectFor(request, request.body.project_id);
        const content = await files.readFile(deps, { projectId, digest: request.body.digest });
        return reply.type('application/octet-stream').send(content as never);
      },
    );
  }
};
