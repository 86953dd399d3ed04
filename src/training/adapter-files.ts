import fs from 'node:fs/promises';
import path from 'node:path';
import { ALLOWED_FILES, type AdapterFile } from './adapter-archive.js';
import { localAdapterPath } from './protocol.js';

export interface AdapterFileStat {
  name: string;
  path: string;
  size: number;
  mtimeMs: number;
}

/**
 * The files of a checkpoint's adapter this server can hand out: only the files a PEFT adapter consists of
 * (a trainer's output directory may hold optimizer state or pickles), regular files only (a link is not
 * followed), at most `limitBytes` together, with an adapter_config.json. Otherwise a string completing
 * "The adapter ... is stored at <uri>, " with why not. Export (a tar.gz) and the W&B `lora` artifacts
 * both read checkpoints through this.
 */
export async function listAdapterFiles(uri: string, limitBytes: number): Promise<AdapterFileStat[] | string> {
  const dir = localAdapterPath(uri);
  if (dir === undefined) return 'which is not a path on this server';
  const files: AdapterFileStat[] = [];
  let total = 0;
  for (const name of ALLOWED_FILES) {
    const file = path.join(dir, name);
    const stat = await fs.lstat(file).catch(() => undefined);
    if (!stat?.isFile()) continue;
    total += stat.size;
    if (total > limitBytes) return 'whose files exceed ADAPTER_ARCHIVE_LIMIT_MB';
    files.push({ name, path: file, size: stat.size, mtimeMs: stat.mtimeMs });
  }
  if (!files.some((file) => file.name === 'adapter_config.json')) return 'where this server finds no adapter_config.json';
  return files;
}

/**
 * Writes checked adapter files into a fresh directory `<adaptersDir>/<new checkpoint id>` and registers
 * them there. The directory is removed again unless `register` answers a checkpoint (an object).
 */
export async function writeAdapterDirectory<T>(adaptersDir: string, files: readonly AdapterFile[], register: (id: string, dir: string) => Promise<T>): Promise<T> {
  const id = crypto.randomUUID();
  const dir = path.join(adaptersDir, id);
  let registered = false;
  try {
    await fs.mkdir(dir, { recursive: true });
    for (const file of files) await fs.writeFile(path.join(dir, file.name), file.content, { flag: 'wx' });
    const result = await register(id, dir);
    registered = typeof result === 'object' && result !== null;
    return result;
  } finally {
    if (!registered) await fs.rm(dir, { recursive: true, force: true });
  }
}
