import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, type TestUser } from '../helpers/app.js';
import { call, ScriptedWorker, sftRows, userWithModel } from './fixtures.js';

/** SFT training data from http(s) URLs, with SFT_ALLOW_HTTP_URLS on (and a 1 MB download limit). */

let app: App;
let user: TestUser;
let files: http.Server;
let filesUrl: string;
const rows = sftRows(4);

/** A row nesting `levels` objects and arrays: row {} > messages [] > message {} > content, then `{d: ...}`. */
function rowNesting(levels: number): Record<string, unknown> {
  let content: unknown = 'deep';
  for (let i = 0; i < levels - 3; i++) content = { d: content };
  return { messages: [{ role: 'user', content }, { role: 'assistant', content: 'ok' }] };
}

beforeAll(async () => {
  app = await createTestApp({ SFT_ALLOW_HTTP_URLS: 'true', BODY_LIMIT_MB: '1' });
  user = await createUserWithKey(app);
  files = http.createServer((request, response) => {
    if (request.url === '/train.jsonl') return void response.end(rows.map((row) => JSON.stringify(row)).join('\n') + '\n');
    if (request.url === '/huge.jsonl') return void response.end('x'.repeat(2 * 1024 * 1024));
    if (request.url === '/broken.jsonl') return void response.end('{"messages": [}\n');
    if (request.url === '/deep.jsonl') return void response.end(`${JSON.stringify(rowNesting(256))}\n${JSON.stringify(rowNesting(257))}\n`);
    if (request.url === '/bom.jsonl') return void response.end(`\ufeff${rows.map((row) => JSON.stringify(row)).join('\r\n')}\r\n`);
    if (request.url === '/latin1.jsonl') return void response.end(Buffer.from('{"messages": [{"role": "user", "content": "caf\xe9"}]}\n', 'latin1'));
    if (request.url === '/nul.jsonl') return void response.end(`${JSON.stringify(rows[0])}\n{"messages": [{"role": "user", "content": "a\\u0000b"}]}\n`);
    if (request.url === '/surrogate.jsonl') return void response.end('{"messages": [{"role": "user", "content": "\\ud800"}]}\n');
    if (request.url === '/no-role.jsonl') return void response.end('{"messages": [{"content": "hi"}]}\n');
    if (request.url === '/redirect') return void response.writeHead(302, { location: '/train.jsonl' }).end();
    response.writeHead(404).end('no such file');
  });
  await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
  filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await app.close();
  await new Promise((resolve) => files.close(resolve));
});

const create = (modelId: string, url: string) => call(app, user.headers, 'POST', '/v1/preview/sft-training-jobs', { model_id: modelId, training_data_url: url });

describe('SFT data from http(s) URLs', () => {
  it('downloads the JSONL file and copies its rows into the job', async () => {
    const { model, baseModel } = await userWithModel(app, user);
    const job = await create(model.id, `${filesUrl}/train.jsonl`);
    expect(job.status, job.text).toBe(200);
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    const claimed = (await worker.claim())!;
    expect(await worker.inputs(claimed)).toEqual(rows);
  });

  it('a missing, oversized, malformed or redirected file is a 422 naming why', async () => {
    const { model } = await userWithModel(app, user);
    const why = async (path: string) => (await create(model.id, `${filesUrl}${path}`)).body.detail[0].ctx.error;
    expect(await why('/missing.jsonl')).toBe('the server answered HTTP 404');
    expect(await why('/huge.jsonl')).toBe('it is larger than the limit of 1048576 bytes');
    expect(await why('/broken.jsonl')).toBe('line 1 is not valid JSON (Unexpected token \'}\', "{"messages": [}" is not valid JSON)');
    expect(await why('/redirect')).toBe('the server answered HTTP 302');
  });

  it('reads a file with a byte order mark and CRLF line ends as its rows', async () => {
    const { model, baseModel } = await userWithModel(app, user);
    const job = await create(model.id, `${filesUrl}/bom.jsonl`);
    expect(job.status, job.text).toBe(200);
    const worker = await ScriptedWorker.create(app, user, [baseModel]);
    expect(await worker.inputs((await worker.claim())!)).toEqual(rows);
  });

  it('a file that is not UTF-8, a row holding U+0000 or a lone surrogate, or a message without a role is a 422 naming why', async () => {
    const { model } = await userWithModel(app, user);
    const url = `${filesUrl}/latin1.jsonl`;
    const latin1 = await create(model.id, url);
    expect([latin1.status, latin1.body]).toEqual([
      422,
      {
        detail: [
          {
            type: 'value_error',
            loc: ['body', 'training_data_url'],
            msg: `Value error, training_data_url ${url} cannot be used: it is not UTF-8 text (save it as UTF-8)`,
            input: url,
            ctx: { error: 'it is not UTF-8 text (save it as UTF-8)' },
          },
        ],
      },
    ]);
    const refusal = (path: string, why: string) => {
      const named = `${filesUrl}${path}`;
      return [422, { detail: [{ type: 'value_error', loc: ['body', 'training_data_url'], msg: `Value error, training_data_url ${named} cannot be used: ${why}`, input: named, ctx: { error: why } }] }];
    };
    const answer = async (path: string) => {
      const response = await create(model.id, `${filesUrl}${path}`);
      return [response.status, response.body];
    };
    expect(await answer('/nul.jsonl')).toEqual(refusal('/nul.jsonl', 'row 1 holds U+0000 or a lone UTF-16 surrogate at messages.0.content, which cannot be stored; remove or replace it'));
    expect(await answer('/surrogate.jsonl')).toEqual(refusal('/surrogate.jsonl', 'row 0 holds U+0000 or a lone UTF-16 surrogate at messages.0.content, which cannot be stored; remove or replace it'));
    expect(await answer('/no-role.jsonl')).toEqual(
      refusal('/no-role.jsonl', 'row 0 is not a training row (Invalid input: expected string, received undefined at messages.0.role); each row needs "messages", a list of chat messages'),
    );
    const jobs = await call(app, user.headers, 'GET', `/v1/preview/training-jobs?model_id=${model.id}`);
    expect(jobs.body.data).toEqual([]);
  });

  it('a learning rate that is not positive is a 422 at creation, not a failed job', async () => {
    const { model } = await userWithModel(app, user);
    const refused = async (learning_rate: unknown) => {
      const response = await call(app, user.headers, 'POST', '/v1/preview/sft-training-jobs', { model_id: model.id, training_data_url: `${filesUrl}/train.jsonl`, config: { learning_rate } });
      return [response.status, response.body];
    };
    const greaterThanZero = (loc: (string | number)[], input: number) => [422, { detail: [{ type: 'greater_than', loc, msg: 'Input should be greater than 0', input, ctx: { gt: 0 } }] }];
    expect(await refused(0)).toEqual(greaterThanZero(['body', 'config', 'learning_rate'], 0));
    expect(await refused(-1e-5)).toEqual(greaterThanZero(['body', 'config', 'learning_rate'], -1e-5));
    expect(await refused([1e-5, 0])).toEqual(greaterThanZero(['body', 'config', 'learning_rate', 1], 0));
    expect((await call(app, user.headers, 'GET', `/v1/preview/training-jobs?model_id=${model.id}`)).body.data).toEqual([]);
  });

  it('a row nested past the storage bound of 256 levels is a 422 naming the row', async () => {
    const { model } = await userWithModel(app, user);
    const response = await create(model.id, `${filesUrl}/deep.jsonl`);
    expect(response.status).toBe(422);
    expect(response.body.detail[0].ctx.error).toBe(
      'row 1 is not a training row (Value error, the value nests more than 256 levels of objects and arrays, the most that is stored; flatten it or send it as a string); each row needs "messages", a list of chat messages',
    );
  });
});
