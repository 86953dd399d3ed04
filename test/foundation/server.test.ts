import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { closeGracefully } from '../../src/server.js';
import { createTestApp } from '../helpers/app.js';
import { listen } from '../helpers/listen.js';
import { onPostgresServer } from '../helpers/database.js';
import { startScript } from '../helpers/processes.js';

describe('graceful shutdown', () => {
  it('lets an in-flight request finish and refuses new connections', async () => {
    let release!: () => void;
    const started = new Promise<void>((resolve) => {
      const app = createTestApp({}, (a) => {
        a.get('/v1/probe/slow', { config: { auth: 'none' } }, async () => {
          resolve();
          await new Promise<void>((r) => (release = r));
          return { finished: true };
        });
      });
      void app.then(async (built) => {
        const url = await listen(built);
        inFlight = fetch(`${url}/v1/probe/slow`).then(async (r) => ({ status: r.status, body: await r.json() }));
        await started;
        closing = closeGracefully(built, 10_000);
        // Give close() a moment to stop the listener, then try a new connection.
        await new Promise((r) => setTimeout(r, 100));
        refused = fetch(`${url}/v1/health`).then(
          () => false,
          () => true,
        );
        setTimeout(() => release(), 300);
      });
    });
    let inFlight!: Promise<{ status: number; body: unknown }>;
    let closing!: Promise<void>;
    let refused!: Promise<boolean>;
    await started;
    await new Promise((r) => setTimeout(r, 150));
    expect(await refused).toBe(true);
    expect(await inFlight).toEqual({ status: 200, body: { finished: true } });
    await closing;
  });
});

/** A loopback port nothing listens on (it was free a moment ago). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** The real entry point in a child process, as a newcomer runs it. */
describe.skipIf(onPostgresServer)('the server process on its embedded database', () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-proc-'));
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const child of children) child.kill('SIGKILL');
    fs.rmSync(dataDir, { recursive: true, force: true });
  });

  const env = { ...process.env, DATA_DIR: dataDir, PORT: '0', LOG_LEVEL: 'info', DATABASE_URL: '' };

  const start = (script: string, args: string[] = [], extraEnv: Record<string, string> = {}) => startScript(script, args, { ...env, ...extraEnv }, children);

  async function waitFor(read: () => string, pattern: RegExp, timeoutMs = 45_000): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const match = read().match(pattern);
      if (match) return match;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${pattern}; output so far:\n${read()}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  it('starts, prints a working admin key once, keeps a second process out, serves the CLI, and stops on SIGTERM', async () => {
    const server = start('src/main.ts');
    const [, key, url] = await waitFor(server.out, /\n {4}(ty_\w+)\n[\s\S]*?Try: curl -H "Authorization: Bearer ty_\w+" (http:\/\/127\.0\.0\.1:\d+)\/v1\/system-check/);
    expect(fs.readFileSync(path.join(dataDir, 'admin-api-key'), 'utf8').trim()).toBe(key);
    expect(fs.statSync(path.join(dataDir, 'admin-api-key')).mode & 0o777).toBe(0o600);

    const check = await fetch(`${url}/v1/system-check`, { headers: { authorization: `Bearer ${key}` } });
    const body = (await check.json()) as Record<string, { success: boolean }>;
    expect(Object.keys(body).sort()).toEqual(['api', 'cpu_queue', 'database', 'gpu_queue']);
    expect(body.database.success).toBe(true);

    const second = start('src/main.ts');
    expect(await second.exited).toBe(1);
    expect(second.err()).toContain(`trainyard: The data directory ${dataDir} is in use by another trainyard process`);

    // The CLI cannot open the held directory, so it goes through the server's admin API, at the address the
    // server recorded there (it took a free port: the CLI's own PORT=0 names none).
    expect(fs.readFileSync(path.join(dataDir, 'server-url'), 'utf8')).toBe(`${url}\n`);
    const cli = start('src/cli/main.ts', ['users', 'create', 'carol']);
    expect(await cli.exited).toBe(0);
    expect(JSON.parse(cli.out())).toMatchObject({ username: 'carol', entity: 'carol', is_admin: false });
    for (const args of [['teams', 'create', 'crew'], ['teams', 'add-member', 'crew', 'carol']]) expect(await start('src/cli/main.ts', args).exited).toBe(0);
    const teamsCli = start('src/cli/main.ts', ['teams', 'list']);
    expect(await teamsCli.exited).toBe(0);
    expect(JSON.parse(teamsCli.out()).data).toEqual([{ id: expect.any(String), name: 'crew', created_at: expect.any(String), members: [{ username: 'carol', role: 'member' }] }]);
    const keyCli = start('src/cli/main.ts', ['keys', 'create', 'carol', '--kind', 'worker'], { TRAINYARD_URL: url });
    expect(await keyCli.exited).toBe(0);
    expect(JSON.parse(keyCli.out())).toMatchObject({ username: 'carol', kind: 'worker', key: expect.stringMatching(/^ty_/) });
    // A refusal of the server reads as a line, its validation problems named by place.
    const badId = start('src/cli/main.ts', ['keys', 'revoke', 'not-a-uuid'], { TRAINYARD_URL: url });
    expect(await badId.exited).toBe(1);
    expect(badId.err()).toBe('422: key_id: Input should be a valid UUID\n');
    // Pointed at an address where nothing listens: one line that says where it looked and how to point it elsewhere.
    const nowhere = `http://127.0.0.1:${await closedPort()}`;
    const lost = start('src/cli/main.ts', ['users', 'list'], { TRAINYARD_URL: nowhere });
    expect(await lost.exited).toBe(1);
    expect(lost.err()).toBe(
      `Could not reach the trainyard server holding the data directory at ${nowhere} (connect ECONNREFUSED ${nowhere.slice(7)}). ` +
        'Set TRAINYARD_URL to the address that server listens on (http://host:port).\n',
    );

    // A backup while the server runs: through its admin API, in DATA_DIR/backups.
    const backup = start('src/cli/main.ts', ['backup'], { TRAINYARD_URL: url });
    expect(await backup.exited).toBe(0);
    const backupDir = JSON.parse(backup.out()).path;
    expect(path.dirname(backupDir)).toBe(path.join(dataDir, 'backups'));

    // Compacting rewrites every table: not while a server holds the directory.
    const busy = start('src/cli/main.ts', ['compact'], { TRAINYARD_URL: url });
    expect(await busy.exited).toBe(1);
    expect(busy.err()).toMatch(
      new RegExp(`^A running trainyard \\(pid ${server.child.pid}\\) holds ${dataDir}\\. Stop it first: compact rewrites every table and holds the database until it is done\\.\n$`),
    );

    // Nor is a restore, which replaces its database.
    const restoring = start('src/cli/main.ts', ['restore', backupDir], { TRAINYARD_URL: url });
    expect(await restoring.exited).toBe(1);
    expect(restoring.err()).toBe(`A running trainyard (pid ${server.child.pid}) holds ${dataDir}. Stop it first: restore replaces its database.\n`);

    server.child.kill('SIGTERM');
    expect(await server.exited).toBe(0);
    expect(fs.existsSync(path.join(dataDir, 'trainyard.lock'))).toBe(false);
    expect(fs.existsSync(path.join(dataDir, 'server-url'))).toBe(false);

    // Restarted on the same directory: no new admin key, the data is still there.
    const again = start('src/main.ts');
    await waitFor(again.out, /Server listening at http:\/\/127\.0\.0\.1:\d+/);
    expect(again.out()).not.toContain('Created user "admin"');
    again.child.kill('SIGTERM');
    expect(await again.exited).toBe(0);

    // With no server holding it, the CLI opens the directory itself.
    const list = start('src/cli/main.ts', ['keys', 'list', '--user', 'carol']);
    expect(await list.exited).toBe(0);
    expect(JSON.parse(list.out()).data).toEqual([expect.objectContaining({ username: 'carol', kind: 'worker', last_used_at: null })]);
    const teams = start('src/cli/main.ts', ['teams', 'list']);
    expect(await teams.exited).toBe(0);
    expect(JSON.parse(teams.out()).data.map((team: { name: string; members: unknown[] }) => [team.name, team.members])).toEqual([['crew', [{ username: 'carol', role: 'member' }]]]);

    // Restored from the backup: carol's worker key, made before it, is there.
    const dave = start('src/cli/main.ts', ['users', 'create', 'dave']); // after the backup
    expect(await dave.exited).toBe(0);
    const restore = start('src/cli/main.ts', ['restore', backupDir]);
    expect(await restore.exited).toBe(0);
    expect(JSON.parse(restore.out())).toEqual({
      restored: backupDir,
      pgdata: path.join(dataDir, 'pgdata'),
      previous_pgdata: expect.stringMatching(new RegExp(`^${dataDir}/pgdata\\.before-restore-\\d{4}-`)),
      adapters_restored: 0,
    });
    const restored = start('src/cli/main.ts', ['users', 'list']);
    expect(await restored.exited).toBe(0);
    const usernames = JSON.parse(restored.out()).data.map((user: { username: string }) => user.username);
    expect(usernames).toContain('carol');
    expect(usernames).not.toContain('dave');
    expect(restored.err()).toBe('');

    // A restore killed once its copy was whole, before it moved the database aside: the next command completes it.
    const erin = start('src/cli/main.ts', ['users', 'create', 'erin']);
    expect(await erin.exited).toBe(0);
    fs.cpSync(path.join(backupDir, 'pgdata'), path.join(dataDir, 'pgdata.restored'), { recursive: true });
    const completed = start('src/cli/main.ts', ['users', 'list']);
    expect(await completed.exited).toBe(0);
    expect(completed.err()).toMatch(
      new RegExp(`^trainyard: completed a restore that was interrupted once its copy of the backup was whole \\(the database it replaced: ${dataDir}/pgdata\\.before-restore-\\d{4}-[^)]+\\)\n$`),
    );
    expect(JSON.parse(completed.out()).data.map((user: { username: string }) => user.username)).not.toContain('erin');

    const onServer = start('src/cli/main.ts', ['compact'], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/trainyard' });
    expect(await onServer.exited).toBe(1);
    expect(onServer.err()).toBe('compact rewrites the embedded database in DATA_DIR; on a PostgreSQL server run VACUUM FULL there.\n');
    const backupOnServer = start('src/cli/main.ts', ['backup'], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/trainyard' });
    expect(await backupOnServer.exited).toBe(1);
    expect(backupOnServer.err()).toBe("backup copies the embedded database in DATA_DIR; back up a PostgreSQL server with pg_dump or the server's own tools.\n");
    const restoreOnServer = start('src/cli/main.ts', ['restore', backupDir], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/trainyard' });
    expect(await restoreOnServer.exited).toBe(1);
    expect(restoreOnServer.err()).toBe('restore puts back a backup of the embedded database in DATA_DIR; DATABASE_URL names a PostgreSQL server.\n');
    // With no server running the CLI copies the directory itself.
    const offline = start('src/cli/main.ts', ['backup']);
    expect(await offline.exited).toBe(0);
    expect(fs.readdirSync(JSON.parse(offline.out()).path).sort()).toEqual(['backup.json', 'pgdata']);
    const compacted = start('src/cli/main.ts', ['compact']);
    expect(await compacted.exited).toBe(0);
    const sizes = JSON.parse(compacted.out());
    expect(sizes).toEqual({ database_bytes_before: expect.any(Number), database_bytes_after: expect.any(Number) });
    expect(sizes.database_bytes_after).toBeLessThanOrEqual(sizes.database_bytes_before);
  }, 120_000);

  it('stops cleanly on a SIGTERM that arrives while it is still starting', async () => {
    const freshDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-proc-'));
    try {
      const server = start('src/main.ts', [], { DATA_DIR: freshDir });
      // The lock is taken while the database opens, before the migrations run and long before it listens.
      const lock = path.join(freshDir, 'trainyard.lock');
      let ended = false;
      void server.exited.then(() => (ended = true));
      while (!fs.existsSync(lock)) {
        if (ended) throw new Error(`the server exited before taking the lock:\n${server.err()}`);
        await new Promise((r) => setTimeout(r, 5));
      }
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
      expect(server.out()).toMatch(/Web UI: http:\/\/127\.0\.0\.1:\d+\/ui\//);
      expect(server.out()).toContain('"msg":"stopped"');
      expect(fs.existsSync(lock)).toBe(false);
      // The admin created on the way up is kept, with its key file, and the next start finds both.
      expect(fs.readFileSync(path.join(freshDir, 'admin-api-key'), 'utf8')).toMatch(/^ty_\w+\n?$/);
    } finally {
      fs.rmSync(freshDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('exits at once on a second signal while it is still starting', async () => {
    // A database server that accepts connections and never answers: the start waits on it.
    const sockets: net.Socket[] = [];
    const silent = net.createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const connected = new Promise<void>((resolve) => silent.once('connection', () => resolve()));
    try {
      const { port } = silent.address() as net.AddressInfo;
      const server = start('src/main.ts', [], { DATABASE_URL: `postgres://nobody@127.0.0.1:${port}/none`, DATABASE_POOL_TIMEOUT_MS: '120000' });
      // It connects from main(), after its signal handlers are in place.
      await Promise.race([connected, server.exited.then(() => Promise.reject(new Error(`the server exited:\n${server.err()}`)))]);
      server.child.kill('SIGTERM');
      await waitFor(server.err, /SIGTERM while starting/);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(1);
      expect(server.err()).toBe(
        'trainyard: SIGTERM while starting: stopping once started (send it again to exit now)\n' + 'trainyard: SIGTERM again while starting: exiting now\n',
      );
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  }, 60_000);

  it('exits at once on a second signal while it is stopping', async () => {
    const freshDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-proc-'));
    const client = new net.Socket();
    try {
      const server = start('src/main.ts', [], { DATA_DIR: freshDir, SHUTDOWN_GRACE_MS: '600000' });
      const [, url] = await waitFor(server.out, /Web UI: (http:\/\/[\d.:]+)\/ui\//);
      // A request whose body never finishes: the graceful stop waits on it for the whole grace period.
      const { hostname, port } = new URL(url);
      await new Promise<void>((resolve) => client.connect(Number(port), hostname, resolve));
      client.write('POST /v1/preview/models HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{');
      await new Promise((r) => setTimeout(r, 200));
      server.child.kill('SIGTERM');
      await waitFor(server.out, /"msg":"shutting down"/);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(1);
      expect(server.err()).toBe('trainyard: SIGTERM again while stopping: exiting now\n');
    } finally {
      client.destroy();
      fs.rmSync(freshDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('refuses to start on an invalid setting, naming it', async () => {
    const bad = start('src/main.ts', [], { PORT: 'eighty' });
    expect(await bad.exited).toBe(1);
    expect(bad.err()).toBe('trainyard: Invalid configuration:\n  PORT="eighty": must be an integer from 0 to 65535\n');
  });

  it('answers --help with the usage, and an unknown option or a stray argument with a usage error', async () => {
    // Help needs no configuration: it shows while a setting is wrong.
    const help = start('src/cli/main.ts', ['--help'], { PORT: 'eighty' });
    expect(await help.exited).toBe(0);
    expect(help.out()).toMatch(/^Usage: npm run cli -- <command>\n/);
    expect(help.err()).toBe('');

    const unknown = start('src/cli/main.ts', ['users', 'list', '--bogus']);
    expect(await unknown.exited).toBe(2);
    expect(unknown.err()).toMatch(/^Unknown option '--bogus'\. [^\n]*\n\nUsage: npm run cli -- <command>\n/);

    const stray = start('src/cli/main.ts', ['migrate', 'extra']);
    expect(await stray.exited).toBe(2);
    expect(stray.err()).toMatch(/^Usage: npm run cli -- <command>\n/);
    expect(stray.out()).toBe('');
  });

  it('names the setting that could not be used at start, without a stack trace', async () => {
    const file = path.join(dataDir, 'a-file');
    fs.writeFileSync(file, '');
    const notADirectory = start('src/main.ts', [], { DATA_DIR: file });
    expect(await notADirectory.exited).toBe(1);
    expect(notADirectory.err()).toBe(`trainyard: failed to start: DATA_DIR=${file}: EEXIST: file already exists, mkdir '${file}'\n`);

    const noServer = start('src/main.ts', [], { DATA_DIR: path.join(dataDir, 'unused'), DATABASE_URL: 'postgres://someone:secret@127.0.0.1:1/trainyard' });
    expect(await noServer.exited).toBe(1);
    expect(noServer.err()).toBe('trainyard: failed to start: DATABASE_URL=postgres://someone:***@127.0.0.1:1/trainyard: connect ECONNREFUSED 127.0.0.1:1\n');
    // The CLI opens the database the same way, and says the same.
    const cliNoServer = start('src/cli/main.ts', ['users', 'list'], { DATABASE_URL: 'postgres://someone:secret@127.0.0.1:1/trainyard' });
    expect(await cliNoServer.exited).toBe(1);
    expect(cliNoServer.err()).toBe('DATABASE_URL=postgres://someone:***@127.0.0.1:1/trainyard: connect ECONNREFUSED 127.0.0.1:1\n');

    const missing = path.join(dataDir, 'no-such-backends.json');
    const noBackends = start('src/main.ts', [], { DATA_DIR: path.join(dataDir, 'backends'), BACKENDS_FILE: missing });
    expect(await noBackends.exited).toBe(1);
    expect(noBackends.err()).toMatch(new RegExp(`^trainyard: failed to start: Invalid backends file ${missing}:\n  [^\n]+\n$`));

    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as net.AddressInfo).port;
    try {
      const busy = start('src/main.ts', [], { DATA_DIR: path.join(dataDir, 'busy'), PORT: String(port) });
      expect(await busy.exited).toBe(1);
      expect(busy.err()).toBe(`trainyard: failed to start: HOST=127.0.0.1 PORT=${port}: cannot listen: listen EADDRINUSE: address already in use 127.0.0.1:${port}\n`);
    } finally {
      taken.close();
    }
  });
});
