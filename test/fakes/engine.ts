import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A fake vLLM-shaped OpenAI-compatible engine on a loopback port, for tests and benchmarks: chat and
 * text completions (JSON and SSE), /tokenize and /detokenize (a token is a character's code),
 * /v1/models (with max_model_len), runtime LoRA load/unload, and injectable faults.
 */

export type FakeBehaviour =
  | { kind: 'ok' }
  /** Answer with this status and a vLLM error body (plus Retry-After when given). */
  | { kind: 'status'; status: number; message?: string; retryAfter?: string }
  /** Never answer; keep the connection open. */
  | { kind: 'hang' }
  /** Send 200 headers (streams only), then nothing. */
  | { kind: 'hang-after-headers' }
  /** Stream this many content chunks, then stall without closing. */
  | { kind: 'stall-after'; chunks: number }
  /** Stream this many content chunks, then destroy the connection. */
  | { kind: 'drop-after'; chunks: number }
  /** Stream this many content chunks, then a vLLM in-stream error event (500, this message) and [DONE]. */
  | { kind: 'error-event-after'; chunks: number; message?: string };

export interface FakeEngineOptions {
  /** Served base model names; the first is the parent of loaded adapters. */
  models?: string[];
  /** Delay before answering a chat request. */
  latencyMs?: number;
  /** Content chunks per completion (each one token). */
  chunks?: number;
  /** Delay between streamed chunks. */
  chunkDelayMs?: number;
  /** Delay before a load_lora_adapter answers. */
  loadDelayMs?: number;
  /** When set, requests need `Authorization: Bearer <apiKey>` (vLLM's `--api-key`). */
  apiKey?: string;
  /** Writes this as `model` in answers instead of the requested name (an engine alias, say). */
  reportModel?: string;
  /** Lists loaded adapters in /v1/models without `parent`, as engines other than vLLM may. */
  adaptersWithoutParent?: boolean;
  /** Listens on this port (default: a free one): an engine that comes up at an address nothing answered on before. */
  port?: number;
}

/** What the next load_lora_adapter calls do. */
export type FakeLoadBehaviour =
  | { kind: 'ok' }
  /** Answer with this status and a vLLM error body. */
  | { kind: 'status'; status: number; message?: string }
  /** Destroy the connection without answering. */
  | { kind: 'drop' };

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: unknown;
  /** The body as sent, for checks JSON.parse would blur (integers above 2^53). */
  rawBody: string;
}

export interface Disconnect {
  path: string;
  /** Content chunks written before the client went away (0 when it left before the first token). */
  chunksSent: number;
}

export interface FakeEngine {
  url: string;
  requests: RecordedRequest[];
  disconnects: Disconnect[];
  /** Successful load_lora_adapter calls per adapter name. */
  loads: Map<string, number>;
  unloads: Map<string, number>;
  /** Adapter name → path of what is loaded now. */
  adapters: Map<string, string>;
  options: Required<Omit<FakeEngineOptions, 'apiKey' | 'reportModel' | 'port'>> & { apiKey?: string; reportModel?: string };
  /** Applies to the next `times` chat requests (all of them when omitted), then back to 'ok'. */
  setBehaviour(behaviour: FakeBehaviour, times?: number): void;
  /** Applies to the next `times` adapter loads (all of them when omitted), then back to 'ok'. */
  setLoadBehaviour(behaviour: FakeLoadBehaviour, times?: number): void;
  chatRequests(): RecordedRequest[];
  completionRequests(): RecordedRequest[];
  close(): Promise<void>;
}

const TOKENS = ['Hello', ' from', ' the', ' fake', ' engine', '.'];

export async function startFakeEngine(options: FakeEngineOptions = {}): Promise<FakeEngine> {
  const settings = {
    models: options.models ?? ['fake/base-model'],
    latencyMs: options.latencyMs ?? 0,
    chunks: options.chunks ?? 3,
    chunkDelayMs: options.chunkDelayMs ?? 0,
    loadDelayMs: options.loadDelayMs ?? 0,
    apiKey: options.apiKey,
    reportModel: options.reportModel,
    adaptersWithoutParent: options.adaptersWithoutParent ?? false,
  };
  let loadBehaviour: FakeLoadBehaviour = { kind: 'ok' };
  let loadRemaining = Infinity;
  let behaviour: FakeBehaviour = { kind: 'ok' };
  let remaining = Infinity;
  let counter = 0;

  const engine: FakeEngine = {
    url: '',
    requests: [],
    disconnects: [],
    loads: new Map(),
    unloads: new Map(),
    adapters: new Map(),
    options: settings,
    setBehaviour(next, times = Infinity) {
      behaviour = next;
      remaining = times;
    },
    setLoadBehaviour(next, times = Infinity) {
      loadBehaviour = next;
      loadRemaining = times;
    },
    chatRequests: () => engine.requests.filter((r) => r.path === '/v1/chat/completions'),
  completionRequests: () => engine.requests.filter((r) => r.path === '/v1/completions'),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };

  const nextBehaviour = (): FakeBehaviour => {
    if (remaining <= 0) behaviour = { kind: 'ok' };
    remaining -= 1;
    return behaviour;
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown = undefined;
      if (text) {
        try {
          body = JSON.parse(text);
        } catch {
          body = text;
        }
      }
      const path = (req.url ?? '/').split('?')[0];
      engine.requests.push({ method: req.method ?? 'GET', path, headers: req.headers, body, rawBody: text });
      if (settings.apiKey && req.headers.authorization !== `Bearer ${settings.apiKey}`) {
        return json(res, 401, { error: 'Unauthorized' });
      }
      if (req.method === 'GET' && path === '/v1/models') return listModels(res);
      if (req.method === 'POST' && path === '/v1/load_lora_adapter') return void loadAdapter(res, body as LoraBody);
      if (req.method === 'POST' && path === '/v1/unload_lora_adapter') return unloadAdapter(res, body as LoraBody);
      if (req.method === 'POST' && path === '/v1/chat/completions') return void chat(req, res, body as ChatBody, false);
      if (req.method === 'POST' && path === '/v1/completions') return void chat(req, res, body as ChatBody, true);
      if (req.method === 'POST' && path === '/tokenize') return tokenize(res, body as TokenizeBody);
      if (req.method === 'POST' && path === '/detokenize') return detokenize(res, body as { model?: string; tokens?: number[] });
      json(res, 404, { detail: 'Not Found' });
    });
  });

  function listModels(res: ServerResponse): void {
    const created = Math.floor(Date.now() / 1000);
    const bases = settings.models.map((id) => ({ id, object: 'model', created, owned_by: 'vllm', root: id, parent: null, max_model_len: 4096 }));
    const loras = [...engine.adapters].map(([id, path]) => ({ id, object: 'model', created, owned_by: 'vllm', root: path, parent: settings.adaptersWithoutParent ? null : settings.models[0], max_model_len: null }));
    json(res, 200, { object: 'list', data: [...bases, ...loras] });
  }

  async function loadAdapter(res: ServerResponse, body: LoraBody): Promise<void> {
    if (!body?.lora_name || !body?.lora_path) return vllmError(res, 400, 'Both \'lora_name\' and \'lora_path\' must be provided.', 'InvalidUserInput');
    if (engine.adapters.has(body.lora_name) && !body.load_inplace) {
      return vllmError(res, 400, `The lora adapter '${body.lora_name}' has already been loaded.`, 'InvalidUserInput');
    }
    if (loadRemaining <= 0) loadBehaviour = { kind: 'ok' };
    loadRemaining -= 1;
    const current = loadBehaviour;
    if (current.kind === 'drop') return void res.destroy();
    if (current.kind === 'status') return vllmError(res, current.status, current.message ?? `fake load failure ${current.status}`, 'BadRequestError');
    if (settings.loadDelayMs > 0) await delay(settings.loadDelayMs);
    if (res.destroyed) return;
    engine.adapters.set(body.lora_name, body.lora_path);
    engine.loads.set(body.lora_name, (engine.loads.get(body.lora_name) ?? 0) + 1);
    res.writeHead(200, { 'content-type': 'text/plain' }).end(`Success: LoRA adapter '${body.lora_name}' added successfully.`);
  }

  function unloadAdapter(res: ServerResponse, body: LoraBody): void {
    if (!body?.lora_name || !engine.adapters.has(body.lora_name)) {
      return vllmError(res, 404, `The lora adapter '${body?.lora_name}' cannot be found.`, 'NotFoundError');
    }
    engine.adapters.delete(body.lora_name);
    engine.unloads.set(body.lora_name, (engine.unloads.get(body.lora_name) ?? 0) + 1);
    res.writeHead(200, { 'content-type': 'text/plain' }).end(`Success: LoRA adapter '${body.lora_name}' removed successfully.`);
  }

  function knownModel(res: ServerResponse, requested: string): boolean {
    if (settings.models.includes(requested) || engine.adapters.has(requested)) return true;
    vllmError(res, 404, `The model \`${requested}\` does not exist.`, 'NotFoundError', {}, 'model');
    return false;
  }

  function tokenize(res: ServerResponse, body: TokenizeBody): void {
    if (!knownModel(res, body?.model ?? settings.models[0])) return;
    const text = body.prompt ?? (body.messages ?? []).map((m) => `${m.role}: ${typeof m.content === 'string' ? m.content : ''}\n`).join('');
    const tokens = [...text].map((c) => c.codePointAt(0)!);
    json(res, 200, { count: tokens.length, max_model_len: 4096, tokens, token_strs: body.return_token_strs ? [...text] : null });
  }

  function detokenize(res: ServerResponse, body: { model?: string; tokens?: number[] }): void {
    if (!knownModel(res, body?.model ?? settings.models[0])) return;
    json(res, 200, { prompt: String.fromCodePoint(...(body.tokens ?? [])) });
  }

  async function chat(req: IncomingMessage, res: ServerResponse, body: ChatBody, textCompletion: boolean): Promise<void> {
    const current = nextBehaviour();
    let chunksSent = 0;
    const route = textCompletion ? '/v1/completions' : '/v1/chat/completions';
    res.on('close', () => {
      if (!res.writableFinished) engine.disconnects.push({ path: route, chunksSent });
    });
    if (current.kind === 'hang') return;
    if (settings.latencyMs > 0) await delay(settings.latencyMs);
    if (res.destroyed) return;
    if (current.kind === 'status') {
      const headers: Record<string, string> = current.retryAfter ? { 'retry-after': current.retryAfter } : {};
      return vllmError(res, current.status, current.message ?? `fake engine failure ${current.status}`, 'InternalServerError', headers);
    }
    const requested = body?.model ?? settings.models[0];
    if (!knownModel(res, requested)) return;
    const model = settings.reportModel ?? requested;
    if (textCompletion) return completion(req, res, body, current, model);

    const id = `chatcmpl-${req.headers['x-request-id'] ?? `fake-${++counter}`}`;
    const created = Math.floor(Date.now() / 1000);
    const tokenIds = Array.from({ length: settings.chunks }, (_, i) => 1000 + i);
    const text = (i: number) => TOKENS[i % TOKENS.length];
    const logprob = (i: number) => ({
      token: body.return_tokens_as_token_ids ? `token_id:${tokenIds[i]}` : text(i),
      logprob: -0.1 * (i + 1),
      bytes: [...Buffer.from(text(i))],
      top_logprobs: [],
    });
    const usage = { prompt_tokens: 7, completion_tokens: settings.chunks, total_tokens: 7 + settings.chunks };
    const promptTokenIds = body.return_token_ids ? { prompt_token_ids: [1, 2, 3, 4, 5, 6, 7] } : {};

    if (!body.stream) {
      return json(res, 200, {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [
          {
            index: 0,
            message: { role: 'assistant', content: tokenIds.map((_, i) => text(i)).join(''), tool_calls: [], reasoning: null },
            logprobs: body.logprobs ? { content: tokenIds.map((_, i) => logprob(i)) } : null,
            finish_reason: 'stop',
            stop_reason: null,
            token_ids: body.return_token_ids ? tokenIds : null,
          },
        ],
        usage,
        ...promptTokenIds,
      });
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    if (current.kind === 'hang-after-headers') return res.flushHeaders();
    const send = (chunk: object) => res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    const base = { id, object: 'chat.completion.chunk', created, model };
    send({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }], ...promptTokenIds });
    for (let i = 0; i < settings.chunks; i++) {
      if (res.destroyed) return;
      if ('chunks' in current && i === current.chunks) {
        if (current.kind === 'stall-after') return;
        // Destroy only once what was written has left, so the client sees a stream broken mid-way.
        if (current.kind === 'drop-after') return void res.write('', () => res.destroy());
        const message = current.kind === 'error-event-after' ? (current.message ?? 'Internal server error') : '';
        send({ error: { message, type: 'InternalServerError', param: null, code: 500 } });
        return void res.end('data: [DONE]\n\n');
      }
      if (settings.chunkDelayMs > 0) await delay(settings.chunkDelayMs);
      if (res.destroyed) return;
      send({
        ...base,
        choices: [{ index: 0, delta: { content: text(i) }, logprobs: body.logprobs ? { content: [logprob(i)] } : null, finish_reason: null, ...(body.return_token_ids ? { token_ids: [tokenIds[i]] } : {}) }],
      });
      chunksSent = i + 1;
    }
    send({ ...base, choices: [{ index: 0, delta: { content: '' }, logprobs: null, finish_reason: 'stop', stop_reason: null }] });
    if (body.stream_options?.include_usage) send({ ...base, choices: [], usage });
    res.end('data: [DONE]\n\n');
  }

  /** vLLM's text completion: `text` choices, logprobs as token lists, `echo` and `prompt_logprobs`. */
  function completion(req: IncomingMessage, res: ServerResponse, body: ChatBody, current: FakeBehaviour, model: string): void {
    const id = `cmpl-${req.headers['x-request-id'] ?? `fake-${++counter}`}`;
    const created = Math.floor(Date.now() / 1000);
    const prompt = typeof body.prompt === 'string' ? body.prompt : 'prompt';
    const tokens = Array.from({ length: settings.chunks }, (_, i) => TOKENS[i % TOKENS.length]);
    const logprobs = (list: string[]) =>
      typeof body.logprobs === 'number'
        ? { tokens: list.map((t, i) => (body.return_tokens_as_token_ids ? `token_id:${1000 + i}` : t)), token_logprobs: list.map((_, i) => -0.1 * (i + 1)), top_logprobs: list.map(() => ({})), text_offset: list.map((_, i) => i) }
        : null;
    const usage = { prompt_tokens: 7, completion_tokens: settings.chunks, total_tokens: 7 + settings.chunks };
    const promptLogprobs = body.prompt_logprobs != null ? { prompt_logprobs: [null, ...[...prompt].slice(1).map((c, i) => ({ [String(c.codePointAt(0))]: { logprob: -1 - i, rank: 1, decoded_token: c } }))] } : {};
    if (!body.stream) {
      const text = (body.echo ? prompt : '') + tokens.join('');
      return json(res, 200, {
        id,
        object: 'text_completion',
        created,
        model,
        choices: [{ index: 0, text, logprobs: logprobs(tokens), finish_reason: 'length', stop_reason: null, ...promptLogprobs }],
        usage,
      });
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    if (current.kind === 'hang-after-headers') return void res.flushHeaders();
    const send = (chunk: object) => res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    const base = { id, object: 'text_completion', created, model };
    tokens.forEach((t, i) => send({ ...base, choices: [{ index: 0, text: t, logprobs: logprobs([t]), finish_reason: i === tokens.length - 1 ? 'length' : null }] }));
    if (body.stream_options?.include_usage) send({ ...base, choices: [], usage });
    res.end('data: [DONE]\n\n');
  }

  await new Promise<void>((resolve) => server.listen(options.port ?? 0, '127.0.0.1', resolve));
  engine.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return engine;
}

interface LoraBody {
  lora_name?: string;
  lora_path?: string;
  load_inplace?: boolean;
}

interface TokenizeBody {
  model?: string;
  prompt?: string;
  messages?: { role: string; content?: unknown }[];
  return_token_strs?: boolean;
}

interface ChatBody {
  model?: string;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  logprobs?: boolean | number;
  prompt?: unknown;
  echo?: boolean;
  prompt_logprobs?: number | null;
  return_tokens_as_token_ids?: boolean;
  return_token_ids?: boolean;
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers }).end(text);
}

/** vLLM ≥0.10.1 error body: nested, with the integer status as `code`. */
function vllmError(res: ServerResponse, status: number, message: string, type: string, headers: Record<string, string> = {}, param: string | null = null): void {
  json(res, status, { error: { message, type, param, code: status } }, headers);
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
