import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import { createTestApp, createUserWithKey, uniqueName, type TestUser } from '../helpers/app.js';
import { databaseFingerprint } from '../helpers/tenants.js';

let app: App;
let user: TestUser;
let project: string;

beforeAll(async () => {
  app = await createTestApp();
  user = await createUserWithKey(app);
  project = `${user.entity}/${uniqueName('files')}`;
  // The key's first use stamps last_used_at; do it before the fingerprints are taken.
  await app.inject({ method: 'POST', url: '/traces/calls/query_stats', headers: user.headers, payload: { project_id: project } });
});
afterAll(async () => {
  await app.close();
});

const boundary = 'fuzzboundary';
const part = (name: string, value: string, filename?: string) =>
  `--${boundary}\r\nContent-Disposition: form-data; name="${name}"${filename ? `; filename="${filename}"` : ''}\r\n\r\n${value}\r\n`;

const malformed: [string, string, string][] = [
  ['no boundary parameter', 'multipart/form-data', part('project_id', 'p') + `--${boundary}--\r\n`],
  ['a part cut short (no closing boundary)', `multipart/form-data; boundary=${boundary}`, `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nhalf of it`],
  ['a malformed part header', `multipart/form-data; boundary=${boundary}`, `--${boundary}\r\n${'x'.repeat(20)}\r\n`],
];

describe('a malformed multipart upload to /file/create and /files/create', () => {
  for (const [what, contentType, body] of malformed) {
    it(`answers 400 in the tracing form and stores nothing: ${what}`, async () => {
      const before = await databaseFingerprint(app);
      for (const url of ['/traces/file/create', '/traces/files/create']) {
        const response = await app.inject({
          method: 'POST',
          url,
          headers: { authorization: user.headers.authorization, 'content-type': contentType },
          payload: body.replaceAll('project_id"\r\n\r\np', `project_id"\r\n\r\n${project}`),
        });
        expect([response.statusCode, response.json()]).toEqual([400, { reason: expect.stringMatching(/^Malformed multipart\/form-data body: /) }]);
      }
      expect(await databaseFingerprint(app)).toEqual(before);
    });
  }
});
