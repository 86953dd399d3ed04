import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import type { PGliteOptions } from '@electric-sql/pglite';
import { DatabaseUnavailable } from './faults.js';
import { NUMBER_TYPE_OIDS } from './types.js';

/**
 * PGlite runs PostgreSQL as WebAssembly in the thread that calls it: every statement's execution would
 * block the server's event loop. So the one embedded instance lives in a worker thread, and this
 * process only posts it statements and reads back their results (structured clones: Date, number,
 * JSON values and Uint8Array for bytea arrive as PGlite made them).
 *
 * The worker's source is plain JavaScript evaluated by Node (no TypeScript loader, no file to ship
 * beside the compiled code), so it runs the same under tsx, vitest and dist/. It cannot be sent
 * functions: it builds the type parsers from the type OIDs src/db/types.ts lists.
 */
const WORKER_SOURCE = String.raw`
const { parentPort, workerData } = require('node:worker_threads');

function toWire(error) {
  if (!(error instanceof Error)) {
    // PGlite's WebAssembly exit is thrown as a plain object with a message ({name: 'ExitStatus', status}).
    const message = error !== null && typeof error === 'object' && typeof error.message === 'string' ? error.message : String(error);
    return { name: 'Error', message, fields: {} };
  }
  const fields = {};
  for (const [key, value] of Object.entries(error)) {
    if (key === 'name' || key === 'message' || key === 'stack') continue;
    if (value === undefined || ['string', 'number', 'boolean'].includes(typeof value)) fields[key] = value;
  }
  return { name: error.name, message: error.message, stack: error.stack, fields };
}

let pglite;
const opened = (async () => {
  const { PGlite } = await import(workerData.entry);
  const parsers = {};
  for (const oid of workerData.numberTypes) parsers[oid] = (value) => Number(value);
  pglite = await PGlite.create({
    dataDir: workerData.dataDir,
    loadDataDir: workerData.loadDataDir,
    parsers,
    pgliteWasmModule: workerData.pgliteWasmModule,
    initdbWasmModule: workerData.initdbWasmModule,
    fsBundle: workerData.fsBundle,
  });
})();
opened.catch(() => undefined); // reported to whoever waits on 'open'

async function run(message) {
  switch (message.op) {
    case 'open':
      return opened;
    case 'query': {
      const options = message.blob === undefined ? undefined : { blob: new Blob([message.blob]) };
      const { rows, fields, affectedRows } = await pglite.query(message.text, message.params, options);
      return { rows, fields, affectedRows };
    }
    case 'dump': {
      const tarball = await pglite.dumpDataDir(message.compression);
      return new Uint8Array(await tarball.arrayBuffer());
    }
    case 'close':
      return pglite.close();
    default:
      throw new Error('unknown operation ' + message.op);
  }
}

// One statement at a time, in the order they were posted.
let queue = Promise.resolve();
parentPort.on('message', (message) => {
  queue = queue.then(async () => {
    try {
      const result = await run(message);
      parentPort.postMessage({ id: message.id, ok: true, result });
    } catch (error) {
      parentPort.postMessage({ id: message.id, ok: false, error: toWire(error) });
    }
  });
});
`;

interface WireError {
  name: string;
  message: string;
  stack?: string;
  fields: Record<string, unknown>;
}

type Reply = { id: number; ok: true; result: unknown } | { id: number; ok: false; error: WireError };

export interface QueryResult<T> {
  rows: T[];
  fields: { name: string; dataTypeID: number }[];
  affectedRows?: number;
}

const BUILTIN_ERRORS: Record<string, ErrorConstructor> = { RangeError, TypeError, SyntaxError, ReferenceError, EvalError, URIError };

/**
 * The worker's error as this thread sees it: the same class for JavaScript's own errors (a RangeError
 * stays one) and every field PostgreSQL set (code, detail, constraint, table, column, schema, severity,
 * position, hint, where...), which structured cloning would drop.
 */
function fromWire(wire: WireError): Error {
  const error = new (BUILTIN_ERRORS[wire.name] ?? Error)(wire.message);
  if (error.name !== wire.name) error.name = wire.name; // PostgreSQL's errors are named 'error'
  Object.assign(error, wire.fields);
  if (wire.stack) error.stack = wire.stack;
  return error;
}

/** A compiled WebAssembly module, and the runtime's WebAssembly (the project's TypeScript libraries do not declare it). */
type WasmModule = NonNullable<PGliteOptions['pgliteWasmModule']>;
const wasm = (globalThis as unknown as { WebAssembly: { compile(bytes: Uint8Array): Promise<WasmModule> } }).WebAssembly;

interface Artifacts {
  entry: string;
  pgliteWasmModule: WasmModule;
  initdbWasmModule: WasmModule;
  fsBundle: Blob;
}

let artifacts: Promise<Artifacts> | undefined;

/** PGlite's CommonJS entry (its ESM entry is the .js twin beside it). */
function pgliteMain(): string {
  return createRequire(import.meta.url).resolve('@electric-sql/pglite');
}

/** The installed PGlite release. */
export function pgliteVersion(): string {
  const manifest = path.join(path.dirname(pgliteMain()), '..', 'package.json');
  return (JSON.parse(readFileSync(manifest, 'utf8')) as { version: string }).version;
}

/**
 * PGlite's entry, its compiled WebAssembly and its file-system bundle, loaded once per process and
 * shared with every worker (a compiled module is posted without recompiling it).
 */
function loadArtifacts(): Promise<Artifacts> {
  artifacts ??= (async () => {
    const main = pgliteMain();
    const dir = path.dirname(main);
    const [pgliteWasm, initdbWasm, bundle] = await Promise.all(
      ['pglite.wasm', 'initdb.wasm', 'pglite.data'].map((file) => fs.readFile(path.join(dir, file))),
    );
    const [pgliteWasmModule, initdbWasmModule] = await Promise.all([wasm.compile(pgliteWasm), wasm.compile(initdbWasm)]);
    return {
      entry: pathToFileURL(main.replace(/\.cjs$/, '.js')).href,
      pgliteWasmModule,
      initdbWasmModule,
      fsBundle: new Blob([bundle]),
    };
  })();
  artifacts.catch(() => {
    artifacts = undefined;
  });
  return artifacts;
}

/** Waits this long for the instance to close before the worker is stopped regardless. */
const CLOSE_TIMEOUT_MS = 10_000;

/**
 * One PGlite instance in its own worker thread: query, COPY input, dump, close. A worker that dies
 * fails every pending and later statement with DatabaseUnavailable (503), an error without SQLSTATE:
 * EmbeddedPglite probes the instance and reopens its data directory, as for a corrupted one.
 */
export class PgliteWorker {
  private readonly pending = new Map<number, { resolve: (value: unknown) => void; reject: (error: Error) => void }>();
  private nextId = 1;
  private stopped: Error | undefined;
  private closing: Promise<void> | undefined;

  private constructor(private readonly worker: Worker) {
    worker.unref(); // only a pending statement keeps the process alive
    worker.on('message', (reply: Reply) => this.settle(reply));
    worker.on('messageerror', (error) => this.settleOldest(error));
    worker.on('error', (error) => this.stop(new DatabaseUnavailable(`The embedded database's worker thread failed: ${error.message}`)));
    worker.on('exit', (code) => this.stop(new DatabaseUnavailable(`The embedded database's worker thread stopped (exit code ${code}).`)));
  }

  static async open(options: { dataDir?: string; loadDataDir?: Blob }): Promise<PgliteWorker> {
    const { entry, pgliteWasmModule, initdbWasmModule, fsBundle } = await loadArtifacts();
    const worker = new Worker(WORKER_SOURCE, {
      eval: true,
      name: 'pglite',
      workerData: {
        entry,
        numberTypes: NUMBER_TYPE_OIDS,
        dataDir: options.dataDir,
        loadDataDir: options.loadDataDir,
        pgliteWasmModule,
        initdbWasmModule,
        fsBundle,
      },
    });
    const instance = new PgliteWorker(worker);
    try {
      await instance.call({ op: 'open' });
    } catch (error) {
      await worker.terminate();
      throw error;
    }
    return instance;
  }

  query<T = Record<string, unknown>>(text: string, params?: unknown[], options?: { blob?: string }): Promise<QueryResult<T>> {
    return this.call({ op: 'query', text, params, blob: options?.blob }) as Promise<QueryResult<T>>;
  }

  /** A tarball of the data directory (tests keep one as the template of every test database). */
  async dumpDataDir(compression: 'none' | 'gzip' = 'none'): Promise<Blob> {
    return new Blob([(await this.call({ op: 'dump', compression })) as Uint8Array]);
  }

  /** Closes the instance (when the worker still answers) and stops the worker. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (!this.stopped) {
        let timer: NodeJS.Timeout | undefined;
        const timeout = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, CLOSE_TIMEOUT_MS);
        });
        await Promise.race([this.call({ op: 'close' }).catch(() => undefined), timeout]);
        clearTimeout(timer);
      }
      this.stop(new DatabaseUnavailable('The embedded database is closed.'));
      await this.worker.terminate();
    })();
    return this.closing;
  }

  private call(message: Record<string, unknown>): Promise<unknown> {
    if (this.stopped) return Promise.reject(this.stopped);
    const id = this.nextId++;
    const reply = new Promise<unknown>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
    });
    try {
      this.worker.postMessage({ ...message, id }); // throws on a value it cannot clone
    } catch (error) {
      this.pending.delete(id);
      return Promise.reject(error);
    }
    if (this.pending.size === 1) this.worker.ref();
    return reply;
  }

  private settle(reply: Reply): void {
    const waiting = this.pending.get(reply.id);
    if (!waiting) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker.unref();
    if (reply.ok) waiting.resolve(reply.result);
    else waiting.reject(fromWire(reply.error));
  }

  /** A reply that could not be deserialized: the worker answers in order, so it was the oldest's. */
  private settleOldest(error: Error): void {
    const oldest = this.pending.keys().next();
    if (oldest.done) return;
    this.settle({ id: oldest.value, ok: false, error: { name: error.name, message: error.message, stack: error.stack, fields: {} } });
  }

  private stop(reason: Error): void {
    this.stopped ??= reason;
    for (const [id, waiting] of this.pending) {
      this.pending.delete(id);
      waiting.reject(this.stopped);
    }
    this.worker.unref();
  }
}
