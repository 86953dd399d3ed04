import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { basicAuth, lines } from './helpers.js';

/**
 * weave's Python HTTP binding up to 0.52 (and 0.53 with WEAVE_USE_STAINLESS_SERVER=false) posts
 * `requests.post(url, data=json_text)`: a JSON body with no Content-Type header at all. These requests
 * go over loopback with node:http so that no client library adds the header.
 */

let app: App;
let user: TestUser;
let base: string;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  base = await listen(app);
});
afterAll(async () => {
  await app.close();
});

interface Answer {
  status: number;
  contentType: string | undefined;
  text: string;
}

/** A POST with exactly the headers given (no Content-Type unless named). */
function rawPost(path: string, body: string, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      `${base}${path}`,
      { method: 'POST', headers: { authorization: basicAuth(user.key), 'content-length': String(Buffer.byteLength(body)), ...headers } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, contentType: response.headers['content-type'], text: Buffer.concat(chunks).toString('utf8') }));
        response.on('error', reject);
      },
    );
    request.on('error', reject);
    request.end(body);
  });
}

const json = (answer: Answer) => JSON.parse(answer.text) as Record<string, unknown>;
const newProject = () => `${user.entity}/${uniqueName('untyped')}`;

describe('tracing bodies without a Content-Type header', () => {
  it('store a call, an object, a table and feedback that read back as sent', async () => {
    const project = newProject();
    const started = await rawPost('/traces/call/start', JSON.stringify({ start: { project_id: project, op_name: 'predict', started_at: '2025-01-02T03:04:05.000Z', attributes: {}, inputs: { question: 'why?' } } }));
    expect(started.status, started.text).toBe(200);
    const { id } = json(started) as { id: string };
    const ended = await rawPost('/traces/call/end', JSON.stringify({ end: { project_id: project, id, ended_at: '2025-01-02T03:04:06.000Z', output: { answer: 42 }, summary: {} } }));
    expect(ended.status, ended.text).toBe(200);

    const created = await rawPost('/traces/obj/create', `{"obj": {"project_id": "${project}", "object_id": "config", "val": {"temperature": 1.0, "n": 3}}}`);
    expect(created.status, created.text).toBe(200);
    const { digest } = json(created) as { digest: string };
    const read = await rawPost('/traces/obj/read', JSON.stringify({ project_id: project, object_id: 'config', digest }));
    // The lossless routes keep `1.0` as written when the body came without the header, too.
    expect(read.text).toContain('"temperature":1.0');

    const table = await rawPost('/traces/table/create', JSON.stringify({ table: { project_id: project, rows: [{ q: 'a' }, { q: 'b' }] } }));
    expect(table.status, table.text).toBe(200);
    const rows = await rawPost('/traces/table/query', JSON.stringify({ project_id: project, digest: (json(table) as { digest: string }).digest }));
    expect((json(rows) as { rows: { val: unknown }[] }).rows.map((row) => row.val)).toEqual([{ q: 'a' }, { q: 'b' }]);

    const feedback = await rawPost('/traces/feedback/create', JSON.stringify({ project_id: project, weave_ref: `weave:///${project}/call/${id}`, feedback_type: 'wandb.note.1', payload: { note: 'fine' } }));
    expect(feedback.status, feedback.text).toBe(200);

    const calls = await rawPost('/traces/calls/stream_query', JSON.stringify({ project_id: project }));
    expect(calls.status).toBe(200);
    expect(lines(calls.text).map((call) => [call.id, call.inputs, call.output])).toEqual([[id, { question: 'why?' }, { answer: 42 }]]);
    const notes = await rawPost('/traces/feedback/query', JSON.stringify({ project_id: project }));
    expect((json(notes) as { result: { payload: unknown }[] }).result.map((row) => row.payload)).toEqual([{ note: 'fine' }]);
  });

  it('that is not JSON answers the 422 json_invalid detail and stores nothing', async () => {
    const before = await databaseFingerprint(app);
    const answer = await rawPost('/traces/call/start', '{"start": ');
    expect(answer.status).toBe(422);
    expect(json(answer)).toEqual({
      detail: [{ type: 'json_invalid', loc: ['body', 10], msg: 'JSON decode error', input: {}, ctx: { error: expect.any(String) } }],
    });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('with an integer of more than 4,300 digits is refused as Python\'s json refuses it, storing nothing', async () => {
    const before = await databaseFingerprint(app);
    const limit = 'Exceeds the limit (4300 digits) for integer string conversion: value has 4301 digits';
    const long = '7'.repeat(4301);
    // A call's payload: the 422 json_invalid detail of any body that is not JSON.
    const start = `{"start": {"project_id": "${newProject()}", "op_name": "op", "started_at": "2025-01-02T03:04:05Z", "attributes": {}, "inputs": {"a": ${long}}}}`;
    const call = await rawPost('/traces/call/start', start);
    expect([call.status, json(call)]).toEqual([
      422,
      { detail: [{ type: 'json_invalid', loc: ['body', start.indexOf(long)], msg: 'JSON decode error', input: {}, ctx: { error: limit } }] },
    ]);
    // An object, whose body is parsed losslessly to be digested: the 400 of invalid JSON there.
    const object = await rawPost('/traces/obj/create', `{"obj": {"project_id": "${newProject()}", "object_id": "o", "val": {"a": ${long}}}}`);
    expect([object.status, json(object)]).toEqual([400, { reason: `Invalid JSON body: ${limit}` }]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('of JSON that fails the schema answers the usual 422 naming the field', async () => {
    const answer = await rawPost('/traces/call/start', JSON.stringify({ start: { project_id: newProject(), started_at: '2025-01-02T03:04:05Z', attributes: {}, inputs: {} } }));
    expect(answer.status).toBe(422);
    expect(json(answer)).toEqual({ detail: [{ type: 'missing', loc: ['body', 'start', 'op_name'], msg: 'Field required', input: expect.any(Object) }] });
  });

  it('keeps the 415 for a content type that is named and not JSON', async () => {
    const answer = await rawPost('/traces/calls/query', JSON.stringify({ project_id: newProject() }), { 'content-type': 'text/xml' });
    expect(answer.status).toBe(415);
    expect(json(answer)).toEqual({ reason: 'Unsupported content type: text/xml. Send application/json.' });
  });

  it('are read as JSON only on tracing routes: the training API keeps its 415', async () => {
    const answer = await rawPost('/v1/preview/models', JSON.stringify({ entity: user.entity, project: 'p', name: 'm', base_model: 'b' }));
    expect(answer.status).toBe(415);
    expect(json(answer)).toEqual({ detail: 'Unsupported content type: none. Send application/json.' });
  });
});
