import { buildApp, type App, type AppDeps } from './app.js';
import { isSystemError, localAddress, StartError, type Config } from './config.js';
import { forgetServerUrl, recordServerUrl } from './server-address.js';

export interface RunningServer {
  app: App;
  /** http://host:port of the listening socket. */
  url: string;
  /** The bootstrap admin key, when this start created it (empty database). */
  adminKey?: { key: string; file: string };
  /** Stops accepting, lets in-flight requests finish within the grace period, closes the database. */
  shutdown(): Promise<void>;
}

/** Builds the app, creates the first admin on an empty database, and listens. */
export async function startServer(config: Config, deps: AppDeps = {}): Promise<RunningServer> {
  const app = await buildApp(config, deps);
  // The embedded database's holder records where it listens, for the CLI (src/server-address.ts).
  const embedded = app.database.kind === 'pglite' && app.database.dataDir !== undefined;
  let adminKey: RunningServer['adminKey'];
  try {
    if (embedded) {
      forgetServerUrl(config.dataDir);
      app.addHook('onClose', async () => forgetServerUrl(config.dataDir));
    }
    if (config.bootstrapAdmin) adminKey = await app.auth.bootstrapAdmin(config.dataDir);
    await app.listen({ port: config.port, host: config.host }).catch((error: unknown) => {
      throw isSystemError(error) ? new StartError(`HOST=${config.host} PORT=${config.port}: cannot listen`, error) : error;
    });
  } catch (error) {
    await app.close();
    throw error;
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  if (embedded) recordServerUrl(config.dataDir, `http://${localAddress(config.host)}:${port}`);
  let closing: Promise<void> | undefined;
  return {
    app,
    url: `http://${host}:${port}`,
    adminKey,
    shutdown: () => (closing ??= closeGracefully(app, config.shutdownGraceMs)),
  };
}

/**
 * app.close() stops the listener, answers new requests on open connections with 503, closes idle
 * keep-alive connections and waits for in-flight requests. A connection whose request finishes during
 * the close stays open as keep-alive, so idle connections are closed again every 100 ms. Past the grace
 * period the remaining connections are cut so the process can still close the database and exit.
 */
export async function closeGracefully(app: App, graceMs: number): Promise<void> {
  const sweep = setInterval(() => app.server.closeIdleConnections(), 100);
  const timer = setTimeout(() => {
    app.log.warn({ graceMs }, 'grace period over: closing the remaining connections');
    app.server.closeAllConnections();
  }, graceMs);
  try {
    await app.close();
  } finally {
    clearInterval(sweep);
    clearTimeout(timer);
  }
}
