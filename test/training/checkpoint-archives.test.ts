import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { App } from '../../src/app.js';
import * as repo from '../../src/training/repository.js';
import { startFakeEngine, type FakeEngine } from '../fakes/engine.js';
import { createWorkerKey, type TestUser } from '../helpers/app.js';
import { blockedOrSettled, onPostgresServer } from '../helpers/database.js';
import { createTenants, databaseFingerprint, expectOtherTenantRefused, jsonRequest as json } from '../helpers/tenants.js';
import { backendEntry, chat, createGatewayApp } from '../inference/gateway-helpers.js';
import { waitFor } from '../inference/helpers.js';
import { call, groupGenerationA, ScriptedWorker } from './fixtures.js';

/**
 * Moving adapters in and out: a PEFT adapter archive imported as a model's next checkpoint (served by
 * name like a trained one), a checkpoint's adapter exported as a tar.gz. Archives are made with the
 * system's GNU tar, as a user would make them.
 */

const BASE = 'fake/base-model';
let engine: FakeEngine;
let app: App;
let owner: TestUser;
let other: TestUser;
let adaptersDir: string;

beforeAll(async () => {
  engine = await startFakeEngine({ models: [BASE] });
  adaptersDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trainyard-adapters-'));
  app = await createGatewayApp([backendEntry('main', [engine.url], { models: [BASE] })], {
    ADAPTERS_DIR: adaptersDir,
    ADAPTER_ARCHIVE_LIMIT_MB: '1',
    // Workers may register adapters in ADAPTERS_DIR too, as in docker-compose.yml (one /adapters volume).
    CHECKPOINT_URI_PREFIXES: `s3://,${adaptersDir}/`,
  });
  ({ owner, other } = await createTenants(app));
});
afterAll(async () => {
  await app.close();
  await engine.close();
});

/** A minimal valid safetensors file: the header length, then a JSON header with no tensors. */
function safetensors(): Buffer {
  const header = Buffer.from(JSON.stringify({ __metadata__: { format: 'pt' } }));
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(header.length));
  return Buffer.concat([length, header]);
}

/** A directory holding an adapter as PEFT's save_pretrained writes it, plus any extra files. */
function adapterDir(options: { base?: string; extra?: Record<string, string | Buffer>; omit?: string[] } = {}): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'adapter-src-'));
  const dir = path.join(root, 'my-adapter');
  fs.mkdirSync(dir);
  const files: Record<string, string | Buffer> = {
    'adapter_config.json': JSON.stringify({ base_model_name_or_path: options.base ?? BASE, peft_type: 'LORA', r: 8, lora_alpha: 16, target_modules: ['q_proj'] }),
    'adapter_model.safetensors': safetensors(),
    ...options.extra,
  };
  for (const name of options.omit ?? []) delete files[name];
  for (const [name, content] of Object.entries(files)) fs.writeFileSync(path.join(dir, name), content);
  return dir;
}

/** `tar -czf` of the directory, entries under its own name (as `tar -C parent -czf x my-adapter` makes them). */
function tarGz(dir: string, extraArgs: string[] = []): Buffer {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'adapter-tar-')), 'adapter.tar.gz');
  execFileSync('tar', ['-C', path.dirname(dir), '-czf', out, ...extraArgs, path.basename(dir)]);
  return fs.readFileSync(out);
}

/** The archive Python's tarfile (default PAX format) and shutil.make_archive write of the directory, gzipped. */
function pythonTarGz(dir: string): Buffer {
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'adapter-py-')), 'adapter');
  const script = 'import shutil, sys, os; shutil.make_archive(sys.argv[2], "gztar", root_dir=os.path.dirname(sys.argv[1]), base_dir=os.path.basename(sys.argv[1]))';
  execFileSync('python3', ['-c', script, dir, out]);
  return fs.readFileSync(`${out}.tar.gz`);
}

/** One tar entry by hand: a ustar header of `type` (checksum filled in), then the data padded to blocks. */
function tarEntry(name: string, type: string, data: Buffer): Buffer {
  const header = Buffer.alloc(512);
  header.write(name.slice(0, 100), 0, 'utf8');
  header.write('0000644\0', 100, 'ascii');
  header.write(data.length.toString(8).padStart(11, '0') + '\0', 124, 'ascii');
  header.write('00000000000\0', 136, 'ascii');
  header.write(type, 156, 'ascii');
  header.write('ustar\0' + '00', 257, 'ascii');
  header.fill(0x20, 148, 156);
  const sum = header.reduce((total, byte) => total + byte, 0);
  header.write(sum.toString(8).padStart(6, '0') + '\0 ', 148, 'ascii');
  return Buffer.concat([header, data, Buffer.alloc((512 - (data.length % 512)) % 512)]);
}

/** A pax extended header's records: `<length> <key>=<value>\n`, the length counting the whole record. */
function paxData(records: Record<string, string>): Buffer {
  return Buffer.concat(
    Object.entries(records).map(([key, value]) => {
      const body = ` ${key}=${value}\n`;
      let length = Buffer.byteLength(body) + 1;
      while (String(length).length + Buffer.byteLength(body) !== length) length++;
      return Buffer.from(`${length}${body}`);
    }),
  );
}

/** A tar of the adapter's two files, each preceded by a pax header giving its path under `top`. */
function paxTar(top: string, paths: { config?: string; weights?: string } = {}): Buffer {
  const config = Buffer.from(JSON.stringify({ base_model_name_or_path: BASE, peft_type: 'LORA' }));
  return Buffer.concat([
    tarEntry('././@PaxHeader', 'x', paxData({ path: paths.config ?? `${top}/adapter_config.json`, mtime: '1700000000.25' })),
    tarEntry('truncated-name-1', '0', config),
    tarEntry('././@PaxHeader', 'x', paxData({ path: paths.weights ?? `${top}/adapter_model.safetensors` })),
    tarEntry('truncated-name-2', '0', safetensors()),
    Buffer.alloc(1024),
  ]);
}

async function newModel(user: TestUser = owner): Promise<{ id: string; name: string; base: string }> {
  const name = `agent-${crypto.randomUUID().slice(0, 8)}`;
  const reply = await call(app, user.headers, 'POST', '/v1/preview/models', { project: 'proj', name, base_model: BASE });
  expect(reply.status, reply.text).toBe(200);
  return { id: reply.body.id, name, base: `/v1/preview/models/${reply.body.id}` };
}

function upload(user: TestUser, modelBase: string, archive: Buffer, contentType = 'application/gzip') {
  return app.inject({ method: 'POST', url: `${modelBase}/checkpoints/import`, headers: { ...user.headers, 'content-type': contentType }, payload: archive });
}

const importedDirs = () => fs.readdirSync(adaptersDir).sort();

describe('importing an adapter', () => {
  it('registers it as the next checkpoint, serves it by name, exports it back, and removes its files when deleted', async () => {
    const model = await newModel();
    const reply = await upload(owner, model.base, tarGz(adapterDir({ extra: { 'tokenizer_config.json': '{}' } })));
    expect(reply.statusCode, reply.body).toBe(200);
    const state = reply.json();
    expect(state).toMatchObject({ step: 1, source: 'imported', pinned: false, latest: true, best: false, expires_at: null, metrics: {} });
    expect(importedDirs()).toContain(state.id);
    expect(fs.readdirSync(path.join(adaptersDir, state.id)).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors', 'tokenizer_config.json']);

    // Served by name like a trained checkpoint: the engine loads the imported directory.
    const name = `${owner.entity}/proj/${model.name}:step1`;
    const completion = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: owner.headers, payload: chat(name) });
    expect(completion.statusCode, completion.body).toBe(200);
    expect([...engine.adapters.values()]).toContain(path.join(adaptersDir, state.id));

    // Exported back: the same files, at the top of the archive.
    const exported = await app.inject({ method: 'GET', url: `${model.base}/checkpoints/1/archive`, headers: owner.headers });
    expect(exported.statusCode, exported.body).toBe(200);
    expect(exported.headers['content-type']).toBe('application/gzip');
    expect(exported.headers['content-disposition']).toBe(`attachment; filename="${model.name}-step1.tar.gz"`);
    const unpacked = fs.mkdtempSync(path.join(os.tmpdir(), 'adapter-out-'));
    fs.writeFileSync(path.join(unpacked, 'a.tar.gz'), exported.rawPayload);
    execFileSync('tar', ['-C', unpacked, '-xzf', path.join(unpacked, 'a.tar.gz')]);
    fs.rmSync(path.join(unpacked, 'a.tar.gz'));
    expect(fs.readdirSync(unpacked).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors', 'tokenizer_config.json']);
    expect(fs.readFileSync(path.join(unpacked, 'adapter_model.safetensors'))).toEqual(safetensors());

    // Deleted: trainyard owns these files, so it removes them (and records nothing for the workers' side).
    const deleted = await call(app, owner.headers, 'DELETE', `${model.base}/checkpoints`, { steps: [1] });
    expect(deleted.body).toEqual({ deleted_count: 1, not_found_steps: [], pinned_steps: [], in_use_steps: [] });
    await waitFor(() => !importedDirs().includes(state.id));
    const releases = await app.db.selectFrom('checkpoint_releases').select('uri').where('uri', 'like', `%${state.id}%`).execute();
    expect(releases).toEqual([]);
  });

  it('goes after the latest trained checkpoint, and the next job trains from it', async () => {
    const model = await newModel();
    const worker = await ScriptedWorker.create(app, owner, [BASE]);
    await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const first = await worker.claim(5);
    // While a job runs, its worker will register the next step: an import must wait.
    const busy = await upload(owner, model.base, tarGz(adapterDir()));
    expect(busy.statusCode).toBe(409);
    expect(busy.json()).toEqual({ detail: `A training job of model ${model.id} is running and will register the next step; import when it has ended.` });
    expect((await worker.complete(first!)).status).toBe(200);

    const imported = await upload(owner, model.base, tarGz(adapterDir()));
    expect(imported.statusCode, imported.body).toBe(200);
    expect(imported.json().step).toBe(2);
    await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const next = await worker.claim(5);
    expect(next!.job.base_checkpoint).toEqual({ id: imported.json().id, step: 2, uri: path.join(adaptersDir, imported.json().id) });
    expect((await worker.complete(next!)).status).toBe(200);
  });
});

describe('an imported checkpoint whose directory a later step names', () => {
  it('keeps its files when it is deleted, for the step that still names them', async () => {
    const model = await newModel();
    const imported = await upload(owner, model.base, tarGz(adapterDir()));
    expect(imported.statusCode, imported.body).toBe(200);
    const dir = path.join(adaptersDir, imported.json().id);
    // A trainer that took no step registers its base checkpoint's directory again as the next step.
    const worker = await ScriptedWorker.create(app, owner, [BASE]);
    await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const claimed = (await worker.claim(5))!;
    expect(claimed.job.base_checkpoint!.uri).toBe(dir);
    expect((await worker.complete(claimed, {}, dir)).status).toBe(200);

    const deleted = await call(app, owner.headers, 'DELETE', `${model.base}/checkpoints`, { steps: [1] });
    expect(deleted.body).toMatchObject({ deleted_count: 1 });
    const exported = await app.inject({ method: 'GET', url: `${model.base}/checkpoints/2/archive`, headers: owner.headers });
    expect(exported.statusCode, exported.body).toBe(200);
    expect(fs.readdirSync(dir).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
  });
});

describe('archives in pax format', () => {
  it('imports an archive made by Python\'s shutil.make_archive (tarfile\'s PAX format)', async () => {
    const model = await newModel();
    const reply = await upload(owner, model.base, pythonTarGz(adapterDir({ extra: { 'README.md': '# adapter' } })));
    expect(reply.statusCode, reply.body).toBe(200);
    expect(reply.json()).toMatchObject({ step: 1, source: 'imported', metrics: {} });
    expect(fs.readdirSync(path.join(adaptersDir, reply.json().id)).sort()).toEqual(['README.md', 'adapter_config.json', 'adapter_model.safetensors']);
    expect(fs.readFileSync(path.join(adaptersDir, reply.json().id, 'adapter_model.safetensors'))).toEqual(safetensors());
  });

  it('takes each entry\'s path from its pax header, past ustar\'s 100 characters, and skips global headers', async () => {
    const model = await newModel();
    const top = `adapter-${'x'.repeat(200)}`;
    const archive = Buffer.concat([tarEntry('pax_global_header', 'g', paxData({ comment: 'made by hand' })), paxTar(top)]);
    const reply = await upload(owner, model.base, archive, 'application/x-tar');
    expect(reply.statusCode, reply.body).toBe(200);
    expect(fs.readdirSync(path.join(adaptersDir, reply.json().id)).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
  });
});

describe('an imported checkpoint a running job trains from', () => {
  it('is spared by Delete Model Checkpoints, its files kept, until the job has ended', async () => {
    const model = await newModel();
    const worker = await ScriptedWorker.create(app, owner, [BASE]);
    const imported = await upload(owner, model.base, tarGz(adapterDir()));
    expect(imported.statusCode, imported.body).toBe(200);
    const id = imported.json().id;
    await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const claimed = (await worker.claim(5))!;
    expect(claimed.job.base_checkpoint).toEqual({ id, step: 1, uri: path.join(adaptersDir, id) });

    const spared = await call(app, owner.headers, 'DELETE', `${model.base}/checkpoints`, { steps: [1] });
    expect(spared).toMatchObject({ status: 200, body: { deleted_count: 0, not_found_steps: [], pinned_steps: [], in_use_steps: [1] } });
    expect(importedDirs()).toContain(id);
    expect(fs.readdirSync(path.join(adaptersDir, id)).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);

    expect((await worker.complete(claimed)).status).toBe(200);
    const deleted = await call(app, owner.headers, 'DELETE', `${model.base}/checkpoints`, { steps: [1] });
    expect(deleted.body).toEqual({ deleted_count: 1, not_found_steps: [], pinned_steps: [], in_use_steps: [] });
    await waitFor(() => !importedDirs().includes(id));
  });
});

describe('an imported checkpoint as a KL reference', () => {
  it('is handed to the worker with its own directory, by kl_penalty_reference_step and by kl_penalty_step_lag, and kept while a job needs it', async () => {
    const model = await newModel();
    const worker = await ScriptedWorker.create(app, owner, [BASE]);
    const imported = await upload(owner, model.base, tarGz(adapterDir()));
    expect(imported.statusCode, imported.body).toBe(200);
    const reference = { id: imported.json().id, step: 1, uri: path.join(adaptersDir, imported.json().id) };
    await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    expect((await worker.complete((await worker.claim(5))!)).status).toBe(200);

    // Step 2 is trained; the second job starts from step 3, two steps after the imported one.
    for (const experimental_config of [{ kl_penalty_coef: 0.1, kl_penalty_reference_step: 1 }, { kl_penalty_coef: 0.1, kl_penalty_step_lag: 2 }]) {
      const job = await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()], experimental_config });
      expect(job.status, job.text).toBe(200);
      const claimed = (await worker.claim(5))!;
      expect(claimed.job.kl_reference_checkpoint).toEqual(reference);
      const spared = await call(app, owner.headers, 'DELETE', `${model.base}/checkpoints`, { steps: [1] });
      expect(spared.body).toEqual({ deleted_count: 0, not_found_steps: [], pinned_steps: [], in_use_steps: [1] });
      expect(importedDirs()).toContain(reference.id);
      expect((await worker.complete(claimed)).status).toBe(200);
    }
  });
});

/** On a PostgreSQL server (PGlite has one connection, so nothing runs concurrently there). */
describe.skipIf(!onPostgresServer)('an import while its model is deleted (PostgreSQL)', () => {
  it('waits for the delete, then answers 404, registers nothing and leaves no files', async () => {
    const model = await newModel();
    const before = importedDirs();
    const [entityId] = (await repo.findEntityIds(app.db, { names: [owner.entity] })).values();
    let importing: Promise<Awaited<ReturnType<typeof upload>>> | undefined;
    // The delete holds the model row while the import reads it, writes its files and registers them.
    await app.db.transaction().execute(async (trx) => {
      const locked = await repo.findModel(trx, { entityIds: [entityId], modelId: model.id, lock: 'delete' });
      await repo.deleteModel(trx, { model: locked! });
      importing = upload(owner, model.base, tarGz(adapterDir()));
      expect(await blockedOrSettled(app.db, importing)).toBe('blocked');
    });
    const reply = await importing!;
    expect(reply.statusCode, reply.body).toBe(404);
    expect(reply.json()).toEqual({ detail: `model ${model.id} not found` });
    const left = await sql<{ n: number }>`select count(*)::int as n from checkpoints where model_id = ${model.id}`.execute(app.db);
    expect(left.rows[0].n).toBe(0);
    expect(importedDirs()).toEqual(before);
  });
});

describe('archives that are refused', () => {
  let model: { id: string; name: string; base: string };
  beforeAll(async () => {
    model = await newModel();
    // A key's first use records its last-use time: use it here, so the fingerprints compare refusals only.
    await call(app, owner.headers, 'GET', model.base);
  });

  async function refused(archive: Buffer, status: number, detail: unknown, contentType?: string): Promise<void> {
    const before = await databaseFingerprint(app);
    const dirs = importedDirs();
    const reply = await upload(owner, model.base, archive, contentType);
    expect(reply.statusCode, reply.body).toBe(status);
    expect(reply.json()).toEqual({ detail });
    expect(await databaseFingerprint(app)).toEqual(before);
    expect(importedDirs()).toEqual(dirs);
  }

  const problem = (msg: string) => [{ type: 'value_error', loc: ['body'], msg: `Value error, ${msg}`, input: null }];

  it('refuses pickle weights, unknown files and a missing safetensors file', async () => {
    await refused(
      tarGz(adapterDir({ omit: ['adapter_model.safetensors'], extra: { 'adapter_model.bin': 'pickle' } })),
      422,
      problem('adapter_model.bin: pickle files are refused (loading one can run code); save the adapter with safetensors (save_pretrained(..., safe_serialization=True))'),
    );
    await refused(
      tarGz(adapterDir({ extra: { 'run.sh': 'echo hi' } })),
      422,
      problem(
        'run.sh: not a file of a PEFT adapter; allowed: adapter_config.json, adapter_model.safetensors, README.md, tokenizer.json, tokenizer_config.json, special_tokens_map.json, added_tokens.json, chat_template.jinja, vocab.json, merges.txt',
      ),
    );
    await refused(
      tarGz(adapterDir({ omit: ['adapter_model.safetensors'] })),
      422,
      problem('the archive has no adapter_model.safetensors; a PEFT adapter directory has adapter_config.json and adapter_model.safetensors'),
    );
    await refused(
      tarGz(adapterDir({ extra: { 'adapter_model.safetensors': 'not safetensors at all' } })),
      422,
      problem('adapter_model.safetensors is not a safetensors file (no valid header)'),
    );
  });

  it('refuses an adapter of another base model', async () => {
    await refused(tarGz(adapterDir({ base: 'Qwen/Qwen3-14B' })), 422, problem(`the adapter was trained on Qwen/Qwen3-14B, but model ${model.id} is based on ${BASE}`));
  });

  it('refuses an adapter that would change the base model it is served on, naming the settings', async () => {
    const config = (settings: Record<string, unknown>) =>
      JSON.stringify({ base_model_name_or_path: BASE, peft_type: 'LORA', r: 8, lora_alpha: 16, target_modules: ['q_proj'], ...settings });
    const only = 'only plain LoRA adapters are taken, which leave the base model unchanged and which vLLM serves';
    await refused(
      tarGz(adapterDir({ extra: { 'adapter_config.json': config({ modules_to_save: ['lm_head'], bias: 'all' }) } })),
      422,
      problem(`adapter_config.json has modules_to_save ["lm_head"], bias "all": ${only}`),
    );
    await refused(
      tarGz(adapterDir({ extra: { 'adapter_config.json': config({ peft_type: 'IA3', init_lora_weights: 'pissa', layer_replication: [[0, 2]] }) } })),
      422,
      problem(`adapter_config.json has peft_type "IA3" (only LORA), layer_replication [[0,2]], init_lora_weights "pissa": ${only}`),
    );
    await refused(
      tarGz(adapterDir({ extra: { 'adapter_config.json': config({ use_dora: true, lora_bias: true }) } })),
      422,
      problem(`adapter_config.json has use_dora true, lora_bias true: ${only}`),
    );
    const unnamed = JSON.stringify({ base_model_name_or_path: BASE, r: 8 });
    await refused(tarGz(adapterDir({ extra: { 'adapter_config.json': unnamed } })), 422, problem(`adapter_config.json has no peft_type (only LORA): ${only}`));
    // What peft writes for a plain LoRA is taken (by a model of its own: this block's model stays without checkpoints).
    const plain = config({ modules_to_save: null, trainable_token_indices: null, layer_replication: null, bias: 'none', init_lora_weights: true });
    const reply = await upload(owner, (await newModel()).base, tarGz(adapterDir({ extra: { 'adapter_config.json': plain } })));
    expect(reply.statusCode, reply.body).toBe(200);
  });

  it('refuses links, absolute paths and ".." paths, so nothing lands outside its directory', async () => {
    const withLink = adapterDir();
    fs.symlinkSync('/etc/passwd', path.join(withLink, 'README.md'));
    await refused(tarGz(withLink), 422, problem('archive entry "my-adapter/README.md" is a symbolic link: only regular files are accepted'));

    const dir = adapterDir();
    const absolute = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'adapter-tar-')), 'abs.tar');
    execFileSync('tar', ['-cPf', absolute, path.join(dir, 'adapter_config.json'), path.join(dir, 'adapter_model.safetensors')]);
    await refused(fs.readFileSync(absolute), 422, problem(`archive entry ${JSON.stringify(path.join(dir, 'adapter_config.json'))}: absolute paths are not allowed`), 'application/x-tar');

    const dotdot = path.join(path.dirname(dir), 'dotdot.tar');
    execFileSync('tar', ['-C', dir, '-cPf', dotdot, 'adapter_config.json', '../my-adapter/adapter_model.safetensors']);
    await refused(fs.readFileSync(dotdot), 422, problem('archive entry "../my-adapter/adapter_model.safetensors": ".." is not allowed in paths'), 'application/x-tar');
  });

  it('checks the path a pax header gives, and refuses a pax header that is malformed or too large', async () => {
    await refused(paxTar('a', { weights: '../escape/adapter_model.safetensors' }), 422, problem('archive entry "../escape/adapter_model.safetensors": ".." is not allowed in paths'), 'application/x-tar');
    await refused(paxTar('a', { weights: '/etc/adapter_model.safetensors' }), 422, problem('archive entry "/etc/adapter_model.safetensors": absolute paths are not allowed'), 'application/x-tar');
    await refused(paxTar('a', { weights: `${'d/'.repeat(2100)}adapter_model.safetensors` }), 422, problem('the archive names a path longer than 4096 bytes'), 'application/x-tar');
    const huge = Buffer.concat([tarEntry('././@PaxHeader', 'x', paxData({ comment: 'c'.repeat(70_000) })), paxTar('a')]);
    await refused(huge, 422, problem('the archive has a pax extended header of more than 65536 bytes'), 'application/x-tar');
    const malformed = Buffer.concat([tarEntry('././@PaxHeader', 'x', Buffer.from('99 path=a/adapter_config.json\n')), paxTar('a')]);
    await refused(malformed, 422, problem('the archive has a malformed pax extended header'), 'application/x-tar');
  });

  it('refuses too many files, something that is not an archive, and a body over ADAPTER_ARCHIVE_LIMIT_MB', async () => {
    const many = adapterDir();
    for (let i = 0; i < 16; i++) fs.writeFileSync(path.join(many, `extra-${i}.txt`), 'x');
    await refused(tarGz(many), 422, problem('the archive holds more than 16 files'));
    await refused(Buffer.from('{"not": "a tar"}'), 422, problem('the archive is not a tar file (shorter than one 512-byte header)'), 'application/octet-stream');
    await refused(Buffer.alloc(2048, 'x'), 422, problem('the archive is not a tar file (a header field is not an octal number)'), 'application/octet-stream');
    // A small gzip that would unpack past the limit (a gzip bomb) is refused without unpacking it all.
    await refused(gzipSync(Buffer.alloc(8 * 1024 * 1024)), 422, problem('the archive unpacks to more than 1048576 bytes'), 'application/gzip');
    await refused(Buffer.from([0x1f, 0x8b, 1, 2, 3, 4, 5, 6, 7, 8]), 422, problem('the archive is not valid gzip'), 'application/gzip');
    const before = await databaseFingerprint(app);
    const big = await upload(owner, model.base, Buffer.alloc(1024 * 1024 + 1), 'application/octet-stream');
    expect(big.statusCode).toBe(413);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('takes archive bodies on the import route alone: the model\'s other routes answer them 415 and keep their JSON limits', async () => {
    const before = await databaseFingerprint(app);
    for (const [method, url] of [['PUT', `${model.base}/retention`], ['POST', `${model.base}/retention/apply`], ['POST', `${model.base}/checkpoints/1/pin`]] as const) {
      for (const contentType of ['application/octet-stream', 'application/gzip', 'application/x-tar']) {
        const reply = await app.inject({ method, url, headers: { ...owner.headers, 'content-type': contentType }, payload: Buffer.alloc(4096, 'a') });
        expect([reply.statusCode, reply.json()], `${method} ${url} ${contentType}`).toEqual([415, { detail: `Unsupported content type: ${contentType}. Send application/json.` }]);
      }
    }
    // A JSON body of many unknown keys is answered with the first 50 of them, as every refusal is bounded.
    const unknown = Object.fromEntries(Array.from({ length: 100_000 }, (_, i) => [`k${i}`, i]));
    const reply = await app.inject({ method: 'PUT', url: `${model.base}/retention`, headers: owner.headers, payload: unknown });
    expect(reply.statusCode).toBe(422);
    const detail = reply.json().detail as { loc: unknown[] }[];
    expect(detail).toHaveLength(50);
    expect(detail[0]).toEqual({ type: 'extra_forbidden', loc: ['body', 'k0'], msg: 'Extra inputs are not permitted', input: 0 });
    expect(detail[49].loc).toEqual(['body', 'k49']);
    expect(await databaseFingerprint(app)).toEqual(before);
  });

  it('says why a checkpoint stored elsewhere cannot be exported', async () => {
    const worker = await ScriptedWorker.create(app, owner, [BASE]);
    await call(app, owner.headers, 'POST', '/v1/preview/training-jobs', { model_id: model.id, trajectory_groups: [groupGenerationA()] });
    const claimed = await worker.claim(5);
    expect((await worker.complete(claimed!)).status).toBe(200);
    const reply = await call(app, owner.headers, 'GET', `${model.base}/checkpoints/1/archive`);
    expect(reply).toMatchObject({
      status: 409,
      body: { detail: `The adapter of step 1 is stored at s3://checkpoints/${model.name}/1, which is not a path on this server: download it from that storage directly.` },
    });
    expect(await call(app, owner.headers, 'GET', `${model.base}/checkpoints/5/archive`)).toMatchObject({
      status: 404,
      body: { detail: `model ${model.id} has no checkpoint at step 5` },
    });
  });
});

describe('another tenant', () => {
  it('can neither export nor import on the owner\'s model (404), and a worker key is refused (403)', async () => {
    const model = await newModel();
    expect((await upload(owner, model.base, tarGz(adapterDir()))).statusCode).toBe(200);
    const worker = { ...owner, headers: (await createWorkerKey(app, owner.username)).headers };
    await call(app, other.headers, 'GET', '/v1/preview/base-models');
    await call(app, worker.headers, 'GET', '/v1/preview/base-models');
    const notFound = { status: 404 as const, body: { detail: `model ${model.id} not found` }, secrets: [model.name] };
    await expectOtherTenantRefused(app, json('GET', `${model.base}/checkpoints/1/archive`, other), notFound);
    const dirs = importedDirs();
    await expectOtherTenantRefused(
      app,
      { method: 'POST', url: `${model.base}/checkpoints/import`, headers: { ...other.headers, 'content-type': 'application/gzip' }, payload: tarGz(adapterDir()) },
      notFound,
    );
    await expectOtherTenantRefused(
      app,
      { method: 'POST', url: `${model.base}/checkpoints/import`, headers: { ...worker.headers, 'content-type': 'application/gzip' }, payload: tarGz(adapterDir()) },
      { status: 403, body: { detail: 'Worker keys may only call /v1/workers/*.' } },
    );
    expect(importedDirs()).toEqual(dirs);
  });
});
