import { ConfigError, loadConfig, StartError } from './config.js';
import { migrateOrClose, openDatabase } from './db/index.js';
import { DataDirLockedError } from './db/lock.js';
import { BackendsConfigError } from './inference/backends/config.js';
import type { RunningServer } from './server.js';

async function main(): Promise<void> {
  // The handlers come first: a SIGTERM that arrives while the server starts (the database opening, the
  // migrations, the listener binding) is held until it is up, then stops it like any other. Without them
  // Node's default would kill the process with the data directory's lock and the database half-open.
  // Starting can take long (a migration waiting for a lock, say), and so can stopping (requests given
  // SHUTDOWN_GRACE_MS): a second signal exits at once either way.
  let server: RunningServer | undefined;
  let requested: NodeJS.Signals | undefined;
  const onSignal = (signal: NodeJS.Signals) => {
    if (requested) {
      process.stderr.write(`trainyard: ${signal} again while ${server ? 'stopping' : 'starting'}: exiting now\n`);
      process.exit(1);
    }
    requested = signal;
    if (server) stop(server, signal);
    else process.stderr.write(`trainyard: ${signal} while starting: stopping once started (send it again to exit now)\n`);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  const config = loadConfig();
  // PGlite boots and migrates in a thread of its own (0.4 s on an existing data directory, 1.5 s on a
  // new one): the app's modules load meanwhile (0.6 s). A failure is reported below, once they are in;
  // buildApp then finds every migration applied.
  const opening = openDatabase(config).then(migrateOrClose);
  opening.catch(() => undefined);
  const { startServer } = await import('./server.js');
  server = await startServer(config, { database: await opening });

  if (server.adminKey) {
    process.stdout.write(
      [
        '',
        'Created user "admin" with this API key (shown once; also saved to ' + server.adminKey.file + '):',
        '',
        `    ${server.adminKey.key}`,
        '',
        `Try: curl -H "Authorization: Bearer ${server.adminKey.key}" ${server.url}/v1/system-check`,
        '',
      ].join('\n') + '\n',
    );
  }
  process.stdout.write(`Web UI: ${server.url}/ui/ (sign in with an API key)\n`);
  if (requested) stop(server, requested);
}

function stop(server: RunningServer, signal: NodeJS.Signals): void {
  server.app.log.info({ signal }, 'shutting down');
  server.shutdown().then(
    () => {
      server.app.log.info('stopped');
      process.exit(0);
    },
    (error: unknown) => {
      server.app.log.error({ err: error }, 'shutdown failed');
      process.exit(1);
    },
  );
}

main().catch((error: unknown) => {
  // Configuration and lock problems are the user's to fix: say what, without a stack trace.
  if (error instanceof ConfigError || error instanceof DataDirLockedError) {
    process.stderr.write(`trainyard: ${error.message}\n`);
  } else if (error instanceof StartError || error instanceof BackendsConfigError) {
    process.stderr.write(`trainyard: failed to start: ${error.message}\n`);
  } else {
    process.stderr.write(`trainyard: failed to start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  }
  process.exit(1);
});
