import { describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { CallPageEnds } from '../../src/tracing/services/call-pages.js';
import { appWithUser, uniqueName, type TestUser } from '../helpers/app.js';
import { callItems, lines, post } from './helpers.js';

/**
 * Pages of a calls list read by `offset`, as weave's SDK reads `client.get_calls()` (pages of 1,000). In
 * an order by started_at and id, a page that starts where an earlier page of the same list ended starts
 * after where that page's last call was; in any other order, pages count by OFFSET.
 */

let app: App;
let user: TestUser;
appWithUser((made) => ({ app, user } = made));

const newProject = () => `${user.entity}/${uniqueName('pages')}`;

/** c00 to c29, started a second apart. */
const THIRTY = Array.from({ length: 30 }, (_, i) => `c${String(i).padStart(2, '0')}`);
const startOf = (i: number) => new Date(Date.UTC(2025, 0, 1, 0, 0, i)).toISOString();

/** A project holding THIRTY, each call with what `extra` adds. */
async function thirtyCalls(extra: (id: string) => Record<string, unknown> = () => ({})): Promise<string> {
  const project = newProject();
  await upsert(project, THIRTY.map((id, i) => ({ id, started_at: startOf(i), ...extra(id) })));
  return project;
}

async function upsert(project: string, specs: Parameters<typeof callItems>[1][]): Promise<void> {
  const response = await post(app, user, '/call/upsert_batch', { batch: specs.flatMap((spec) => callItems(project, spec)) });
  expect(response.statusCode, response.body).toBe(200);
}

async function streamIds(body: Record<string, unknown>): Promise<string[]> {
  const response = await post(app, user, '/calls/stream_query', body);
  expect(response.statusCode, response.body).toBe(200);
  return lines(response.body).map((call) => call.id as string);
}

async function queryIds(body: Record<string, unknown>): Promise<string[]> {
  const response = await post(app, user, '/calls/query', body);
  expect(response.statusCode, response.body).toBe(200);
  return response.json().calls.map((call: { id: string }) => call.id);
}

/** Every page of `size` from offset 0 until a short page, as the SDK's iterator reads them. */
async function pages(read: (body: Record<string, unknown>) => Promise<string[]>, body: Record<string, unknown>, size: number): Promise<string[]> {
  const ids: string[] = [];
  for (let offset = 0; ; offset += size) {
    const page = await read({ ...body, limit: size, offset });
    ids.push(...page);
    if (page.length < size) return ids;
  }
}

/**
 * 40 calls with ties in every key: four at each start time, missing and mixed JSON values, display names
 * on some, a score feedback on every third.
 */
async function seedMixed(project: string): Promise<void> {
  const values: unknown[] = [3, 1.5, 'b', null, undefined, 10, 'a', 2, { x: 1 }, -1];
  const scores = Array.from({ length: 14 }, (_, i) => ({ project_id: project, weave_ref: `weave:///${project}/call/c${String(i * 3).padStart(2, '0')}`, feedback_type: 'score', payload: { value: i % 4 } }));
  const scored = await post(app, user, '/feedback/batch/create', { batch: scores });
  expect(scored.statusCode, scored.body).toBe(200);
  await upsert(
    project,
    Array.from({ length: 40 }, (_, i) => ({
      id: `c${String(i).padStart(2, '0')}`,
      started_at: new Date(Date.UTC(2025, 0, 1, 0, 0, Math.floor(i / 4))).toISOString(),
      op_name: `weave:///${project}/op/${['a', 'b', 'c'][i % 3]}:d`,
      display_name: i % 5 === 0 ? undefined : `name ${i % 7}`,
      inputs: values[i % values.length] === undefined ? {} : { x: values[i % values.length] },
    })),
  );
}

describe('pages of a calls list read by offset', () => {
  const sorts: [string, unknown][] = [
    ['the default order', undefined],
    ['started_at desc', [{ field: 'started_at', direction: 'desc' }]],
    ['op_name, then started_at desc', [{ field: 'op_name', direction: 'asc' }, { field: 'started_at', direction: 'desc' }]],
    ['a JSON path with missing, null, string and object values, desc', [{ field: 'inputs.x', direction: 'desc' }]],
    ['a JSON path asc, then display_name desc (missing on some)', [{ field: 'inputs.x', direction: 'asc' }, { field: 'display_name', direction: 'desc' }]],
    ['id desc', [{ field: 'id', direction: 'desc' }]],
    ['a feedback payload, missing on most calls', [{ field: 'feedback.[score].payload.value', direction: 'desc' }]],
  ];

  it.each(sorts)('are the whole list, in %s, through stream_query and query', async (_name, sortBy) => {
    const project = newProject();
    await seedMixed(project);
    const body = { project_id: project, ...(sortBy ? { sort_by: sortBy } : {}) };
    const whole = await streamIds(body);
    expect(whole).toHaveLength(40);
    expect(new Set(whole).size).toBe(40);
    expect(await pages(streamIds, body, 7)).toEqual(whole);
    expect(await pages(queryIds, body, 6)).toEqual(whole);
    // The same pages again: each starts after the last call of the page before.
    expect(await pages(streamIds, body, 7)).toEqual(whole);
    // A filtered list is a list of its own.
    const filtered = { ...body, filter: { op_names: [`weave:///${project}/op/b:d`] } };
    const wholeFiltered = await streamIds(filtered);
    expect(wholeFiltered).toHaveLength(13);
    expect(await pages(streamIds, filtered, 4)).toEqual(wholeFiltered);
  });

  it('neither skip a call when calls of earlier pages are deleted, nor repeat one when newer calls arrive first', async () => {
    const project = await thirtyCalls();

    const ascending = { project_id: project, limit: 10 };
    expect(await streamIds({ ...ascending, offset: 0 })).toEqual(THIRTY.slice(0, 10));
    expect((await post(app, user, '/calls/delete', { project_id: project, call_ids: ['c03'] })).statusCode).toBe(200);
    // OFFSET 10 would now start at c11, skipping c10.
    expect(await streamIds({ ...ascending, offset: 10 })).toEqual(THIRTY.slice(10, 20));

    const newestFirst = { project_id: project, limit: 10, sort_by: [{ field: 'started_at', direction: 'desc' }] };
    const descending = THIRTY.filter((id) => id !== 'c03').reverse();
    expect(await queryIds({ ...newestFirst, offset: 0 })).toEqual(descending.slice(0, 10));
    await upsert(project, [{ id: 'newer', started_at: '2025-01-02T00:00:00Z' }]);
    // OFFSET 10 would now start at c20 again, the last call of the page before.
    expect(await queryIds({ ...newestFirst, offset: 10 })).toEqual(descending.slice(10, 20));

    // An offset no page ended at is counted from the start, the new call included.
    expect(await queryIds({ ...newestFirst, offset: 9 })).toEqual(['newer', ...descending].slice(9, 19));
  });
});

describe('pages counted by OFFSET', () => {
  it('in an order by other keys, which change while the list is read: a renamed call neither ends the list nor repeats', async () => {
    const project = await thirtyCalls((id) => ({ display_name: `name ${id}` }));
    const byName = { project_id: project, limit: 10, sort_by: [{ field: 'display_name', direction: 'asc' }] };
    expect(await streamIds({ ...byName, offset: 0 })).toEqual(THIRTY.slice(0, 10));
    expect((await post(app, user, '/call/update', { project_id: project, call_id: 'c09', display_name: 'zzz' })).statusCode).toBe(200);
    // After c09 as it now sorts there would be nothing; OFFSET 10 is c11 to c20 of the list as it now is.
    expect(await streamIds({ ...byName, offset: 10 })).toEqual(THIRTY.filter((id) => id !== 'c09').slice(10, 20));
  });
});

describe('pages after the page before', () => {
  it('start where its last call was, even when that call has moved since', async () => {
    const project = await thirtyCalls();
    const ascending = { project_id: project, limit: 10 };
    expect(await queryIds({ ...ascending, offset: 0 })).toEqual(THIRTY.slice(0, 10));
    // Its start sent again, later: OFFSET 10 would now start at c11, skipping c10.
    await upsert(project, [{ id: 'c09', started_at: '2025-01-01T01:00:00Z' }]);
    expect(await queryIds({ ...ascending, offset: 10 })).toEqual(THIRTY.slice(10, 20));
    expect(await streamIds({ ...ascending, offset: 20 })).toEqual(THIRTY.slice(20, 30));
  });
});

describe('CallPageEnds', () => {
  it('forgets the least recently used end past its bound, and any end past its age', () => {
    let now = 0;
    const ends = new CallPageEnds(2, 1000, () => now);
    const end = (id: string) => ({ id, startedAt: '2025-01-01T00:00:00.000000Z' });
    ends.set('list', 10, end('a'));
    ends.set('list', 20, end('b'));
    expect(ends.get('list', 10)?.id).toBe('a'); // now the most recently used
    ends.set('other', 10, end('c'));
    expect([ends.get('list', 20)?.id, ends.get('list', 10)?.id, ends.get('other', 10)?.id, ends.size]).toEqual([undefined, 'a', 'c', 2]);
    now = 1001;
    expect([ends.get('list', 10), ends.size]).toEqual([undefined, 1]);
  });
});
