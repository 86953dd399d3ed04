import type { FastifyInstance, FastifyRequest, preParsingHookHandler } from 'fastify';
import { InvalidRequestError, UnsupportedMediaTypeError } from '../errors.js';
import { RequestValidationError } from './validation.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * The route reads `Content-Encoding` itself (OTLP's gzip), so the app-wide refusal of content codings
     * (`registerContentCodingCheck`) leaves its requests alone.
     */
    decodesContentEncoding?: boolean;
  }
}

/**
 * Request bodies are JSON, which must be UTF-8 between systems (RFC 8259 §8.1). Fatal: a byte that is not
 * UTF-8 throws instead of becoming U+FFFD (Buffer#toString, which Fastify's `parseAs: 'string'` uses,
 * would store the replacement character with a 200). Not `ignoreBOM`: a leading byte order mark is
 * dropped, as secure-json-parse drops it, so every parser (the lossless one of the digest routes too)
 * sees the same text. One pass, as fast as Buffer#toString (measured on 64 MiB bodies, ASCII and not).
 */
const utf8 = new TextDecoder('utf-8', { fatal: true });

/** How a route answers a body that is not UTF-8: as its invalid JSON (422 `json_invalid`), or the tracing API's 400. */
export type InvalidTextAnswer = 'json_invalid' | 'bad_request';

/**
 * The text of a JSON request body: the Content-Type's charset, if any, must be UTF-8 (415 otherwise, in the
 * route's API form), and the bytes must be UTF-8 (`invalid` says how a route refuses them). Nothing is
 * stored from a refused body, since the handler never runs.
 */
export function decodeJsonText(request: FastifyRequest, bytes: Uint8Array, invalid: InvalidTextAnswer): string {
  refuseForeignCharset(request.headers['content-type']);
  try {
    return utf8.decode(bytes);
  } catch {
    const { offset, error } = firstInvalidUtf8(bytes);
    if (invalid === 'bad_request') throw new InvalidRequestError(`The body is not valid UTF-8: ${error}. Send JSON encoded as UTF-8.`, { code: 'invalid_utf8' });
    // Where JSON.parse would count: in UTF-16 units of the text before the bad byte (which is valid UTF-8).
    const position = utf8.decode(bytes.subarray(0, offset)).length;
    throw new RequestValidationError([{ type: 'json_invalid', loc: ['body', position], msg: 'JSON decode error', input: {}, ctx: { error } }]);
  }
}

/**
 * The charsets that name UTF-8. RFC 8259 §11 defines no charset parameter for JSON (none is fine); one that
 * names another encoding says the bytes are not the UTF-8 that JSON between systems must be.
 */
const UTF8_NAMES = new Set(['utf-8', 'utf8']);

/** A 415 for a `charset` parameter that is not UTF-8: the body would be read as something other than what was meant. */
function refuseForeignCharset(contentType: string | undefined): void {
  if (contentType === undefined || !contentType.includes('=')) return;
  for (const parameter of contentType.split(';').slice(1)) {
    const equals = parameter.indexOf('=');
    if (equals < 0 || parameter.slice(0, equals).trim().toLowerCase() !== 'charset') continue;
    const charset = parameter.slice(equals + 1).trim().replace(/^"(.*)"$/, '$1');
    if (!UTF8_NAMES.has(charset.toLowerCase())) {
      throw new UnsupportedMediaTypeError(`Unsupported charset ${bounded(charset) || '(empty)'}: send the body as UTF-8 (charset=utf-8, or no charset).`);
    }
  }
}

/**
 * The first byte that does not begin a well-formed UTF-8 sequence (Unicode 15 Table 3-7: no overlong forms,
 * no surrogates, nothing past U+10FFFF), and why, in the words of Python's codec, which FastAPI and weave's
 * server decode with. Only run on a body the decoder refused.
 */
function firstInvalidUtf8(bytes: Uint8Array): { offset: number; error: string } {
  let i = 0;
  while (i < bytes.length) {
    const lead = bytes[i];
    if (lead < 0x80) {
      i++;
      continue;
    }
    let length: number;
    let low = 0x80;
    let high = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) length = 2;
    else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead === 0xe0) low = 0xa0;
      if (lead === 0xed) high = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead === 0xf0) low = 0x90;
      if (lead === 0xf4) high = 0x8f;
    } else {
      return { offset: i, error: codecError(lead, i, 'invalid start byte') };
    }
    for (let k = 1; k < length; k++) {
      if (i + k >= bytes.length) {
        const cut = k === 1 ? `byte 0x${hex(lead)} in position ${i}` : `bytes in position ${i}-${i + k - 1}`;
        return { offset: i, error: `'utf-8' codec can't decode ${cut}: unexpected end of data` };
      }
      const next = bytes[i + k];
      if (next < (k === 1 ? low : 0x80) || next > (k === 1 ? high : 0xbf)) return { offset: i, error: codecError(lead, i, 'invalid continuation byte') };
    }
    i += length;
  }
  // Not reached for a body the decoder refused; kept total.
  return { offset: bytes.length, error: 'invalid UTF-8' };
}

function codecError(byte: number, offset: number, reason: string): string {
  return `'utf-8' codec can't decode byte 0x${hex(byte)} in position ${offset}: ${reason}`;
}

const hex = (byte: number) => byte.toString(16).padStart(2, '0');

/** A header value echoed in a message, cut to a length a message can carry. */
function bounded(value: string): string {
  return value.length > 64 ? `${value.slice(0, 64)}…` : value;
}

/** Set on the root by the first `registerContentCodingCheck`, so that its children do not add the check twice. */
const CODING_CHECK = Symbol('content coding check');

/**
 * Refuses a request body sent with a content coding (`Content-Encoding: gzip`, `br`, ...) with a 415 in the
 * route's API form, before the body is read: no parser here decodes one, and reading the compressed bytes
 * as JSON would store them, or answer a 422 that echoes binary (RFC 9110 §8.4.1: a server refuses a coding
 * it does not support with 415). `identity` is no coding. Two kinds of route take their bodies as sent:
 * those whose config says `decodesContentEncoding` (OTLP inflates gzip and deflate itself), and those in a
 * scope with no application/json parser (the W&B upload URLs, which keep any body's bytes as they came,
 * like the object stores they stand in for). Registered once, from the root, on every route added after it.
 */
export function registerContentCodingCheck(app: FastifyInstance): void {
  if (app.hasDecorator(CODING_CHECK)) return;
  app.decorate(CODING_CHECK, true);
  app.addHook('onRoute', function (route) {
    if (route.config?.decodesContentEncoding || !this.hasContentTypeParser('application/json')) return;
    const own = route.preParsing === undefined ? [] : Array.isArray(route.preParsing) ? route.preParsing : [route.preParsing];
    route.preParsing = [refuseContentCoding, ...own];
  });
}

const refuseContentCoding: preParsingHookHandler = (request, _reply, payload, done) => {
  const header = request.headers['content-encoding'];
  if (header === undefined || !hasBody(request)) return done(null, payload);
  const codings = header.split(',').map((coding) => coding.trim().toLowerCase()).filter((coding) => coding !== '' && coding !== 'identity');
  if (codings.length === 0) return done(null, payload);
  done(new UnsupportedMediaTypeError(`Content-Encoding ${bounded(codings.join(', '))} is not supported here: send the body uncompressed.`), payload);
};

/** Fastify reads no body of a GET or HEAD; any other request has one when it says so in its head. */
function hasBody(request: FastifyRequest): boolean {
  if (request.method === 'GET' || request.method === 'HEAD') return false;
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}
