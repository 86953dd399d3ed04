import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { ForbiddenError, InvalidRequestError, NotFoundError } from '../../src/errors.js';
import { resolveTrainingRows } from '../../src/tracing/datasets.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { basicAuth, post } from './helpers.js';

let app: App;
let user: TestUser;
let project: string;
let entities: ReadonlySet<string>;

const rows = [{ messages: [{ role: 'user', content: 'hi' }] }, { messages: [{ role: 'user', content: 'yo' }], weight: 1.5 }];

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('sft')}`;
  entities = new Set([user.entity]);
});
afterAll(async () => {
  await app.close();
});

async function saveDataset(name: string): Promise<{ table: string; digest: string }> {
  const table = (await post(app, user, '/table/create', { table: { project_id: project, rows } })).json().digest;
  const val = { _type: 'Dataset', _class_name: 'Dataset', _bases: ['Object', 'BaseModel'], name, rows: `weave:///${project}/table/${table}` };
  const digest = (await post(app, user, '/obj/create', { obj: { project_id: project, object_id: name, val } })).json().digest;
  return { table, digest };
}

describe('resolveTrainingRows', () => {
  it('reads a dataset object ref (by digest, latest and vN) as its rows in order', async () => {
    const { digest } = await saveDataset('chats');
    for (const version of [digest, 'latest', 'v0']) {
      expect(await resolveTrainingRows(app.db, { entities, url: `weave:///${project}/object/chats:${version}` })).toEqual(rows);
    }
  });

  it('reads a table ref as its rows', async () => {
    const { table } = await saveDataset('chats-table');
    expect(await resolveTrainingRows(app.db, { entities, url: `weave:///${project}/table/${table}` })).toEqual(rows);
  });

  it('reads a JSONL file uploaded through /file/create, named weave:///entity/project/file/<digest>', async () => {
    const text = `${rows.map((r) => JSON.stringify(r)).join('\n')}\n\n`;
    const boundary = 'b0undary';
    const payload =
      `--${boundary}\r\nContent-Disposition: form-data; name="project_id"\r\n\r\n${project}\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="train.jsonl"\r\nContent-Type: application/octet-stream\r\n\r\n${text}\r\n--${boundary}--\r\n`;
    const response = await app.inject({
      method: 'POST',
      url: '/traces/file/create',
      payload,
      headers: { authorization: basicAuth(user.key), 'content-type': `multipart/form-data; boundary=${boundary}` },
    });
    const { digest } = response.json();
    expect(await resolveTrainingRows(app.db, { entities, url: `weave:///${project}/file/${digest}` })).toEqual(rows);
  });

  it('refuses entities the caller cannot reach, missing data and other URLs', async () => {
    await expect(resolveTrainingRows(app.db, { entities: new Set(['someone-else']), url: `weave:///${project}/table/abc` })).rejects.toBeInstanceOf(ForbiddenError);
    await expect(resolveTrainingRows(app.db, { entities, url: `weave:///${project}/table/abc` })).rejects.toBeInstanceOf(NotFoundError);
    await expect(resolveTrainingRows(app.db, { entities, url: `weave:///${project}/object/none:latest` })).rejects.toBeInstanceOf(NotFoundError);
    await expect(resolveTrainingRows(app.db, { entities, url: `weave:///${project}/file/abc` })).rejects.toBeInstanceOf(NotFoundError);
    await expect(resolveTrainingRows(app.db, { entities, url: 'https://example.com/x.jsonl' })).rejects.toBeInstanceOf(InvalidRequestError);
    const plain = (await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'plain', val: { a: 1 } } })).json().digest;
    await expect(resolveTrainingRows(app.db, { entities, url: `weave:///${project}/object/plain:${plain}` })).rejects.toThrow(/is not a dataset/);
  });

  it('treats a deleted dataset as not found', async () => {
    await saveDataset('deleted-ds');
    await post(app, user, '/obj/delete', { project_id: project, object_id: 'deleted-ds' });
    await expect(resolveTrainingRows(app.db, { entities, url: `weave:///${project}/object/deleted-ds:latest` })).rejects.toThrow(/was deleted at/);
  });
});
