import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { basicAuth } from './helpers.js';

/**
 * The text fields of /file/create (project_id, expected_digest) are bounded as the JSON routes bound the
 * same values: a field past its bound is a 422 naming it, whose echo is cut, and nothing is stored. busboy
 * cuts a field value at 8 KiB without failing; a cut field is refused, never used.
 */

let app: App;
let user: TestUser;
let project: string;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('fields')}`;
  // A key's first use records its last-use time; make it here so the fingerprints compare refusals only.
  await app.inject({ method: 'POST', url: '/traces/file/create', headers: { authorization: basicAuth(user.key) } });
});
afterAll(async () => {
  await app.close();
});

const BOUNDARY = '----trainyard-fields';

function form(fields: Record<string, string>): string {
  const parts = Object.entries(fields).map(([name, value]) => `--${BOUNDARY}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`);
  return `${parts.join('')}--${BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="notes.txt"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--${BOUNDARY}--\r\n`;
}

async function upload(fields: Record<string, string>) {
  return app.inject({
    method: 'POST',
    url: '/traces/file/create',
    headers: { authorization: basicAuth(user.key), 'content-type': `multipart/form-data; boundary=${BOUNDARY}` },
    payload: form(fields),
  });
}

const tooLong = (field: string, max: number, input: string) => ({
  detail: [{ type: 'string_too_long', loc: ['body', field], msg: `String should have at most ${max} characters`, input, ctx: { max_length: max } }],
});

describe('a /file/create field past its bound', () => {
  it('a project_id of 5 MiB is a short 422, not an echo of the part busboy kept', async () => {
    const before = await databaseFingerprint(app);
    const long = 'y'.repeat(5 * 1024 * 1024);
    const response = await upload({ project_id: long });
    expect(response.statusCode).toBe(422);
    // The cut value's JSON, cut again to 2,048 characters for the echo.
    expect(response.json()).toEqual(tooLong('project_id', 512, `${JSON.stringify(long).slice(0, 2048)}…`));
    expect(response.body.length).toBeLessThan(2300);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('a project_id over 512 characters that busboy kept whole is the same 422, with the value', async () => {
    const long = `${user.entity}/${'p'.repeat(600)}`;
    const response = await upload({ project_id: long });
    expect([response.statusCode, response.json()]).toEqual([422, tooLong('project_id', 512, long)]);
  });

  it('an expected_digest over 2,048 characters is a 422, and one cut by busboy too', async () => {
    for (const length of [2049, 9000]) {
      const digest = 'd'.repeat(length);
      const response = await upload({ project_id: project, expected_digest: digest });
      // Both echoes are cut: the JSON of 2,049 characters is already past 2,048.
      expect([length, response.statusCode, response.json()]).toEqual([
        length,
        422,
        tooLong('expected_digest', 2048, `${JSON.stringify(digest).slice(0, 2048)}…`),
      ]);
    }
  });

  it('a long field the route does not read is ignored, as unknown JSON keys are', async () => {
    const response = await upload({ project_id: project, comment: 'c'.repeat(100_000) });
    expect([response.statusCode, Object.keys(response.json())]).toEqual([200, ['digest']]);
  });
});
