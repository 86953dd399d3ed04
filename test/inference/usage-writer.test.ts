import { Kysely, PostgresDialect } from 'kysely';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../../src/db/schema.js';
import type { DatabaseHandle } from '../../src/db/index.js';
import type { Logger } from '../../src/inference/logger.js';
import type { UsageRecord } from '../../src/inference/usage/repository.js';
import { sumUsage } from '../../src/inference/usage/repository.js';
import { UsageWriter } from '../../src/inference/usage/writer.js';
import { freshDatabase } from '../helpers/database.js';

let database: DatabaseHandle;
beforeAll(async () => {
  database = await freshDatabase();
});
afterAll(async () => {
  await database.close();
});

const errors: object[] = [];
const log: Logger = { info: () => undefined, warn: () => undefined, error: (o) => void errors.push(o) };

const row = (project: string, overrides: Partial<UsageRecord> = {}): UsageRecord => ({
  created_at: new Date(),
  entity: 'acme',
  project,
  api_key_id: '00000000-0000-4000-8000-000000000000',
  request_id: 'r',
  model: 'm',
  base_model: 'm',
  trained_model: null,
  checkpoint_step: null,
  backend: 'b',
  stream: false,
  prompt_tokens: 3,
  completion_tokens: 4,
  cached_tokens: 1,
  estimated: false,
  latency_ms: 5,
  time_to_first_token_ms: 2,
  outcome: 'success',
  status: 200,
  error_code: null,
  ...overrides,
});

describe('UsageWriter', () => {
  it('writes nothing until a flush, then everything recorded, in one batch', async () => {
    const writer = new UsageWriter(database.db, log, { flushIntervalMs: 60_000, embedded: database.embedded });
    for (let i = 0; i < 3; i++) writer.record(row('batch'));
    expect(await sumUsage(database.db, { entity: 'acme', project: 'batch' })).toEqual([]);
    await writer.close();
    expect(await sumUsage(database.db, { entity: 'acme', project: 'batch' })).toEqual([
      { requests: 3, errors: 0, prompt_tokens: 9, completion_tokens: 12, cached_tokens: 3, total_tokens: 21 },
    ]);
  });

  it('writes at once when a batch is full', async () => {
    const writer = new UsageWriter(database.db, log, { flushIntervalMs: 60_000, batchSize: 2, embedded: database.embedded });
    writer.record(row('full'));
    writer.record(row('full'));
    await writer.flush();
    expect((await sumUsage(database.db, { entity: 'acme', project: 'full' }))[0].requests).toBe(2);
    await writer.close();
  });

  it('drops a row the database refuses and writes the rest of its batch', async () => {
    const writer = new UsageWriter(database.db, log, { flushIntervalMs: 60_000, embedded: database.embedded });
    writer.record(row('poison', { api_key_id: 'not-a-uuid' }));
    writer.record(row('poison'));
    await writer.close();
    expect(errors.at(-1)).toMatchObject({ row: { api_key_id: 'not-a-uuid' } });
    expect((await sumUsage(database.db, { entity: 'acme', project: 'poison' }))[0].requests).toBe(1);
  });

  it('writes every value as it was recorded: tabs, newlines, backslashes, quotes, any Unicode and nulls (COPY on the embedded database)', async () => {
    const writer = new UsageWriter(database.db, log, { flushIntervalMs: 60_000, embedded: database.embedded });
    const odd = 'a\tb\nc\r\\N \\. "q" \'s\' é ✓ 🚀 \\';
    const created = new Date('2026-11-24T09:30:00.123Z');
    writer.record(row('copy-values', { request_id: odd, model: `team/p/${odd}`, trained_model: odd, checkpoint_step: 7, error_code: null, time_to_first_token_ms: null, created_at: created, stream: true, estimated: true }));
    writer.record(row('copy-values', { request_id: '\\N', model: '\\.', trained_model: '', created_at: created }));
    await writer.close();
    const rows = await database.db
      .selectFrom('usage_records')
      .select(['request_id', 'model', 'trained_model', 'checkpoint_step', 'error_code', 'time_to_first_token_ms', 'created_at', 'stream', 'estimated'])
      .where('project', '=', 'copy-values')
      .orderBy('id')
      .execute();
    expect(rows).toEqual([
      { request_id: odd, model: `team/p/${odd}`, trained_model: odd, checkpoint_step: 7, error_code: null, time_to_first_token_ms: null, created_at: created, stream: true, estimated: true },
      { request_id: '\\N', model: '\\.', trained_model: '', checkpoint_step: null, error_code: null, time_to_first_token_ms: 2, created_at: created, stream: false, estimated: false },
    ]);
  });

  it('keeps its rows for the next flush while the database is away, within its buffer limit', async () => {
    // A server that is not there: port 1 refuses connections.
    const away = new Kysely<Database>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: 'postgres://nobody@127.0.0.1:1/none' }) }) });
    const failing = new UsageWriter(away, log, { flushIntervalMs: 60_000, maxBuffered: 2 });
    for (let i = 0; i < 3; i++) failing.record(row('away'));
    await failing.flush();
    expect(errors.at(-1)).toMatchObject({ rows: 3, dropped: 1 });
    failing.record(row('away'));
    await failing.flush();
    expect(errors.at(-1)).toMatchObject({ rows: 3, dropped: 1 });
    await away.destroy();
  });
});
