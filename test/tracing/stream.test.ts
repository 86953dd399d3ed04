import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import http from 'node:http';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { STREAM_BATCH_SIZE } from '../../src/tracing/services/calls.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { basicAuth } from './helpers.js';

const CALLS = 50_000;
const CHANNEL = 'trainyard:tracing:calls-stream-batch';

let app: App;
let user: TestUser;
let project: string;
let baseUrl: string;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('stream')}`;
  // Seeded in SQL: this test is about reading, and 50,000 calls through HTTP would only make it slow.
  await sql`insert into trace_calls (project_id, id, trace_id, op_name, started_at, ended_at, attributes, inputs, output, summary)
    select ${project}, 'call-' || lpad(g::text, 6, '0'), 'trace-' || g, 'weave:///e/p/op/seeded:d', timestamptz '2025-01-01' + g * interval '1 ms',
      timestamptz '2025-01-01' + g * interval '1 ms' + interval '5 ms', '{}'::jsonb,
      jsonb_build_object('i', g, 'padding', repeat('x', 1000)), to_jsonb(g), '{}'::jsonb
    from generate_series(1, ${CALLS}) g`.execute(app.db);
  baseUrl = await listen(app);
}, 120_000);
afterAll(async () => {
  await app.close();
});

describe('/calls/stream_query', () => {
  it('starts answering before it has read all 50,000 calls, and then sends them all in order', async () => {
    let batches = 0;
    const onBatch = () => {
      batches += 1;
    };
    subscribe(CHANNEL, onBatch);
    try {
      const url = new URL('/traces/calls/stream_query', baseUrl);
      const body = JSON.stringify({ project_id: project });
      const result = await new Promise<{ atFirstByte: number; afterPause: number; lines: string[] }>((resolve, reject) => {
        const request = http.request(url, { method: 'POST', headers: { authorization: basicAuth(user.key), 'content-type': 'application/json' } }, (response) => {
          let text = '';
          let atFirstByte = -1;
          let afterPause = -1;
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => {
            text += chunk;
            if (atFirstByte < 0) {
              atFirstByte = batches;
              // Stop reading for a while: the server must stop reading the database too (back-pressure).
              response.pause();
              setTimeout(() => {
                afterPause = batches;
                response.resume();
              }, 500);
            }
          });
          response.on('end', () => resolve({ atFirstByte, afterPause, lines: text.split('\n').filter(Boolean) }));
          response.on('error', reject);
        });
        request.on('error', reject);
        request.end(body);
      });
      const total = Math.ceil(CALLS / STREAM_BATCH_SIZE);
      expect(result.atFirstByte).toBeGreaterThanOrEqual(1);
      expect(result.atFirstByte).toBeLessThan(total / 2);
      expect(result.afterPause).toBeLessThan(total / 2);
      expect(batches).toBeGreaterThanOrEqual(total);
      expect(result.lines).toHaveLength(CALLS);
      const first = JSON.parse(result.lines[0]);
      const last = JSON.parse(result.lines[CALLS - 1]);
      expect([first.id, last.id, last.inputs.i]).toEqual(['call-000001', `call-${String(CALLS).padStart(6, '0')}`, CALLS]);
      // Every call once, in order, across the batches.
      const outOfPlace = result.lines.findIndex((line, i) => !line.startsWith(`{"id":"call-${String(i + 1).padStart(6, '0')}"`));
      expect(outOfPlace).toBe(-1);
    } finally {
      unsubscribe(CHANNEL, onBatch);
    }
  }, 120_000);

  it('honours limit and offset across batches', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/traces/calls/stream_query',
      headers: { authorization: basicAuth(user.key), 'content-type': 'application/json' },
      payload: { project_id: project, offset: 499, limit: 502, columns: ['id'] },
    });
    const ids = response.body.split('\n').filter(Boolean).map((line) => JSON.parse(line).id);
    expect(ids).toHaveLength(502);
    expect([ids[0], ids[501]]).toEqual(['call-000500', 'call-001001']);
  });
});
