import fs from 'node:fs';
import inspector from 'node:inspector';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
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
  // The proxies log nothing; BENCH_LOG_LEVEL=info shows what the default level's two lines a request cost.
  LOG_LEVEL: process.env.BENCH_LOG_LEVEL ?? 'silent',
  BOOTSTRAP_ADMIN: 'false',
  BACKENDS_FILE: backends,
  HOST: '127.0.0.1',
  PORT: '0',
});
// Log lines go to a file (stdout carries the ready line), written synchronously as pino writes stdout.
const app = await buildApp(config, { logStream: pino.destination({ dest: path.join(dir, 'server.log'), sync: true }) });
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
