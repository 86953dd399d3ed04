import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

/** Node's parser error: `code` (HPE_INVALID_HEADER_TOKEN, ...) and llhttp's fixed `reason` text. */
interface ClientError extends Error {
  code?: string;
  reason?: string;
}

function statusAndMessage(error: ClientError): [status: number, text: string, message: string] {
  switch (error.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return [408, 'Request Timeout', 'The request was not received in full in time (REQUEST_TIMEOUT_SECONDS).'];
    case 'HPE_HEADER_OVERFLOW':
      return [431, 'Request Header Fields Too Large', 'The request\'s header fields are larger than the server accepts.'];
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return [413, 'Payload Too Large', 'The request\'s chunk extensions are larger than the server accepts.'];
    default:
      return [400, 'Bad Request', `Malformed HTTP request${error.reason ? `: ${error.reason}` : ''}.`];
  }
}

/**
 * Fastify's `clientErrorHandler` (src/app.ts): a request Node's HTTP parser refused (a bad header line,
 * two Content-Length headers, a head or body not received in time) is answered with a neutral
 * `{"detail": ...}` and the connection closed, as Node's own handler does. No route, path or request id
 * is known yet, so no API's form can be chosen. Nothing is written when a response on the connection has
 * already begun: bytes of ours would run into it.
 */
export function answerClientError(this: FastifyInstance, error: ClientError, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  this.log.debug({ err: error }, 'refused a request Node could not parse');
  const responding = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
  if (socket.writable && !responding) {
    const [status, text, message] = statusAndMessage(error);
    const body = JSON.stringify({ detail: message });
    socket.write(
      `HTTP/1.1 ${status} ${text}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
