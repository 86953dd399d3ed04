import net from 'node:net';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { basicAuth } from '../tracing/helpers.js';
import * as wandb from '../wandb/helpers.js';

/**
 * How request bodies must be encoded, on every API: UTF-8 (the charset of JSON), with no charset but
 * UTF-8 named, and without a content coding unless the route decodes it (OTLP) or keeps bytes as sent
 * (the W&B upload URLs). Each refusal is in its API's error form and stores nothing.
 */

let app: App;
let user: TestUser;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  // The key's first use records itself; the fingerprints below then change only with what a request stores.
  await app.inject({ method: 'GET', url: '/v1/preview/base-models', headers: user.headers });
});
afterAll(async () => {
  await app.close();
});

/** Bytes from text pieces and raw bytes, in order. */
const bytes = (...parts: (string | number[])[]) => Buffer.concat(parts.map((part) => (typeof part === 'string' ? Buffer.from(part) : Buffer.from(part))));

const send = (url: string, payload: Buffer | string, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url, headers: { ...user.headers, 'content-type': 'application/json', ...headers }, payload });
const sendTracing = (url: string, payload: Buffer | string, headers: Record<string, string> = {}) =>
  send(`/traces${url}`, payload, { authorization: basicAuth(user.key), ...headers });

const modelBody = (name = uniqueName('m')) => JSON.stringify({ project: 'p', name, base_model: 'b' });
const chatBody = (content: string) => `{"model":"m","messages":[{"role":"user","content":"${content}`;
const objBody = (project: string, objectId: string) => `{"obj":{"project_id":"${project}","object_id":"${objectId}","val":{"city":"Montr`;
const newProject = () => `${user.entity}/${uniqueName('enc')}`;

/** The 422 a body gets when its bytes are not UTF-8 at `position` (characters), the codec's words in ctx. */
const jsonInvalid = (position: number, error: string) => ({ type: 'json_invalid', loc: ['body', position], msg: 'JSON decode error', input: {}, ctx: { error } });

describe('a request body that is not UTF-8', () => {
  it('is a 422 json_invalid on the training API, naming the first bad byte, and stores nothing', async () => {
    const before = await databaseFingerprint(app);
    const head = '{"project":"p","name":"m-';
    const response = await send('/v1/preview/models', bytes(head, [0xe9], '","base_model":"b"}'));
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({
      detail: [jsonInvalid(head.length, `'utf-8' codec can't decode byte 0xe9 in position ${head.length}: invalid continuation byte`)],
    });
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('is located in characters after multi-byte ones, with the byte position in the codec message', async () => {
    const head = '{"project":"p","name":"Montréal-😀-';
    const response = await send('/v1/preview/models', bytes(head, [0xff], '","base_model":"b"}'));
    expect(response.statusCode).toBe(422);
    const byte = Buffer.byteLength(head);
    expect(response.json()).toEqual({ detail: [jsonInvalid(head.length, `'utf-8' codec can't decode byte 0xff in position ${byte}: invalid start byte`)] });
  });

  it('that ends inside a character is a 422 saying the data ended', async () => {
    const head = '{"project":"p","name":"';
    const response = await send('/v1/preview/models', bytes(head, [0xe2, 0x82]));
    expect(response.statusCode).toBe(422);
    expect(response.json()).toEqual({ detail: [jsonInvalid(head.length, `'utf-8' codec can't decode bytes in position ${head.length}-${head.length + 1}: unexpected end of data`)] });
  });

  it('is a 422 json_invalid with the OpenAI envelope beside it on the inference API', async () => {
    const head = chatBody('caf');
    const response = await send('/v1/chat/completions', bytes(head, [0xe9], '"}]}'));
    expect(response.statusCode).toBe(422);
    const error = `'utf-8' codec can't decode byte 0xe9 in position ${head.length}: invalid continuation byte`;
    expect(response.json()).toEqual({
      detail: [jsonInvalid(head.length, error)],
      error: { message: `body.${head.length}: JSON decode error`, type: 'invalid_request_error', param: null, code: 'json_invalid' },
    });
  });

  it('is a 400 on the tracing API, on the digest routes and the others alike, and stores nothing', async () => {
    const project = newProject();
    const before = await databaseFingerprint(app);
    const reason = (position: number) => ({
      reason: `The body is not valid UTF-8: 'utf-8' codec can't decode byte 0xe9 in position ${position}: invalid continuation byte. Send JSON encoded as UTF-8.`,
    });
    const head = objBody(project, 'latin');
    const object = await sendTracing('/obj/create', bytes(head, [0xe9], 'al"}}}'));
    expect([object.statusCode, object.json()]).toEqual([400, reason(head.length)]);
    const tableHead = `{"table":{"project_id":"${project}","rows":[{"city":"Montr`;
    const table = await sendTracing('/table/create', bytes(tableHead, [0xe9], 'al"}]}}'));
    expect([table.statusCode, table.json()]).toEqual([400, reason(tableHead.length)]);
    const callHead = `{"start":{"project_id":"${project}","op_name":"op","started_at":"2025-01-02T03:04:05Z","attributes":{},"inputs":{"city":"Montr`;
    const call = await sendTracing('/call/start', bytes(callHead, [0xe9], 'al"}}}'));
    expect([call.statusCode, call.json()]).toEqual([400, reason(callHead.length)]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('is a 400 on OTLP/JSON, gzipped or not', async () => {
    const head = '{"resourceSpans":[{"resource":{"attributes":[{"key":"caf';
    const body = bytes(head, [0xe9], '","value":{"stringValue":"x"}}]},"scopeSpans":[]}]}');
    const headers = { project_id: newProject() };
    const expected = { reason: `The body is not valid UTF-8: 'utf-8' codec can't decode byte 0xe9 in position ${head.length}: invalid continuation byte. Send JSON encoded as UTF-8.` };
    const plain = await sendTracing('/otel/v1/traces', body, headers);
    expect([plain.statusCode, plain.json()]).toEqual([400, expected]);
    const gzipped = await sendTracing('/otel/v1/traces', gzipSync(body), { ...headers, 'content-encoding': 'gzip' });
    expect([gzipped.statusCode, gzipped.json()]).toEqual([400, expected]);
  });

  it('is a 422 json_invalid on /graphql and the W&B file_stream, as their invalid JSON is', async () => {
    const head = '{"query":"{ viewer { entity } }","variables":{"x":"caf';
    const graphql = await send('/graphql', bytes(head, [0xe9], '"}}'));
    const error = `'utf-8' codec can't decode byte 0xe9 in position ${head.length}: invalid continuation byte`;
    expect([graphql.statusCode, graphql.json()]).toEqual([422, { detail: [jsonInvalid(head.length, error)] }]);
    const streamHead = '{"files":{"wandb-summary.json":{"offset":0,"content":["{\\"caf';
    const stream = await send(`/files/${user.entity}/p/r/file_stream`, bytes(streamHead, [0xe9], '\\": 1}"]}}}'));
    const streamError = `'utf-8' codec can't decode byte 0xe9 in position ${streamHead.length}: invalid continuation byte`;
    expect([stream.statusCode, stream.json()]).toEqual([422, { detail: [jsonInvalid(streamHead.length, streamError)] }]);
  });
});

describe('a charset other than UTF-8', () => {
  const message = 'Unsupported charset iso-8859-1: send the body as UTF-8 (charset=utf-8, or no charset).';
  const latin1 = { 'content-type': 'application/json; charset=iso-8859-1' };

  it('is a 415 in each API\'s form, and nothing is stored', async () => {
    const before = await databaseFingerprint(app);
    const training = await send('/v1/preview/models', modelBody(), latin1);
    expect([training.statusCode, training.json()]).toEqual([415, { detail: message }]);
    const inference = await send('/v1/chat/completions', `${chatBody('hi')}"}]}`, latin1);
    expect([inference.statusCode, inference.json()]).toEqual([415, { error: { message, type: 'invalid_request_error', param: null, code: 'unsupported_media_type' } }]);
    // The hunt's case: a Latin-1 é, which was stored as U+FFFD with a 200.
    const tracing = await sendTracing('/obj/create', bytes(objBody(newProject(), 'latin'), [0xe9], 'al"}}}'), latin1);
    expect([tracing.statusCode, tracing.json()]).toEqual([415, { reason: message }]);
    const otlp = await sendTracing('/otel/v1/traces', '{"resourceSpans":[]}', { ...latin1, project_id: newProject() });
    expect([otlp.statusCode, otlp.json()]).toEqual([415, { reason: message }]);
    const graphql = await send('/graphql', '{"query":"{ viewer { entity } }"}', latin1);
    expect([graphql.statusCode, graphql.json()]).toEqual([415, { reason: message }]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('is named as sent, quotes taken off', async () => {
    const response = await send('/v1/preview/models', modelBody(), { 'content-type': 'application/json;charset="Windows-1252"' });
    expect([response.statusCode, response.json()]).toEqual([415, { detail: 'Unsupported charset Windows-1252: send the body as UTF-8 (charset=utf-8, or no charset).' }]);
  });

  it('is not refused when it names UTF-8, in any case, quoted, or as utf8', async () => {
    for (const contentType of ['application/json; charset=utf-8', 'application/json; charset=UTF-8', 'application/json;charset="utf-8"', 'application/json; charset=utf8']) {
      const response = await send('/v1/preview/models', modelBody(), { 'content-type': contentType });
      expect(response.statusCode, `${contentType}: ${response.body}`).toBe(200);
    }
    const tracing = await sendTracing('/obj/create', `${objBody(newProject(), 'utf8')}éal"}}}`, { 'content-type': 'application/json; charset=UTF-8' });
    expect(tracing.statusCode, tracing.body).toBe(200);
  });
});

describe('a Content-Encoding on a request body', () => {
  const message = (coding: string) => `Content-Encoding ${coding} is not supported here: send the body uncompressed.`;

  it('is a 415 on the training API, gzip or a made-up coding, and nothing is stored', async () => {
    const before = await databaseFingerprint(app);
    const bogus = await send('/v1/preview/models', modelBody(), { 'content-encoding': 'br' });
    expect([bogus.statusCode, bogus.json()]).toEqual([415, { detail: message('br') }]);
    const gzip = await send('/v1/preview/models', gzipSync(modelBody()), { 'content-encoding': 'gzip' });
    expect([gzip.statusCode, gzip.json()]).toEqual([415, { detail: message('gzip') }]);
    const several = await send('/v1/preview/models', modelBody(), { 'content-encoding': 'identity, GZip' });
    expect([several.statusCode, several.json()]).toEqual([415, { detail: message('gzip') }]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('is a 415 in the OpenAI envelope on the inference API', async () => {
    const response = await send('/v1/chat/completions', `${chatBody('hi')}"}]}`, { 'content-encoding': 'bogus' });
    expect([response.statusCode, response.json()]).toEqual([415, { error: { message: message('bogus'), type: 'invalid_request_error', param: null, code: 'unsupported_media_type' } }]);
  });

  it('is a 415 in the tracing form on the tracing API and /graphql', async () => {
    const before = await databaseFingerprint(app);
    const object = await sendTracing('/obj/create', gzipSync(`${objBody(newProject(), 'zipped')}éal"}}}`), { 'content-encoding': 'gzip' });
    expect([object.statusCode, object.json()]).toEqual([415, { reason: message('gzip') }]);
    const graphql = await send('/graphql', gzipSync('{"query":"{ viewer { entity } }"}'), { 'content-encoding': 'gzip' });
    expect([graphql.statusCode, graphql.json()]).toEqual([415, { reason: message('gzip') }]);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('is not refused when it is identity, or on a request without a body', async () => {
    const identity = await send('/v1/preview/models', modelBody(), { 'content-encoding': 'identity' });
    expect(identity.statusCode, identity.body).toBe(200);
    const models = await app.inject({ method: 'GET', url: '/v1/preview/base-models', headers: { ...user.headers, 'content-encoding': 'gzip' } });
    expect(models.statusCode, models.body).toBe(200);
  });

  it('is answered before the body is read', async () => {
    const base = new URL(await listen(app));
    const answer = await new Promise<string>((resolve) => {
      const socket = net.connect({ host: base.hostname, port: Number(base.port) });
      let received = '';
      // A server that waits for the rest of the body never answers: what came by then is the answer.
      const waited = setTimeout(() => {
        socket.destroy();
        resolve(received);
      }, 5_000);
      socket.on('data', (chunk) => {
        received += chunk.toString('latin1');
        if (received.includes('\r\n\r\n') && received.endsWith('}')) {
          clearTimeout(waited);
          socket.destroy();
          resolve(received);
        }
      });
      // The head declares a megabyte; two bytes of it are sent, and the answer comes anyway.
      socket.write(
        `POST /v1/preview/models HTTP/1.1\r\nHost: ${base.host}\r\nAuthorization: ${user.headers.authorization}\r\n` +
          'Content-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: 1000000\r\n\r\n\x1f\x8b',
      );
    });
    expect(answer.split('\r\n', 1)[0]).toBe('HTTP/1.1 415 Unsupported Media Type');
    expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual({ detail: message('gzip') });
  });

  it('is still decoded on OTLP, where a body that is not gzip is a 400', async () => {
    const project = newProject();
    const span = { traceId: '0af7651916cd43dd8448eb211c80319c', spanId: 'b7ad6b7169203331', name: 'zipped', kind: 1, startTimeUnixNano: '1735689600000000000', endTimeUnixNano: '1735689601000000000' };
    const otlp = JSON.stringify({ resourceSpans: [{ resource: { attributes: [] }, scopeSpans: [{ scope: { name: 's' }, spans: [span] }] }] });
    const gzipped = await sendTracing('/otel/v1/traces', gzipSync(otlp), { 'content-encoding': 'gzip', project_id: project });
    expect([gzipped.statusCode, gzipped.json()]).toEqual([200, {}]);
    const broken = await sendTracing('/otel/v1/traces', '{notgzip', { 'content-encoding': 'gzip', project_id: project });
    expect([broken.statusCode, broken.json()]).toEqual([400, { reason: 'The body is not valid gzip data: incorrect header check' }]);
    const unknown = await sendTracing('/otel/v1/traces', otlp, { 'content-encoding': 'br', project_id: project });
    expect([unknown.statusCode, unknown.json()]).toEqual([415, { reason: 'Unsupported Content-Encoding br: send gzip or none.' }]);
  });

  it('is kept with the bytes on the W&B upload URLs, which store what they are sent', async () => {
    const data = gzipSync('some file');
    const draft = await wandb.draft(app, user, { 'notes.txt.gz': data });
    const response = await wandb.put(app, draft.uploadUrls[0]!, data, { 'content-encoding': 'gzip', 'content-md5': wandb.b64md5(data) });
    expect([response.statusCode, response.json()]).toEqual([200, { stored: true }]);
  });
});

describe('a UTF-8 byte order mark before a JSON body', () => {
  it('is accepted on the tracing digest routes as on the others, and not stored', async () => {
    const project = newProject();
    const bom = [0xef, 0xbb, 0xbf];
    const object = await sendTracing('/obj/create', bytes(bom, `${objBody(project, 'bom')}éal"}}}`));
    expect(object.statusCode, object.body).toBe(200);
    const plain = await sendTracing('/obj/create', `${objBody(project, 'plain')}éal"}}}`);
    expect(object.json().digest).toBe(plain.json().digest);
    const read = await sendTracing('/obj/read', JSON.stringify({ project_id: project, object_id: 'bom', digest: 'latest' }));
    expect(read.json().obj.val).toEqual({ city: 'Montréal' });
    const table = await sendTracing('/table/create', bytes(bom, JSON.stringify({ table: { project_id: project, rows: [{ a: 1.0 }] } })));
    expect(table.statusCode, table.body).toBe(200);
    const call = await sendTracing('/call/start', bytes(bom, JSON.stringify({ start: { project_id: project, op_name: 'op', started_at: '2025-01-02T03:04:05Z', attributes: {}, inputs: {} } })));
    expect(call.statusCode, call.body).toBe(200);
  });

  it('is accepted on the training and inference bodies, where a bad byte after it is located without it', async () => {
    const created = await send('/v1/preview/models', bytes([0xef, 0xbb, 0xbf], modelBody()));
    expect(created.statusCode, created.body).toBe(200);
    const head = '{"project":"p","name":"';
    const refused = await send('/v1/preview/models', bytes([0xef, 0xbb, 0xbf], head, [0xc0, 0x80], '"}'));
    expect(refused.json()).toEqual({ detail: [jsonInvalid(head.length, `'utf-8' codec can't decode byte 0xc0 in position ${head.length + 3}: invalid start byte`)] });
  });
});
