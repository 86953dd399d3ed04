import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';
import { basicAuth } from './helpers.js';

/** Malformed multipart uploads to /file/create are the client's error: 400 `{"reason"}`, nothing stored. */

let app: App;
let user: TestUser;
let project: string;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('files')}`;
  // A key's first use records its last-use time; make it here so the fingerprints compare refusals only.
  await app.inject({ method: 'POST', url: '/traces/file/create', headers: { authorization: basicAuth(user.key) } });
});
afterAll(async () => {
  await app.close();
});

const BOUNDARY = '----trainyard-upload';
const fieldPart = (boundary: string) => `--${boundary}\r\nContent-Disposition: form-data; name="project_id"\r\n\r\n${project}\r\n`;
const fileHead = (boundary: string) =>
  `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="notes.txt"\r\nContent-Type: text/plain\r\n\r\n`;

async function upload(url: string, contentType: string, body: string) {
  return app.inject({ method: 'POST', url, headers: { authorization: basicAuth(user.key), 'content-type': contentType }, payload: body });
}

const reason = (why: string) => ({
  reason: `Malformed multipart body (${why}): send multipart/form-data with a boundary parameter, fields project_id and file, each part complete, and the closing boundary.`,
});
const CUT = 'Unexpected end of multipart data';
const WITH_BOUNDARY = `multipart/form-data; boundary=${BOUNDARY}`;
const complete = (boundary: string) => `${fieldPart(boundary)}${fileHead(boundary)}hello\r\n--${boundary}--\r\n`;

/** [what, content type, body, why] */
const cases: [string, string, () => string, string][] = [
  ['a content type without a boundary', 'multipart/form-data', () => complete(BOUNDARY), 'Multipart: Boundary not found'],
  ['a body without its closing boundary', WITH_BOUNDARY, () => `${fieldPart(BOUNDARY)}${fileHead(BOUNDARY)}hello\r\n`, CUT],
  ['a boundary that does not match the body\'s', 'multipart/form-data; boundary=something-else', () => complete(BOUNDARY), CUT],
  ['a file part cut short', WITH_BOUNDARY, () => `${fieldPart(BOUNDARY)}${fileHead(BOUNDARY)}hel`, CUT],
  ['a part cut short in its headers', WITH_BOUNDARY, () => `${fieldPart(BOUNDARY)}--${BOUNDARY}\r\nContent-Disposition: form-da`, CUT],
  ['a boundary parameter past what the parser takes', `multipart/form-data; boundary=${'b'.repeat(300)}`, () => complete('b'.repeat(300)), 'boundary parameter too long'],
  ['a field part cut short', WITH_BOUNDARY, () => `--${BOUNDARY}\r\nContent-Disposition: form-data; name="project_id"\r\n\r\n${project.slice(0, 3)}`, CUT],
];

describe('a malformed multipart upload', () => {
  for (const url of ['/traces/file/create', '/traces/files/create']) {
    for (const [what, contentType, body, why] of cases) {
      it(`${url}: ${what} is a 400 that stores nothing`, async () => {
        const before = await databaseFingerprint(app);
        const response = await upload(url, contentType, body());
        expect([response.statusCode, response.json()]).toEqual([400, reason(why)]);
        expect(await databaseFingerprint(app)).toEqual(before);
      });
    }
  }
});

it('the same upload, well formed, is stored', async () => {
  const response = await upload('/traces/file/create', WITH_BOUNDARY, complete(BOUNDARY));
  expect([response.statusCode, Object.keys(response.json())]).toEqual([200, ['digest']]);
});
