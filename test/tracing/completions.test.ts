import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { CompletionsCreateBody } from '../../src/tracing/schemas/completions.js';
import { TEMPLATE_GROWTH_LIMIT } from '../../src/tracing/services/completions.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { uniqueName, type TestUser } from '../helpers/app.js';
import { expectBadInputRejected } from '../helpers/bad-input.js';
import { createTenants, expectOtherTenantRefused } from '../helpers/tenants.js';
import { backendEntry, createGatewayApp } from '../inference/gateway-helpers.js';
import { basicAuth, lines, post } from './helpers.js';

let engine: FakeEngine;
let app: App;
let user: TestUser;
let other: TestUser;

beforeAll(async () => {
  engine = await startFakeEngine({ chunks: 5 });
  app = await createGatewayApp([backendEntry('local', [engine.url])]);
  ({ owner: user, other } = await createTenants(app));
  await post(app, other, '/objs/query', { project_id: `${other.entity}/warmup` });
});
afterAll(async () => {
  await app.close();
  await engine.close();
});

const newProject = () => `${user.entity}/${uniqueName('cmp')}`;
const body = (project: string, inputs: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) => ({
  project_id: project,
  inputs: { model: 'fake/base-model', messages: [{ role: 'user', content: 'Hi {name}' }], temperature: null, ...inputs },
  ...extra,
});
const sentMessages = () => (engine.chatRequests().at(-1)!.body as { messages: unknown }).messages;
const callsOf = async (project: string) => (await post(app, user, '/calls/query', { project_id: project })).json().calls as Record<string, any>[];

describe('/completions/create', () => {
  it('answers the gateway\'s chat.completion and records a weave.completions_create call with usage', async () => {
    const project = newProject();
    const response = await post(app, user, '/completions/create', body(project, { template_vars: { name: 'Ada' } }));
    expect(response.statusCode, response.body).toBe(200);
    const { response: completion, weave_call_id: callId } = response.json();
    expect(completion).toMatchObject({ object: 'chat.completion', model: 'fake/base-model', choices: [{ message: { content: 'Hello from the fake engine' } }], usage: { prompt_tokens: 7, completion_tokens: 5 } });
    expect(engine.chatRequests().at(-1)!.body).toMatchObject({ messages: [{ role: 'user', content: 'Hi Ada' }], stream: false });
    const [call] = await callsOf(project);
    expect(call).toMatchObject({
      id: callId,
      op_name: 'weave.completions_create',
      attributes: {},
      inputs: { model: 'fake/base-model', messages: [{ role: 'user', content: 'Hi {name}' }], template_vars: { name: 'Ada' } },
      output: completion,
      exception: null,
      summary: { usage: { 'fake/base-model': { prompt_tokens: 7, completion_tokens: 5, total_tokens: 12, requests: 1 } }, weave: { status: 'success' } },
    });
    expect(call.inputs).not.toHaveProperty('temperature');
  });

  it('records nothing with track_llm_call false', async () => {
    const project = newProject();
    const response = await post(app, user, '/completions/create', body(project, {}, { track_llm_call: false }));
    expect(response.json()).toEqual({ response: expect.objectContaining({ object: 'chat.completion' }) });
    expect(await callsOf(project)).toEqual([]);
  });

  it('answers a provider failure as {"error": ...} and records it as the call\'s exception', async () => {
    const project = newProject();
    engine.setBehaviour({ kind: 'status', status: 400, message: 'context too long' }, 1);
    const failed = await post(app, user, '/completions/create', body(project));
    expect(failed.statusCode).toBe(200);
    expect(failed.json().response).toEqual({ error: expect.stringContaining('context too long') });
    const unknown = await post(app, user, '/completions/create', body(project, { model: 'no/such-model' }));
    expect(unknown.statusCode).toBe(200);
    expect(unknown.json().response).toEqual({ error: expect.stringContaining('no/such-model') });
    const calls = await callsOf(project);
    expect(calls.map((c) => c.summary.weave.status)).toEqual(['error', 'error']);
    expect(calls[0].exception).toContain('context too long');
  });

  it('puts a saved Prompt\'s messages first and fills template_vars in both (ref, name:version and name)', async () => {
    const project = newProject();
    const prompt = {
      name: null,
      description: null,
      messages: [{ role: 'system', content: 'You are {persona}.' }, { role: 'assistant', content: 'Noted {persona}' }],
      _type: 'MessagesPrompt',
      _class_name: 'MessagesPrompt',
      _bases: ['Prompt', 'Object', 'BaseModel'],
    };
    const digest = (await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'assistant', val: prompt } })).json().digest;
    const expected = [
      { role: 'system', content: 'You are terse.' },
      { role: 'assistant', content: 'Noted {persona}' },
      { role: 'user', content: 'Hi Ada' },
    ];
    for (const ref of [`weave:///${project}/object/assistant:${digest}`, 'assistant:v0', 'assistant']) {
      const response = await post(app, user, '/completions/create', body(project, { prompt: ref, template_vars: { persona: 'terse', name: 'Ada' } }));
      expect(response.statusCode, response.body).toBe(200);
      expect(sentMessages()).toEqual(expected);
    }
    const streamed = await post(app, user, '/completions/create_stream', body(project, { prompt: 'assistant', template_vars: { persona: 'terse', name: 'Ada' } }));
    expect(streamed.statusCode, streamed.body).toBe(200);
    expect(sentMessages()).toEqual(expected);
  });

  it('refuses prompt refs that name no Prompt: 404 when missing, 400 for another class or project', async () => {
    const project = newProject();
    await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'plain', val: { messages: [] } } });
    const cases: [string, number, string][] = [
      ['missing', 404, 'Could not find prompt with ref missing'],
      ['plain', 400, 'Prompt plain is not a Prompt or MessagesPrompt (found null)'],
      [`weave:///${other.entity}/x/object/p:abc`, 400, `Prompt weave:///${other.entity}/x/object/p:abc is not in project ${project}`],
    ];
    for (const url of ['/completions/create', '/completions/create_stream']) {
      for (const [ref, status, reason] of cases) {
        const response = await post(app, user, url, body(project, { prompt: ref }));
        expect(response.statusCode).toBe(status);
        expect(response.json()).toEqual({ reason });
      }
    }
    expect(await callsOf(project)).toEqual([]);
  });
});

describe('template_vars', () => {
  it('may not grow the messages past TEMPLATE_GROWTH_LIMIT: a 400 naming it, nothing sent or recorded', async () => {
    const project = newProject();
    const sent = engine.chatRequests().length;
    // About 1 MB of body that would fill in to 600 MB.
    const inputs = { messages: [{ role: 'user', content: '{a}'.repeat(600) }], template_vars: { a: 'x'.repeat(1_000_000) } };
    for (const url of ['/completions/create', '/completions/create_stream']) {
      const response = await post(app, user, url, body(project, inputs));
      expect([response.statusCode, response.json()]).toEqual([400, { reason: `Filling in template_vars would add more than ${TEMPLATE_GROWTH_LIMIT} characters to the messages.` }]);
    }
    expect(engine.chatRequests().length).toBe(sent);
    expect(await callsOf(project)).toEqual([]);
    // Up to the limit, the filled messages go to the engine.
    const atLimit = { messages: [{ role: 'system', content: '{a}' }, { role: 'user', content: '{a}' }], template_vars: { a: 'y'.repeat(TEMPLATE_GROWTH_LIMIT / 2 + 3) } };
    const response = await post(app, user, '/completions/create', body(project, atLimit, { track_llm_call: false }));
    expect([response.statusCode, response.json().response.error]).toEqual([200, undefined]);
    expect((sentMessages() as { content: string }[]).map((message) => message.content.length)).toEqual([TEMPLATE_GROWTH_LIMIT / 2 + 3, TEMPLATE_GROWTH_LIMIT / 2 + 3]);
  });
});

describe('/completions/create_stream', () => {
  it('streams JSON Lines: the call id first, then the chunks; the call holds the assembled completion', async () => {
    const project = newProject();
    const response = await post(app, user, '/completions/create_stream', body(project));
    expect(response.statusCode, response.body).toBe(200);
    expect(response.headers['content-type']).toContain('application/jsonl');
    const [meta, ...chunks] = lines(response.body);
    expect(meta).toEqual({ _meta: { weave_call_id: expect.any(String) } });
    expect(chunks.length).toBeGreaterThan(1);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    const text = chunks.map((c: Record<string, any>) => c.choices?.[0]?.delta?.content ?? '').join('');
    expect(text).toBe('Hello from the fake engine');
    const [call] = await callsOf(project);
    expect(call.id).toBe((meta as Record<string, any>)._meta.weave_call_id);
    expect(call.output).toMatchObject({ object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'Hello from the fake engine' }, finish_reason: 'stop' }] });
    expect(call.summary.usage['fake/base-model']).toMatchObject({ prompt_tokens: 7, completion_tokens: 5 });
  });

  it('sends one error line after the call id when the provider fails', async () => {
    const project = newProject();
    engine.setBehaviour({ kind: 'status', status: 503, message: 'overloaded' }, 10);
    const response = await post(app, user, '/completions/create_stream', body(project));
    engine.setBehaviour({ kind: 'ok' });
    const rows = lines(response.body);
    expect(rows).toEqual([{ _meta: { weave_call_id: expect.any(String) } }, { error: expect.any(String) }]);
    const [call] = await callsOf(project);
    expect(call.summary.weave.status).toBe('error');
  });

  it('streams without the meta line when not tracked', async () => {
    const project = newProject();
    const response = await post(app, user, '/completions/create_stream', body(project, {}, { track_llm_call: false }));
    const rows = lines(response.body);
    expect(rows[0]).toMatchObject({ object: 'chat.completion.chunk' });
    expect(await callsOf(project)).toEqual([]);
  });
});

describe('tenancy and bad input', () => {
  // The gateway meters the earlier tests' requests off the hot path (flushed every 50 ms): let those
  // rows land so that the fingerprints compare only the refused requests.
  beforeAll(() => new Promise((resolve) => setTimeout(resolve, 300)));

  for (const url of ['/completions/create', '/completions/create_stream']) {
    it(`refuses another tenant's project on ${url}, calling no model and writing nothing`, async () => {
      const project = `${user.entity}/${uniqueName('private')}`;
      const before = engine.chatRequests().length;
      await expectOtherTenantRefused(
        app,
        { method: 'POST', url: `/traces${url}`, headers: { authorization: basicAuth(other.key), 'content-type': 'application/json' }, payload: body(project) },
        { status: 403, body: { reason: `This API key cannot reach project ${project}.` } },
      );
      expect(engine.chatRequests().length).toBe(before);
    });

    it(`rejects bad bodies on ${url}`, async () => {
      await expectBadInputRejected(app, {
        request: { method: 'POST', url: `/traces${url}`, headers: user.headers },
        schema: CompletionsCreateBody,
        valid: body(newProject(), {}, { track_llm_call: false }),
        family: 'tracing',
      });
    });
  }
});
