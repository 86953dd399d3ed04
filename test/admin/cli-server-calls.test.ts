import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { httpClient } from '../../src/cli/admin-client.js';

/** A server that accepts connections and answers `reply` (nothing by default), never closing them. */
async function stuckServer(reply = ''): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('data', () => socket.write(reply));
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe("the CLI's calls to the server holding DATA_DIR", () => {
  let close: (() => Promise<void>) | undefined;
  afterEach(async () => close?.());

  const stuck = (url: string) =>
    `The trainyard server holding the data directory at ${url} did not answer within 0.2 s. ` +
    'Check that it is running and not stuck, or set TRAINYARD_URL to the address of the server that holds it.';

  it('gives up on a server that accepts the connection and never answers, saying so', async () => {
    const server = await stuckServer();
    close = server.close;
    await expect(httpClient(server.url, 'ty_key', 200).listUsers()).rejects.toThrow(stuck(server.url));
  });

  it('gives up on a server that sends its headers and never finishes the body', async () => {
    const server = await stuckServer('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"data":');
    close = server.close;
    await expect(httpClient(server.url, 'ty_key', 200).listTeams()).rejects.toThrow(stuck(server.url));
  });
});
