import type { App } from '../../src/app.js';

/** Listens on a free loopback port so real HTTP clients and SDKs can reach the app; returns its base URL. */
export async function listen(app: App): Promise<string> {
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (!address || typeof address === 'string') throw new Error('app is not listening on a TCP port');
  return `http://127.0.0.1:${address.port}`;
}
