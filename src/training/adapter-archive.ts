import { promisify } from 'node:util';
import { gunzip, gzipSync } from 'node:zlib';

/** Inflates off the event loop (libuv's thread pool): a small upload may unpack to the whole limit. */
const gunzipAsync = promisify(gunzip);

/**
 * PEFT adapter archives (docs/training.md, "Export and import"): a tar, gzipped or not, of an adapter
 * directory. Reading accepts only what a LoRA adapter is: `adapter_config.json`, weights in safetensors
 * (never pickle: `.bin`, `.pt`, `.pkl` files run code when loaded), and a few tokenizer and text files,
 * all regular files at one level. Links, absolute or `..` paths and anything else are refused before a
 * byte is written, so no archive can place a file outside the directory it is unpacked into.
 */

export const ARCHIVE_LIMITS = {
  files: 16,
  /** Characters of an entry name (ustar's name field). */
  nameLength: 100,
  /** Bytes of one pax extended header (Python's tarfile writes one per entry: its float mtime). */
  paxHeader: 64 * 1024,
  /** Bytes of an entry path a pax header gives (Linux's PATH_MAX). */
  paxPath: 4096,
  /** Bytes of a safetensors header (the JSON before the tensors). */
  safetensorsHeader: 100 * 1024 * 1024,
} as const;

export const REQUIRED_FILES = ['adapter_config.json', 'adapter_model.safetensors'] as const;
const OPTIONAL_FILES = [
  'README.md',
  'tokenizer.json',
  'tokenizer_config.json',
  'special_tokens_map.json',
  'added_tokens.json',
  'chat_template.jinja',
  'vocab.json',
  'merges.txt',
];
export const ALLOWED_FILES: readonly string[] = [...REQUIRED_FILES, ...OPTIONAL_FILES];
const PICKLE_EXTENSIONS = ['.bin', '.pt', '.pth', '.pkl', '.pickle', '.ckpt'];

/** An archive that is not an acceptable adapter; the message says what to send instead. */
export class ArchiveProblem extends Error {}

export interface AdapterFile {
  name: string;
  content: Buffer;
}

const BLOCK = 512;

function field(header: Buffer, offset: number, length: number): string {
  const raw = header.subarray(offset, offset + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end < 0 ? length : end).toString('utf8');
}

function octal(header: Buffer, offset: number, length: number): number {
  const text = field(header, offset, length).trim();
  if (!/^[0-7]*$/.test(text)) throw new ArchiveProblem('the archive is not a tar file (a header field is not an octal number)');
  return text === '' ? 0 : parseInt(text, 8);
}

function checksumOf(header: Buffer): number {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 0x20 : header[i];
  return sum;
}

/** The entry's name relative to the adapter directory, or a problem naming why it cannot be one. */
function safeName(raw: string): string {
  if (raw.includes('\\') || raw.includes('\0')) throw new ArchiveProblem(`archive entry ${JSON.stringify(raw)}: backslashes and NUL are not allowed in names`);
  if (raw.startsWith('/')) throw new ArchiveProblem(`archive entry ${JSON.stringify(raw)}: absolute paths are not allowed`);
  const parts = raw.split('/').filter((part) => part !== '' && part !== '.');
  if (parts.includes('..')) throw new ArchiveProblem(`archive entry ${JSON.stringify(raw)}: ".." is not allowed in paths`);
  return parts.join('/');
}

/**
 * The records of a pax extended header (POSIX.1-2001 `pax`): `<length> <key>=<value>\n`, where length
 * counts the whole record. Only `path` and `size` are kept; every other key (mtime, uid, SCHILY.*, ...)
 * says nothing an adapter needs.
 */
function paxRecords(data: Buffer): { path?: string; size?: number } {
  const bad = new ArchiveProblem('the archive has a malformed pax extended header');
  const out: { path?: string; size?: number } = {};
  let at = 0;
  while (at < data.length) {
    if (data[at] === 0) break;
    const space = data.indexOf(0x20, at);
    const lengthText = space < 0 ? '' : data.subarray(at, space).toString('latin1');
    if (!/^[1-9][0-9]{0,6}$/.test(lengthText)) throw bad;
    const end = at + Number(lengthText);
    if (end > data.length || end <= space + 1 || data[end - 1] !== 0x0a) throw bad;
    const record = data.subarray(space + 1, end - 1);
    const equals = record.indexOf(0x3d);
    if (equals <= 0) throw bad;
    const key = record.subarray(0, equals).toString('utf8');
    const value = record.subarray(equals + 1);
    if (key === 'path') {
      if (value.length > ARCHIVE_LIMITS.paxPath) throw new ArchiveProblem(`the archive names a path longer than ${ARCHIVE_LIMITS.paxPath} bytes`);
      out.path = value.toString('utf8');
    } else if (key === 'size') {
      const text = value.toString('latin1');
      if (!/^[0-9]{1,15}$/.test(text)) throw bad;
      out.size = Number(text);
    }
    at = end;
  }
  return out;
}

/**
 * The files of an adapter archive (tar or tar.gz; ustar, GNU or pax as Python's tarfile and
 * shutil.make_archive write it). Entries may sit at the top or under one directory
 * (`tar -C parent -cf x.tar adapter/`); directories are skipped; everything else is checked as above,
 * on the path and size a pax header gives the entry after it. Global pax headers are skipped.
 */
export async function readAdapterArchive(archive: Buffer, maxBytes: number): Promise<AdapterFile[]> {
  let tar = archive;
  if (archive.length >= 2 && archive[0] === 0x1f && archive[1] === 0x8b) {
    try {
      tar = await gunzipAsync(archive, { maxOutputLength: maxBytes });
    } catch (error) {
      const tooLarge = error instanceof RangeError || (error as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE';
      throw new ArchiveProblem(tooLarge ? `the archive unpacks to more than ${maxBytes} bytes` : 'the archive is not valid gzip');
    }
  }
  if (tar.length < BLOCK) throw new ArchiveProblem(`the archive is not a tar file (shorter than one ${BLOCK}-byte header)`);
  const entries: { name: string; content: Buffer }[] = [];
  let offset = 0;
  /** What the last pax extended header said of the entry that follows it. */
  let pax: { path?: string; size?: number } = {};
  while (offset + BLOCK <= tar.length) {
    const header = tar.subarray(offset, offset + BLOCK);
    if (header.every((byte) => byte === 0)) break;
    if (octal(header, 148, 8) !== checksumOf(header)) throw new ArchiveProblem('the archive is not a tar file (header checksum mismatch)');
    const prefix = field(header, 345, 155);
    const type = String.fromCharCode(header[156] || 0x30);
    const headerSize = octal(header, 124, 12);
    if ((type === 'x' || type === 'g') && headerSize > ARCHIVE_LIMITS.paxHeader) {
      throw new ArchiveProblem(`the archive has a pax extended header of more than ${ARCHIVE_LIMITS.paxHeader} bytes`);
    }
    const raw = type !== 'x' && type !== 'g' && pax.path !== undefined ? pax.path : prefix ? `${prefix}/${field(header, 0, 100)}` : field(header, 0, 100);
    const size = type !== 'x' && type !== 'g' && pax.size !== undefined ? pax.size : headerSize;
    const start = offset + BLOCK;
    if (start + size > tar.length) throw new ArchiveProblem('the archive is truncated');
    offset = start + Math.ceil(size / BLOCK) * BLOCK;
    if (type === 'x') {
      pax = { ...pax, ...paxRecords(tar.subarray(start, start + size)) };
      continue;
    }
    if (type === 'g') continue;
    pax = {};
    if (type === '1' || type === '2') {
      throw new ArchiveProblem(`archive entry ${JSON.stringify(raw)} is a ${type === '1' ? 'hard' : 'symbolic'} link: only regular files are accepted`);
    }
    if (type === '5') continue;
    if (type !== '0' && type !== '7') {
      throw new ArchiveProblem(`archive entry ${JSON.stringify(raw)} has tar type ${JSON.stringify(type)}: only regular files and directories are accepted`);
    }
    entries.push({ name: safeName(raw), content: tar.subarray(start, start + size) });
    if (entries.length > ARCHIVE_LIMITS.files) throw new ArchiveProblem(`the archive holds more than ${ARCHIVE_LIMITS.files} files`);
  }
  return checkAdapterFiles(stripTopDirectory(entries));
}

/** Entries all under one directory are taken from inside it. */
function stripTopDirectory(entries: AdapterFile[]): AdapterFile[] {
  const tops = new Set(entries.map((entry) => (entry.name.includes('/') ? entry.name.split('/')[0] : '')));
  if (tops.size !== 1 || tops.has('')) return entries;
  const [top] = tops;
  return entries.map((entry) => ({ ...entry, name: entry.name.slice(top.length + 1) }));
}

/** Throws ArchiveProblem unless the files are a PEFT adapter: allowed names only, once each, safetensors weights. */
export function checkAdapterFiles(files: AdapterFile[]): AdapterFile[] {
  const seen = new Set<string>();
  for (const file of files) {
    if (PICKLE_EXTENSIONS.some((ext) => file.name.endsWith(ext))) {
      throw new ArchiveProblem(`${file.name}: pickle files are refused (loading one can run code); save the adapter with safetensors (save_pretrained(..., safe_serialization=True))`);
    }
    if (!ALLOWED_FILES.includes(file.name)) {
      throw new ArchiveProblem(`${file.name}: not a file of a PEFT adapter; allowed: ${ALLOWED_FILES.join(', ')}`);
    }
    if (seen.has(file.name)) throw new ArchiveProblem(`${file.name} appears twice in the archive`);
    seen.add(file.name);
  }
  for (const required of REQUIRED_FILES) {
    if (!seen.has(required)) throw new ArchiveProblem(`the archive has no ${required}; a PEFT adapter directory has ${REQUIRED_FILES.join(' and ')}`);
  }
  checkSafetensors(files.find((file) => file.name === 'adapter_model.safetensors')!.content);
  return files;
}

/** A safetensors file starts with the length of its JSON header (u64, little-endian), then the header. */
function checkSafetensors(content: Buffer): void {
  const problem = new ArchiveProblem('adapter_model.safetensors is not a safetensors file (no valid header)');
  if (content.length < 8) throw problem;
  const length = content.readBigUInt64LE(0);
  if (length < 2n || length > BigInt(Math.min(ARCHIVE_LIMITS.safetensorsHeader, content.length - 8))) throw problem;
  try {
    const header = JSON.parse(content.subarray(8, 8 + Number(length)).toString('utf8'));
    if (typeof header !== 'object' || header === null || Array.isArray(header)) throw problem;
  } catch {
    throw problem;
  }
}

/**
 * The base model an adapter was trained on, from its adapter_config.json, which must describe a plain
 * LoRA: one whose layers sit beside an unchanged base model. Anything more (whole modules trained as
 * copies, the base's biases or embedding rows trained, layers replicated, an initialisation that rewrites
 * base weights when it loads, another PEFT method or none named) is refused here, as the reference trainer refuses it
 * (docs/trainer.md, "Adapters it continues from") and vLLM's runtime LoRA cannot serve it on a shared base; so are
 * LoRA variants vLLM does not serve (DoRA, LoRA bias).
 */
export function adapterBaseModel(files: readonly AdapterFile[]): string {
  const config = files.find((file) => file.name === 'adapter_config.json')!;
  let parsed: unknown;
  try {
    parsed = JSON.parse(config.content.toString('utf8'));
  } catch {
    throw new ArchiveProblem('adapter_config.json is not valid JSON');
  }
  const settings = (typeof parsed === 'object' && parsed !== null ? parsed : {}) as Record<string, unknown>;
  const base = settings.base_model_name_or_path;
  if (typeof base !== 'string' || base === '') throw new ArchiveProblem('adapter_config.json names no base_model_name_or_path');
  const refused = baseChangingSettings(settings);
  if (refused.length > 0) {
    throw new ArchiveProblem(`adapter_config.json has ${refused.join(', ')}: only plain LoRA adapters are taken, which leave the base model unchanged and which vLLM serves`);
  }
  return base;
}

/** LoRA initialisations that leave the base weights alone when the adapter loads (PiSSA, OLoRA, LoftQ... rewrite them). */
const BASE_PRESERVING_INITS: readonly unknown[] = [true, false, 'gaussian', 'eva', 'orthogonal'];

function baseChangingSettings(settings: Record<string, unknown>): string[] {
  const refused: string[] = [];
  const shown = (value: unknown) => JSON.stringify(value).slice(0, 100);
  if (settings.peft_type === undefined) refused.push('no peft_type (only LORA)');
  else if (settings.peft_type !== 'LORA') refused.push(`peft_type ${shown(settings.peft_type)} (only LORA)`);
  for (const key of ['modules_to_save', 'trainable_token_indices', 'layer_replication', 'use_dora', 'lora_bias']) {
    if (isSet(settings[key])) refused.push(`${key} ${shown(settings[key])}`);
  }
  if ('bias' in settings && settings.bias !== 'none') refused.push(`bias ${shown(settings.bias)}`);
  if ('init_lora_weights' in settings && !BASE_PRESERVING_INITS.includes(settings.init_lora_weights)) {
    refused.push(`init_lora_weights ${shown(settings.init_lora_weights)}`);
  }
  return refused;
}

/** Whether a setting is on: not absent, null, false, 0, "", [] or {} (what peft and the trainer read as off). */
function isSet(value: unknown): boolean {
  if (value === undefined || value === null || value === false || value === 0 || value === '') return false;
  if (typeof value === 'object') return Object.keys(value).length > 0;
  return true;
}

function header(name: string, size: number, mtime: number): Buffer {
  const block = Buffer.alloc(BLOCK);
  block.write(name, 0, 100, 'utf8');
  block.write('0000644\0', 100, 'ascii');
  block.write('0000000\0', 108, 'ascii');
  block.write('0000000\0', 116, 'ascii');
  block.write(size.toString(8).padStart(11, '0') + '\0', 124, 'ascii');
  block.write(Math.floor(mtime / 1000).toString(8).padStart(11, '0') + '\0', 136, 'ascii');
  block[156] = 0x30;
  block.write('ustar\0', 257, 'ascii');
  block.write('00', 263, 'ascii');
  block.write(checksumOf(block).toString(8).padStart(6, '0') + '\0 ', 148, 'ascii');
  return block;
}

/** A gzipped tar of the files, at the top level (what `tar -xzf` unpacks into the current directory). */
export function writeAdapterArchive(files: readonly AdapterFile[], mtime = Date.now()): Buffer {
  const parts: Buffer[] = [];
  for (const file of files) {
    if (Buffer.byteLength(file.name) > ARCHIVE_LIMITS.nameLength) throw new ArchiveProblem(`${file.name}: name longer than ${ARCHIVE_LIMITS.nameLength} bytes`);
    parts.push(header(file.name, file.content.length, mtime), file.content, Buffer.alloc((BLOCK - (file.content.length % BLOCK)) % BLOCK));
  }
  parts.push(Buffer.alloc(BLOCK * 2));
  return gzipSync(Buffer.concat(parts));
}
