import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp } from '../helpers/app.js';
import { onPostgresServer } from '../helpers/database.js';

let app: App | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

describe.skipIf(onPostgresServer)('the embedded database in its worker thread', () => {
  it('runs a long statement off the event loop: timers fire and HTTP requests are answered meanwhile', async () => {
    app = await createTestApp();
    const current = app;
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    let done = false;
    const slow = sql`select pg_sleep(1)`.execute(current.db).finally(() => {
      done = true;
    });
    let answered = 0;
    try {
      while (!done) {
        const health = await current.inject({ method: 'GET', url: '/v1/health' });
        expect(health.statusCode).toBe(200);
        answered++;
        await new Promise((resolve) => setImmediate(resolve)); // inject answers within microtasks: let the loop turn
      }
      await slow;
    } finally {
      clearInterval(timer);
    }
    // PGlite on this thread would have blocked it for the whole second: a tick or a request at most either side.
    expect(ticks).toBeGreaterThan(20);
    expect(answered).toBeGreaterThan(20);
  });

  it('stops with the app: its instance refuses statements once the app is closed', async () => {
    const closing = await createTestApp();
    const instance = closing.database.embedded!.instance;
    expect((await instance.query('select 1 as x')).rows).toEqual([{ x: 1 }]);
    await closing.close();
    await expect(instance.query('select 1 as x')).rejects.toThrow('The embedded database is closed.');
  });
});

describe('values and errors on their way back from the database', () => {
  it('keep their types: timestamptz as Date, int8 and numeric as numbers, jsonb as objects, bytea as bytes', async () => {
    app = await createTestApp();
    await sql`create table round_trip (id int8 primary key, at timestamptz, doc jsonb, bytes bytea, amount numeric)`.execute(app.db);
    const at = new Date('2025-01-02T03:04:05.678Z');
    const doc = { a: [1, { b: 'é\u{1F600}' }], n: null, t: true };
    await sql`insert into round_trip values (${9007199254740991}, ${at}, ${JSON.stringify(doc)}::jsonb, ${Buffer.from([0, 1, 254, 255])}, ${'12.5'})`.execute(app.db);
    const { rows } = await sql<{ id: unknown; at: unknown; doc: unknown; bytes: unknown; amount: unknown }>`select * from round_trip`.execute(app.db);
    expect(rows).toHaveLength(1);
    const row = rows[0];
    expect(row.id).toBe(9007199254740991);
    expect(row.at).toBeInstanceOf(Date);
    expect((row.at as Date).toISOString()).toBe(at.toISOString());
    expect(row.doc).toEqual(doc);
    expect(row.bytes).toBeInstanceOf(Uint8Array);
    expect(Buffer.from(row.bytes as Uint8Array)).toEqual(Buffer.from([0, 1, 254, 255]));
    expect(row.amount).toBe(12.5);
  });

  it("keep PostgreSQL's fields: a unique violation's SQLSTATE, constraint, table and detail", async () => {
    app = await createTestApp();
    await sql`create table unique_trip (id int8 primary key)`.execute(app.db);
    await sql`insert into unique_trip values (${7})`.execute(app.db);
    const error = await sql`insert into unique_trip values (${7})`.execute(app.db).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toBe('duplicate key value violates unique constraint "unique_trip_pkey"');
    expect(error).toMatchObject({
      code: '23505',
      constraint: 'unique_trip_pkey',
      table: 'unique_trip',
      schema: 'public',
      severity: 'ERROR',
      detail: 'Key (id)=(7) already exists.',
    });

    const syntax = await sql`select * fromm nowhere`.execute(app.db).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(syntax).toMatchObject({ code: '42601', position: expect.any(String), message: 'syntax error at or near "fromm"' });
    // Errors PostgreSQL raised leave the instance as it was: the next statement is served.
    expect((await sql<{ x: number }>`select 1 as x`.execute(app.db)).rows).toEqual([{ x: 1 }]);
  });
});
