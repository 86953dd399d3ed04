import net from 'node:net';

/**
 * A TCP proxy in front of the real PostgreSQL server, to take it away from an app the way networks
 * do: `down()` refuses connections (a stopped server), `freeze()` holds every byte in both directions
 * on open and new connections (a frozen server or a partition), `up()` and `thaw()` undo them.
 */
export class TcpProxy {
  private server: net.Server;
  private readonly pairs = new Set<{ client: net.Socket; upstream?: net.Socket }>();
  private frozen = false;
  port = 0;

  private constructor(private readonly target: { host: string; port: number }) {
    this.server = this.createServer();
  }

  static async start(target: { host: string; port: number }): Promise<TcpProxy> {
    const proxy = new TcpProxy(target);
    await proxy.listen(0);
    return proxy;
  }

  private createServer(): net.Server {
    return net.createServer((client) => {
      const pair: { client: net.Socket; upstream?: net.Socket } = { client };
      this.pairs.add(pair);
      client.on('error', () => undefined);
      client.on('close', () => {
        pair.upstream?.destroy();
        this.pairs.delete(pair);
      });
      if (this.frozen) client.pause();
      else this.connect(pair);
    });
  }

  private connect(pair: { client: net.Socket; upstream?: net.Socket }): void {
    const upstream = net.connect(this.target.port, this.target.host);
    pair.upstream = upstream;
    upstream.on('error', () => pair.client.destroy());
    upstream.on('close', () => pair.client.destroy());
    pair.client.pipe(upstream);
    upstream.pipe(pair.client);
  }

  private listen(port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, '127.0.0.1', () => {
        this.port = (this.server.address() as net.AddressInfo).port;
        resolve();
      });
    });
  }

  /** A server that is down: nothing listens on the port and open connections are cut. */
  async down(): Promise<void> {
    const closed = new Promise((resolve) => this.server.close(resolve));
    this.dropConnections();
    await closed;
  }

  async up(): Promise<void> {
    this.server = this.createServer();
    await this.listen(this.port);
  }

  freeze(): void {
    this.frozen = true;
    for (const { client, upstream } of this.pairs) {
      client.pause();
      upstream?.pause();
    }
  }

  thaw(): void {
    this.frozen = false;
    for (const pair of this.pairs) {
      if (!pair.upstream) this.connect(pair);
      pair.client.resume();
      pair.upstream?.resume();
    }
  }

  dropConnections(): void {
    for (const { client, upstream } of this.pairs) {
      client.destroy();
      upstream?.destroy();
    }
  }

  async close(): Promise<void> {
    this.dropConnections();
    await new Promise((resolve) => this.server.close(resolve));
  }
}
