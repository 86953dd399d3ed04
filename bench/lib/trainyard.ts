import fs from 'node:fs';
import inspector from 'node:inspector';
import os from 'node:os';
import path from 'node:path';
import { buildApp } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';

/**
 * trainyard itself on a fresh embedded database, with one backend pointing at UPSTREAM and one user.
 * Prints `{"port":N,"key":"..."}` when listening.
 */
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-bench-'));
const backends = path.join(dir, 'backends.json');
fs.writeFileSync(
  backends,
  JSON.stringify({ backends: [{ name: 'bench', kind: 'openai-compatible', replicas: [process.env.UPSTREAM], models: ['bench/model'] }] }),
);
const config = loadConfig({
  ...process.env,
  DATA_DIR: path.join(dir, 'data'),
  LOG_LEVEL: 'silent',
  BOOTSTRAP_ADMIN: 'false',
  BACKENDS_FILE: backends,
  HOST: '127.0.0.1',
  PORT: '0',
});
const app = await buildApp(config);
await app.auth.createUser({ username: 'bench' });
const { key } = await app.auth.createKey({ username: 'bench' });
await app.listen({ host: '127.0.0.1', port: 0 });
const address = app.server.address() as import('node:net').AddressInfo;
console.log(JSON.stringify({ port: address.port, key }));

// PROFILE=file.cpuprofile: a CPU profile of the serving phase only (start-up excluded).
const profile = process.env.PROFILE;
const session = profile ? new inspector.Session() : undefined;
if (session) {
  session.connect();
  await new Promise((resolve) => session.post('Profiler.enable', () => session.post('Profiler.start', resolve)));
}

const stop = async () => {
  if (session) {
    await new Promise<void>((resolve) =>
      session.post('Profiler.stop', (error, result) => {
        if (!error) fs.writeFileSync(profile!, JSON.stringify(result.profile));
        resolve();
      }),
    );
  }
  await app.close();
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
