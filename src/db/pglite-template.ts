import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PgliteWorker, pgliteVersion } from './pglite-worker.js';

/**
 * A new embedded database costs PGlite an initdb: 2 s on 2 quiet cores, 7 s with a busy disk. Loading
 * the same data directory from a tarball costs about 1 s (docs/benchmarks.md, "Start"). The build (`npm run build`) writes that tarball once per
 * PGlite release, taken from a fresh instance before anything was done to it, and a first start on an
 * empty data directory loads it; migrations then run on it as on an initdb'd one. The tarball depends on
 * nothing but PGlite's release, which its name carries: one from another release is never loaded.
 */

/** dist/ when this module runs compiled, the checkout's dist/ when it runs from its TypeScript source (tsx). */
function distDir(): string {
  const codeRoot = fileURLToPath(new URL('../..', import.meta.url));
  return path.basename(codeRoot) === 'dist' ? codeRoot : path.join(codeRoot, 'dist');
}

/** Where the build keeps the initdb tarball of the installed PGlite release. */
export function initdbTemplatePath(dir = path.join(distDir(), 'pglite-template')): string {
  return path.join(dir, `${pgliteVersion()}.tar.gz`);
}

/**
 * The tarball to start the data directory at `pgdataPath` from: the template when the directory holds
 * no database yet and the template exists; undefined otherwise (PGlite opens the database there, or
 * runs initdb).
 */
export function initdbTemplateFor(pgdataPath: string, template: string | undefined): Blob | undefined {
  if (template === undefined || fs.existsSync(path.join(pgdataPath, 'PG_VERSION'))) return undefined;
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(template);
  } catch {
    return undefined;
  }
  // The type makes PGlite gunzip it.
  return new Blob([bytes], { type: 'application/gzip' });
}

/**
 * Writes the initdb tarball of the installed PGlite release to `file`, unless it is there already;
 * tarballs of other releases beside it are removed. Returns whether it wrote one.
 */
export async function writeInitdbTemplate(file = initdbTemplatePath()): Promise<boolean> {
  if (fs.existsSync(file)) return false;
  const dir = path.dirname(file);
  fs.mkdirSync(dir, { recursive: true });
  for (const other of fs.readdirSync(dir)) {
    if (other.endsWith('.tar.gz')) fs.rmSync(path.join(dir, other), { force: true });
  }
  const pglite = await PgliteWorker.open({});
  try {
    // Everything in the tarball is then in the data files, none of it only in the write-ahead log.
    await pglite.query('checkpoint');
    const tarball = await pglite.dumpDataDir('gzip');
    const partial = `${file}.${process.pid}.partial`;
    fs.writeFileSync(partial, Buffer.from(await tarball.arrayBuffer()));
    fs.renameSync(partial, file);
  } finally {
    await pglite.close();
  }
  return true;
}
