import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { adapterPathFor, BackendsConfigError, loadBackendsFile, parseBackends } from '../../src/inference/backends/config.js';

const YAML = `
backends:
  - name: local-vllm
    kind: openai-compatible
    replicas: [http://127.0.0.1:8001/, http://127.0.0.1:8002/v1]
    api_key_env: VLLM_KEY
    models: [Qwen/Qwen2.5-7B-Instruct]
    runtime_lora: true
    priority_scheduling: true
    timeouts: { connect_ms: 1000, first_byte_ms: 2000 }
    adapter_paths:
      - { prefix: "s3://bucket/checkpoints/", path: "/mnt/checkpoints/" }
`;

function problemsOf(text: string, env: Record<string, string> = {}): string[] {
  try {
    parseBackends(text, 'backends.yaml', env);
  } catch (error) {
    expect(error).toBeInstanceOf(BackendsConfigError);
    return (error as BackendsConfigError).problems;
  }
  throw new Error('expected the file to be rejected');
}

describe('backends file', () => {
  let dir: string | undefined;
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
    dir = undefined;
  });

  it('reads a YAML file with every setting', () => {
    const [backend] = parseBackends(YAML, 'backends.yaml', { VLLM_KEY: 'secret' });
    expect(backend).toEqual({
      name: 'local-vllm',
      kind: 'openai-compatible',
      replicas: ['http://127.0.0.1:8001', 'http://127.0.0.1:8002'],
      apiKey: 'secret',
      apiKeyEnv: 'VLLM_KEY',
      models: ['Qwen/Qwen2.5-7B-Instruct'],
      runtimeLora: true,
      priorityScheduling: true,
      timeouts: { connectMs: 1000, firstByteMs: 2000, idleMs: 60_000, totalMs: 1_800_000, adapterLoadMs: 120_000 },
      adapterPaths: [{ prefix: 's3://bucket/checkpoints/', path: '/mnt/checkpoints/' }],
    });
  });

  it('reads a JSON file from disk with defaults filled in', async () => {
    dir = await mkdtemp(join(tmpdir(), 'backends-'));
    const path = join(dir, 'backends.json');
    await writeFile(path, JSON.stringify({ backends: [{ name: 'b', kind: 'openai-compatible', replicas: ['http://localhost:8000'] }] }));
    const [backend] = await loadBackendsFile(path, {});
    expect(backend).toMatchObject({ apiKey: undefined, models: 'discover', runtimeLora: false, priorityScheduling: false, adapterPaths: [] });
  });

  it('names the file when it cannot be read', async () => {
    await expect(loadBackendsFile('/nonexistent/backends.yaml', {})).rejects.toThrow(/backends file \/nonexistent\/backends.yaml/);
  });

  it('rejects text that is neither JSON nor YAML', () => {
    expect(problemsOf('backends: [')[0]).toMatch(/not valid JSON or YAML/);
  });

  it('names the field of a replica that is not a URL', () => {
    expect(problemsOf('backends: [{name: b, kind: openai-compatible, replicas: ["ftp://x"]}]')).toEqual([
      'backends[0].replicas[0]: must be an http:// or https:// URL',
    ]);
  });

  it('rejects an unknown kind', () => {
    expect(problemsOf('backends: [{name: b, kind: sglang-native, replicas: ["http://x"]}]')[0]).toMatch(/^backends\[0\]\.kind:/);
  });

  it('rejects a backend without replicas', () => {
    expect(problemsOf('backends: [{name: b, kind: openai-compatible, replicas: []}]')[0]).toMatch(/^backends\[0\]\.replicas:/);
  });

  it('rejects an unknown setting so typos do not pass silently', () => {
    expect(problemsOf('backends: [{name: b, kind: openai-compatible, replicas: ["http://x"], timeouts: {conect_ms: 5}}]')[0]).toMatch(
      /^backends\[0\]\.timeouts: .*conect_ms/,
    );
  });

  it('rejects duplicate backend names', () => {
    const text = 'backends: [{name: b, kind: openai-compatible, replicas: ["http://x"]}, {name: b, kind: openai-compatible, replicas: ["http://y"]}]';
    expect(problemsOf(text)).toEqual(['backends[1].name: duplicate backend name b']);
  });

  it('reports an API key variable that is not set', () => {
    expect(problemsOf(YAML)).toEqual(['backends[0].api_key_env: environment variable VLLM_KEY is not set']);
  });

  it('accepts an empty backends list', () => {
    expect(parseBackends('backends: []', 'b.yaml', {})).toEqual([]);
  });
});

describe('adapterPathFor', () => {
  const backend = {
    adapterPaths: [
      { prefix: 's3://bucket/', path: '/mnt/bucket/' },
      { prefix: 's3://bucket/special/', path: '/fast/' },
    ],
  };

  it('rewrites with the longest matching prefix', () => {
    expect(adapterPathFor(backend, 's3://bucket/special/ckpt-1')).toBe('/fast/ckpt-1');
    expect(adapterPathFor(backend, 's3://bucket/a/ckpt-2')).toBe('/mnt/bucket/a/ckpt-2');
  });

  it('leaves a URI no rule matches unchanged', () => {
    expect(adapterPathFor(backend, '/local/ckpt')).toBe('/local/ckpt');
  });
});

describe('the documented backends files', () => {
  // Users paste these: each YAML block in the docs, and the shipped deploy/backends.yaml, must load.
  const documents = ['README.md', ...readdirSync('docs').filter((name) => name.endsWith('.md')).map((name) => join('docs', name))];
  const blocks = documents.flatMap((file) =>
    [...readFileSync(file, 'utf8').matchAll(/^( *)```yaml\n([\s\S]*?)^\1```/gm)]
      .map((match) => match[2]!.replace(new RegExp(`^${match[1]}`, 'gm'), ''))
      .filter((text) => /^backends:/m.test(text))
      .map((text, index) => ({ name: `${file} block ${index + 1}`, text })),
  );
  blocks.push({ name: 'deploy/backends.yaml', text: readFileSync('deploy/backends.yaml', 'utf8') });

  it('are found in the docs', () => {
    expect(blocks.map((block) => block.name)).toEqual(['docs/inference.md block 1', 'docs/worker-runtime.md block 1', 'deploy/backends.yaml']);
  });

  it.each(blocks)('$name loads', ({ text, name }) => {
    expect(parseBackends(text, name, { VLLM_API_KEY: 'secret' }).length).toBeGreaterThan(0);
  });
});
