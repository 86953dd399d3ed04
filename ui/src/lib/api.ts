import { signal } from '@preact/signals';

/** Calls the trainyard API with the session cookie; cookie-authenticated writes carry the CSRF header. */

export interface Whoami {
  username: string;
  entity: string;
  entities: string[];
  is_admin: boolean;
}

/** Who is signed in: undefined while unknown, null when signed out. */
export const session = signal<Whoami | null | undefined>(undefined);

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {
    super(errorMessage(status, body));
  }
}

function errorMessage(status: number, body: unknown): string {
  if (body && typeof body === 'object') {
    const b = body as Record<string, unknown>;
    if (typeof b.detail === 'string') return b.detail;
    if (Array.isArray(b.detail)) return b.detail.map((d) => (d as { msg?: string }).msg ?? JSON.stringify(d)).join('; ');
    if (typeof b.reason === 'string') return b.reason;
    const error = b.error as { message?: string } | undefined;
    if (error?.message) return error.message;
  }
  return `HTTP ${status}`;
}

/** JSON.rawJSON (ES2025; Chromium 114+, Firefox 135+): a value JSON.stringify writes as the given JSON text. */
const rawJSON = (JSON as { rawJSON?: (text: string) => unknown }).rawJSON;

/**
 * A JSON.parse reviver that keeps the number literals a double would change as raw JSON, which
 * JSON.stringify writes back as sent: integers beyond 2^53 (the tracing API answers a 63-bit seed digit
 * for digit, docs/tracing.md) and whole floats (`1.0` stays `1.0`, as a Python client reads it).
 * Browsers without JSON.parse's source text access (`context`) keep the double.
 */
function keepExactNumbers(_key: string, value: unknown, context?: { source?: string }): unknown {
  if (typeof value !== 'number' || !Number.isInteger(value) || !rawJSON || !context?.source) return value;
  const source = context.source;
  if (/^-?\d+$/.test(source) ? Number.isSafeInteger(value) : !/^-?\d+\.0$/.test(source)) return value;
  return rawJSON(source);
}

/**
 * `jsonLines`: the answer is JSON Lines, read as the list of its values.
 * `exactNumbers`: integers beyond 2^53 and whole floats in the answer come back as raw JSON values
 * (keepExactNumbers), for pages that show payloads with JSON.stringify; other pages compute on numbers
 * and keep plain ones.
 */
export async function api<T>(path: string, options: { method?: string; body?: unknown; exactNumbers?: boolean; jsonLines?: boolean } = {}): Promise<T> {
  const headers: Record<string, string> = { 'x-trainyard-ui': '1' };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(path, {
    method: options.method ?? 'GET',
    headers,
    credentials: 'same-origin',
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await response.text();
  if (options.jsonLines && response.ok) {
    // A JSON Lines answer (the tracing API's stream routes): one value per line.
    return text.split('\n').filter((line) => line.trim() !== '').map((line) => JSON.parse(line)) as T;
  }
  const body = answerBody(text, options.exactNumbers);
  if (!response.ok) throw refusal(path, response.status, body);
  return body as T;
}

/** An answer's JSON (numbers kept exact when asked: keepExactNumbers), its text when it is not JSON, or undefined when empty. */
function answerBody(text: string, exactNumbers = false): unknown {
  if (!text) return undefined;
  try {
    return exactNumbers ? JSON.parse(text, keepExactNumbers as (key: string, value: unknown) => unknown) : JSON.parse(text);
  } catch {
    return text;
  }
}

/** The error of a refused call; a 401 (other than signing in) means the session ended, and the app signs out. */
function refusal(path: string, status: number, body: unknown): ApiError {
  if (status === 401 && !path.startsWith('/ui/api/session')) session.value = null;
  return new ApiError(status, body);
}

/** One server-sent event: its `event:` name, `data:` text and `id:` (if it had one). */
export interface ServerEvent {
  event: string;
  data: string;
  id?: string;
}

/**
 * The server-sent events of a GET stream, read with fetch (not EventSource) so that a refused stream is an
 * ApiError with its status and body, as from api(). Ends when the server closes the stream or `signal` aborts.
 */
export async function* serverEvents(path: string, signal: AbortSignal): AsyncGenerator<ServerEvent> {
  const response = await fetch(path, { headers: { accept: 'text/event-stream', 'x-trainyard-ui': '1' }, credentials: 'same-origin', signal });
  if (!response.ok || !response.body) throw refusal(path, response.status, answerBody(await response.text()));
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) return;
      buffer += chunk.value.replaceAll('\r\n', '\n');
      let end: number;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const fields: Record<string, string> = {};
        for (const line of block.split('\n')) {
          if (line === '' || line.startsWith(':')) continue;
          const colon = line.indexOf(':');
          const name = colon === -1 ? line : line.slice(0, colon);
          const value = colon === -1 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1));
          fields[name] = name === 'data' && fields.data !== undefined ? `${fields.data}\n${value}` : value;
        }
        if (fields.data !== undefined) yield { event: fields.event ?? 'message', data: fields.data, ...(fields.id === undefined ? {} : { id: fields.id }) };
      }
    }
  } finally {
    void reader.cancel().catch(() => undefined);
  }
}

/** Every page of a cursor list (`after` = last_id), `pageSize` at a time, up to `max` items. */
export async function allPages<T>(path: string, max = 5000, pageSize = 100): Promise<T[]> {
  const items: T[] = [];
  let after = '';
  for (;;) {
    const sep = path.includes('?') ? '&' : '?';
    const page = await api<{ data: T[]; last_id: string; has_more: boolean }>(`${path}${sep}limit=${pageSize}${after ? `&after=${after}` : ''}`);
    items.push(...page.data);
    if (!page.has_more || items.length >= max || !page.last_id) return items;
    after = encodeURIComponent(page.last_id);
  }
}
