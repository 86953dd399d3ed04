import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { lines, post } from './helpers.js';

/**
 * Answers built whole in memory (`/calls/query`, `/refs/read_batch`) hold at most 64 MiB of JSON
 * (TRACING_LIMITS.answerBytes): past it a 400 names the bound, how many items fit and what to do instead,
 * rather than growing until no string holds the answer (a 500). `/calls/stream_query` is not bounded.
 */

let app: App;
let user: TestUser;
appWithUser((made) => ({ app, user } = made));

const MIB = 1024 * 1024;
const CALLS = 70;

describe('/calls/query past 64 MiB of JSON', () => {
  it('answers 400 naming the bound and how many calls fit; a limit within it and stream_query answer', async () => {
    const project = `${user.entity}/${uniqueName('answer')}`;
    // 70 calls of 1 MiB of inputs each, seeded in SQL: about 70 MiB of answer.
    await sql`insert into trace_calls (project_id, id, trace_id, op_name, started_at, ended_at, attributes, inputs, output, summary)
      select ${project}, 'call-' || lpad(g::text, 3, '0'), 'trace-' || g, 'weave:///e/p/op/big:d', timestamptz '2025-01-01' + g * interval '1 s',
        timestamptz '2025-01-01' + g * interval '1 s' + interval '5 ms', '{}'::jsonb, jsonb_build_object('padding', repeat('x', ${MIB})), 'null'::jsonb, '{}'::jsonb
      from generate_series(1, ${CALLS}) g`.execute(app.db);

    const whole = await post(app, user, '/calls/query', { project_id: project, limit: null });
    expect([whole.statusCode, whole.json()]).toEqual([
      400,
      {
        reason:
          'The calls of this query come to more than 64 MiB of JSON (67108864 bytes), the most one /calls/query answer holds; the first 63 fit. ' +
          'Read them with /calls/stream_query (JSON Lines, any number of calls), or page with a smaller limit and offset, or select fewer columns.',
      },
    ]);

    const page = await post(app, user, '/calls/query', { project_id: project, limit: 63, columns: ['id', 'inputs'] });
    expect(page.statusCode).toBe(200);
    const calls = page.json().calls as { id: string; inputs: { padding: string } }[];
    expect(calls.map((c) => c.id)).toEqual(Array.from({ length: 63 }, (_, i) => `call-${String(i + 1).padStart(3, '0')}`));
    expect(calls[62].inputs.padding).toHaveLength(MIB);

    // Fewer columns fit all of them.
    const ids = await post(app, user, '/calls/query', { project_id: project, columns: ['id'] });
    expect([ids.statusCode, ids.json().calls.length]).toEqual([200, CALLS]);

    const stream = await post(app, user, '/calls/stream_query', { project_id: project });
    expect(stream.statusCode).toBe(200);
    const streamed = lines(stream.body) as { id: string; inputs: { padding: string } }[];
    expect(streamed).toHaveLength(CALLS);
    expect(streamed[CALLS - 1]).toMatchObject({ id: `call-0${CALLS}`, inputs: { padding: expect.any(String) } });
  }, 120_000);
});

describe('/refs/read_batch past 64 MiB of JSON', () => {
  it('answers 400 naming the bound and how many values fit; as many refs as fit answer', async () => {
    const project = `${user.entity}/${uniqueName('refs')}`;
    const val = { padding: 'x'.repeat(MIB) };
    const created = await post(app, user, '/obj/create', { obj: { project_id: project, object_id: 'big', val } });
    expect(created.statusCode).toBe(200);
    const ref = `weave:///${project}/object/big:${created.json().digest}`;

    const refused = await post(app, user, '/refs/read_batch', { refs: Array.from({ length: 300 }, () => ref) });
    expect([refused.statusCode, refused.json()]).toEqual([
      400,
      {
        reason:
          'The values of these refs come to more than 64 MiB of JSON (67108864 bytes), the most one /refs/read_batch answer holds; the first 63 fit. ' +
          'Read fewer refs per call.',
      },
    ]);

    const fitting = await post(app, user, '/refs/read_batch', { refs: Array.from({ length: 63 }, () => ref) });
    expect(fitting.statusCode).toBe(200);
    const vals = fitting.json().vals as (typeof val)[];
    expect(vals).toHaveLength(63);
    expect(vals.every((v) => v.padding.length === MIB)).toBe(true);
  }, 120_000);
});
