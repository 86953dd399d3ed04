import net from 'node:net';
import { Worker } from 'node:worker_threads';

/**
 * A loopback port whose TCP handshakes hang: a listener in a worker thread that is blocked, so it
 * never accepts, with its accept queue filled. New connections then wait in SYN-SENT, which is what
 * an engine host that dropped off the network looks like. External "unroutable" addresses are no use
 * in tests: sandboxes and proxies answer them.
 */
export async function startBlackhole(): Promise<{ url: string; close(): Promise<void> }> {
  const gate = new Int32Array(new SharedArrayBuffer(4));
  const worker = new Worker(
    `const { parentPort, workerData } = require('node:worker_threads');
     const server = require('node:net').createServer();
     server.listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {
       parentPort.postMessage(server.address().port);
       // Block this thread so it never accepts; the main thread releases it when done.
       Atomics.wait(workerData, 0, 0, 30000);
       server.close();
       process.exit(0);
     });`,
    { eval: true, workerData: gate },
  );
  const port = await new Promise<number>((resolve) => worker.once('message', resolve));
  const fillers: net.Socket[] = [];
  // Fill the accept queue: stop once a handshake no longer completes.
  for (let i = 0; i < 16; i++) {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('error', () => undefined);
    fillers.push(socket);
    const connected = await new Promise<boolean>((resolve) => {
      socket.once('connect', () => resolve(true));
      setTimeout(() => resolve(false), 200);
    });
    if (!connected) break;
  }
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      for (const socket of fillers) socket.destroy();
      Atomics.notify(gate, 0);
      await new Promise((resolve) => worker.once('exit', resolve));
    },
  };
}
