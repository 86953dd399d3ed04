import type { Readable } from 'node:stream';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { uuidv7 } from '../ids.js';
import { toPlainJson } from '../json.js';
import { parseRef, REF_SCHEME, refProjectId } from '../refs.js';
import * as objects from '../repositories/objects.js';
import type { CompletionsCreateBody } from '../schemas/completions.js';
import { upsertBatch } from './calls.js';
import type { TracingDeps } from './deps.js';
import { parseVersionSelector } from './objects.js';

/**
 * Completions (reference §2.10): a chat completion through the inference gateway, recorded as a
 * `weave.completions_create` call when `track_llm_call`. Failures of the model or its engine are
 * answers, `{"error": "<message>"}`, not HTTP errors, as the weave server gives them.
 */

/** What this service needs of the gateway: one chat completion as the caller, billed to the project. */
export interface ChatCompleter {
  complete(request: { body: Record<string, unknown>; projectId: string }): Promise<{ status: number; json(): unknown }>;
  stream(request: { body: Record<string, unknown>; projectId: string }): Promise<{ status: number; body: Readable; json(): Promise<unknown> }>;
}

export const COMPLETIONS_OP = 'weave.completions_create';

const isObject = (value: unknown): value is Record<string, unknown> => value !== null && typeof value === 'object' && !Array.isArray(value);

function dropNulls(value: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null && v !== undefined));
}

/**
 * The messages of a saved Prompt (`inputs.prompt`: a `weave:///` object ref, `name:version` or `name`
 * for its latest version) in the request's project, as weave's server reads them: the object must be a
 * Prompt (its base class Prompt or MessagesPrompt) with a `messages` list.
 */
async function promptMessages(deps: TracingDeps, projectId: string, prompt: string): Promise<Record<string, unknown>[]> {
  const invalid = (message: string) => new InvalidRequestError(message, { code: 'invalid_prompt' });
  let name: string;
  let version: string;
  if (prompt.startsWith(REF_SCHEME)) {
    const ref = parseRef(prompt);
    if (ref.kind !== 'object' || ref.path.length > 0) throw invalid(`Prompt reference must be an object reference, got: ${prompt}`);
    if (refProjectId(ref) !== projectId) throw invalid(`Prompt ${prompt} is not in project ${projectId}`);
    [name, version] = [ref.name, ref.digest];
  } else {
    const cut = prompt.lastIndexOf(':');
    [name, version] = cut === -1 ? [prompt, 'latest'] : [prompt.slice(0, cut), prompt.slice(cut + 1)];
  }
  const row = await objects.readVersion(deps.db, { projectId, objectId: name, selector: parseVersionSelector(version) });
  if (!row || row.deleted_at || row.kind !== 'object') throw new NotFoundError('object', undefined, { message: `Could not find prompt with ref ${prompt}`, code: 'prompt_not_found' });
  if (row.base_object_class !== 'Prompt' && row.base_object_class !== 'MessagesPrompt') {
    throw invalid(`Prompt ${prompt} is not a Prompt or MessagesPrompt (found ${row.base_object_class})`);
  }
  const messages = isObject(row.val) ? row.val.messages : undefined;
  if (!Array.isArray(messages) || !messages.every(isObject)) throw invalid(`Prompt ${prompt} messages field is not a list of messages`);
  return toPlainJson(messages) as Record<string, unknown>[];
}

/**
 * The chat request: the saved prompt's messages (if any) before the request's, `{var}` placeholders
 * filled from template_vars in string contents (not in assistant messages, as weave), nulls and
 * weave-only fields dropped.
 */
export async function chatBody(deps: TracingDeps, projectId: string, inputs: CompletionsCreateBody['inputs'], stream: boolean): Promise<Record<string, unknown>> {
  const { template_vars: vars, prompt, ...rest } = dropNulls(inputs) as CompletionsCreateBody['inputs'];
  const body: Record<string, unknown> = { ...rest, stream };
  const messages = prompt ? [...(await promptMessages(deps, projectId, prompt)), ...rest.messages] : rest.messages;
  body.messages = !vars ? messages : fillTemplateVars(messages, vars);
  if (stream) body.stream_options = { ...(isObject(rest.stream_options) ? rest.stream_options : {}), include_usage: true };
  return body;
}

/**
 * The most characters filling in template_vars may add to a request's messages: a few long variables
 * used many times could otherwise make a small body into one no string holds.
 */
export const TEMPLATE_GROWTH_LIMIT = 16 * 2 ** 20;

function fillTemplateVars(messages: Record<string, unknown>[], vars: Record<string, unknown>): Record<string, unknown>[] {
  let growth = 0;
  return messages.map((message) => {
    if (typeof message.content !== 'string' || message.role === 'assistant') return message;
    const content = message.content.replace(/\{(\w+)\}/g, (all, name: string) => {
      if (!Object.hasOwn(vars, name)) return all;
      const value = String(vars[name]);
      // Counted as the text grows, so that the limit is met before the text is built.
      growth += value.length - all.length;
      if (growth > TEMPLATE_GROWTH_LIMIT) {
        throw new InvalidRequestError(`Filling in template_vars would add more than ${TEMPLATE_GROWTH_LIMIT} characters to the messages.`);
      }
      return value;
    });
    return { ...message, content };
  });
}

/** The message of a gateway error body in any of its forms. */
export function errorMessage(status: number, body: unknown): string {
  if (isObject(body)) {
    if (isObject(body.error) && typeof body.error.message === 'string') return body.error.message;
    if (typeof body.error === 'string') return body.error;
    if (typeof body.detail === 'string') return body.detail;
    if (Array.isArray(body.detail)) return body.detail.map((d) => (isObject(d) ? `${(d.loc as unknown[] | undefined)?.join('.') ?? ''}: ${d.msg}` : String(d))).join('; ');
  }
  return `The model answered with HTTP ${status}.`;
}

interface Tracking {
  deps: TracingDeps;
  userId: string;
  projectId: string;
  id: string;
  traceId: string;
  inputs: Record<string, unknown>;
}

function tracking(deps: TracingDeps, userId: string, body: CompletionsCreateBody): Tracking | undefined {
  if (body.track_llm_call === false) return undefined;
  return { deps, userId, projectId: body.project_id, id: uuidv7(), traceId: uuidv7(), inputs: dropNulls(body.inputs) };
}

async function startCall(t: Tracking, startedAt: string): Promise<void> {
  await upsertBatch(t.deps, {
    userId: t.userId,
    items: [{ mode: 'start', start: { project_id: t.projectId, id: t.id, trace_id: t.traceId, op_name: COMPLETIONS_OP, started_at: startedAt, attributes: {}, inputs: t.inputs } }],
  });
}

async function endCall(t: Tracking, model: string, response: Record<string, unknown>): Promise<void> {
  const usage = isObject(response.usage) ? { usage: { [model]: { ...response.usage, requests: 1 } } } : {};
  await upsertBatch(t.deps, {
    userId: t.userId,
    items: [
      {
        mode: 'end',
        end: { project_id: t.projectId, id: t.id, ended_at: new Date().toISOString(), output: response, summary: usage, exception: typeof response.error === 'string' ? response.error : null },
      },
    ],
  });
}

export async function createCompletion(
  deps: TracingDeps,
  gateway: ChatCompleter,
  args: { userId: string; body: CompletionsCreateBody },
): Promise<{ response: Record<string, unknown>; weave_call_id?: string }> {
  const request = await chatBody(deps, args.body.project_id, args.body.inputs, false);
  const t = tracking(deps, args.userId, args.body);
  const startedAt = new Date().toISOString();
  const answer = await gateway.complete({ body: request, projectId: args.body.project_id });
  const json = answer.json();
  const response = answer.status === 200 && isObject(json) ? json : { error: errorMessage(answer.status, json) };
  if (!t) return { response };
  await startCall(t, startedAt);
  await endCall(t, args.body.inputs.model, response);
  return { response, weave_call_id: t.id };
}

/** Adds one chunk to the chat.completion being assembled: content concatenated, tool calls merged by index. */
function accumulate(into: Record<string, any>, chunk: Record<string, any>): void {
  into.id ??= chunk.id;
  into.created ??= chunk.created;
  into.model ??= chunk.model;
  if (chunk.system_fingerprint) into.system_fingerprint = chunk.system_fingerprint;
  if (isObject(chunk.usage)) into.usage = chunk.usage;
  for (const choice of Array.isArray(chunk.choices) ? chunk.choices : []) {
    const index = typeof choice.index === 'number' ? choice.index : 0;
    const target = (into.choices[index] ??= { index, message: { role: 'assistant', content: null }, finish_reason: null });
    const delta = isObject(choice.delta) ? (choice.delta as Record<string, any>) : {};
    if (typeof delta.role === 'string') target.message.role = delta.role;
    if (typeof delta.content === 'string') target.message.content = (target.message.content ?? '') + delta.content;
    for (const call of Array.isArray(delta.tool_calls) ? delta.tool_calls : []) {
      const calls = (target.message.tool_calls ??= []);
      const at = typeof call.index === 'number' ? call.index : calls.length;
      const merged = (calls[at] ??= { id: call.id, type: call.type ?? 'function', function: { name: '', arguments: '' } });
      if (call.id) merged.id = call.id;
      if (call.function?.name) merged.function.name += call.function.name;
      if (call.function?.arguments) merged.function.arguments += call.function.arguments;
    }
    if (choice.finish_reason) target.finish_reason = choice.finish_reason;
  }
}

/** The `data:` payloads of an SSE stream as they arrive (the gateway's stream is `data: <json>` events). */
async function* sseEvents(body: Readable): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let pending = '';
  for await (const chunk of body) {
    pending += decoder.decode(chunk as Buffer, { stream: true });
    let cut: number;
    while ((cut = pending.indexOf('\n\n')) !== -1) {
      const event = pending.slice(0, cut);
      pending = pending.slice(cut + 2);
      const data = event
        .split('\n')
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(line.startsWith('data: ') ? 6 : 5))
        .join('\n');
      if (data) yield data;
    }
  }
}

/**
 * JSON Lines of a streamed completion: `{"_meta": {"weave_call_id"}}` first when tracked, then each
 * chat.completion.chunk, or one `{"error": ...}` line. The call is started before the first chunk and
 * ended with the chunks assembled into one chat.completion.
 */
export async function* streamCompletion(deps: TracingDeps, gateway: ChatCompleter, args: { userId: string; body: CompletionsCreateBody }): AsyncGenerator<Record<string, unknown>[]> {
  const request = await chatBody(deps, args.body.project_id, args.body.inputs, true);
  const t = tracking(deps, args.userId, args.body);
  if (t) {
    await startCall(t, new Date().toISOString());
    yield [{ _meta: { weave_call_id: t.id } }];
  }
  const assembled: Record<string, any> = { id: undefined, object: 'chat.completion', created: undefined, model: undefined, choices: [] };
  let failure: string | undefined;
  try {
    const answer = await gateway.stream({ body: request, projectId: args.body.project_id });
    if (answer.status !== 200) {
      failure = errorMessage(answer.status, await answer.json());
    } else {
      for await (const data of sseEvents(answer.body)) {
        if (data === '[DONE]') break;
        let chunk: unknown;
        try {
          chunk = JSON.parse(data);
        } catch {
          continue;
        }
        if (isObject(chunk) && chunk.error !== undefined && chunk.choices === undefined) {
          failure = errorMessage(200, chunk);
          break;
        }
        if (isObject(chunk)) {
          accumulate(assembled, chunk);
          yield [chunk];
        }
      }
    }
  } catch (error) {
    failure = error instanceof Error ? error.message : String(error);
  }
  if (failure !== undefined) yield [{ error: failure }];
  if (t) {
    const output = failure !== undefined ? { error: failure } : { ...assembled, choices: assembled.choices.filter(Boolean) };
    await endCall(t, args.body.inputs.model, output);
  }
}
