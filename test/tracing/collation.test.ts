import { randomBytes } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp, type App } from '../../src/app.js';
import { createPgPool, migrateToLatest, postgresHandle, type DatabaseHandle } from '../../src/db/index.js';
import { createTestApp, createUserWithKey, testConfig, uniqueName, type TestUser } from '../helpers/app.js';
import { onPostgresServer } from '../helpers/database.js';
import { adminPool, databaseUrl } from '../helpers/postgres.js';
import { callItems, lines, post } from './helpers.js';

/**
 * String sorts answer byte order on every database. On a PostgreSQL server these tests run on a
 * database whose default collation is linguistic (ICU en-US: the official postgres image's
 * en_US.utf8 sorts the same way, and this server's libc has no en_US locale), where a plain ORDER BY
 * puts 'hello there' before 'Hello World'.
 */

let app: App;
let user: TestUser;
let linguistic: { name: string; handle: DatabaseHandle } | undefined;

beforeAll(async () => {
  if (onPostgresServer) {
    const name = `t_icu_${randomBytes(4).toString('hex')}`;
    const admin = adminPool();
    try {
      await admin.query(`create database ${name} template template0 locale_provider icu icu_locale 'en-US' locale 'C.UTF-8'`);
    } finally {
      await admin.end();
    }
    const handle = postgresHandle(createPgPool(databaseUrl(name), 5));
    await migrateToLatest(handle.db);
    linguistic = { name, handle };
    app = await buildApp(testConfig(), { database: handle });
    await app.ready();
  } else {
    app = await createTestApp();
  }
  user = await createUserWithKey(app);
}, 60_000);
afterAll(async () => {
  await app.close();
  if (linguistic) {
    const admin = adminPool();
    try {
      await admin.query(`drop database if exists ${linguistic.name} with (force)`);
    } finally {
      await admin.end();
    }
  }
});

const WORDS = ['hello there', 'Hello World', 'apple', 'Banana'];
const BYTE_ORDER = ['Banana', 'Hello World', 'apple', 'hello there'];

it.runIf(onPostgresServer)('runs on a database whose own order is linguistic', async () => {
  const { rows } = await sql<{ w: string }>`select w from unnest(${WORDS}::text[]) as t(w) order by w`.execute(linguistic!.handle.db);
  expect(rows.map((r) => r.w)).toEqual(['apple', 'Banana', 'hello there', 'Hello World']);
});

describe('byte-order string sorts', () => {
  let project: string;
  beforeAll(async () => {
    project = `${user.entity}/${uniqueName('coll')}`;
    const batch = WORDS.flatMap((word, i) => callItems(project, { id: `c${i}`, display_name: word, inputs: { word } }));
    expect((await post(app, user, '/call/upsert_batch', { batch })).statusCode).toBe(200);
  });

  const words = async (body: Record<string, unknown>) => {
    const response = await post(app, user, '/calls/stream_query', { project_id: project, ...body });
    expect(response.statusCode, response.body).toBe(200);
    return lines(response.body).map((c) => (c.inputs as { word: string }).word);
  };

  it('sorts calls by a text column and by a JSON path in byte order', async () => {
    expect(await words({ sort_by: [{ field: 'display_name', direction: 'asc' }] })).toEqual(BYTE_ORDER);
    expect(await words({ sort_by: [{ field: 'inputs.word', direction: 'desc' }] })).toEqual([...BYTE_ORDER].reverse());
  });

  it('compares strings in byte order in $gt and $lt', async () => {
    const gt = (field: string) => ({ query: { $expr: { $gt: [{ $getField: field }, { $literal: 'Z' }] } }, sort_by: [{ field: 'inputs.word', direction: 'asc' }] });
    expect(await words(gt('display_name'))).toEqual(['apple', 'hello there']);
    expect(await words(gt('inputs.word'))).toEqual(['apple', 'hello there']);
  });

  it('sorts objects by object_id and feedback by a payload text in byte order', async () => {
    for (const word of WORDS) {
      const id = word.replace(' ', '_');
      expect((await post(app, user, '/obj/create', { obj: { project_id: project, object_id: id, val: { word } } })).statusCode).toBe(200);
      const feedback = { project_id: project, weave_ref: `weave:///${project}/call/c0`, feedback_type: 'word', payload: { word } };
      expect((await post(app, user, '/feedback/create', feedback)).statusCode).toBe(200);
    }
    const objs = (await post(app, user, '/objs/query', { project_id: project, sort_by: [{ field: 'object_id', direction: 'asc' }] })).json().objs;
    expect(objs.map((o: { object_id: string }) => o.object_id)).toEqual(BYTE_ORDER.map((w) => w.replace(' ', '_')));
    const rows = (await post(app, user, '/feedback/query', { project_id: project, fields: ['payload.word'], sort_by: [{ field: 'payload.word', direction: 'asc' }] })).json().result;
    expect(rows.map((r: Record<string, unknown>) => r['payload.word'])).toEqual(BYTE_ORDER);
  });
});
