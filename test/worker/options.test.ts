import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadWorkerOptions, WorkerUsageError } from '../../src/worker/options.js';

function load(argv: string[], env: Record<string, string> = {}) {
  const loaded = loadWorkerOptions(argv, env);
  if (loaded.help) throw new Error('unexpected help');
  return loaded.options;
}

describe('loadWorkerOptions', () => {
  it('applies the defaults', () => {
    const options = load(['--server', 'http://ty:8000/', '--key', 'k', '--command', 'python train.py']);
    expect(options).toMatchObject({
      serverUrl: 'http://ty:8000',
      key: 'k',
      command: ['python', 'train.py'],
      kinds: undefined,
      baseModels: undefined,
      concurrency: 1,
      workDir: path.resolve('trainyard-work'),
      outputDir: path.resolve('trainyard-work', 'checkpoints'),
      releaseMs: 60_000,
      workerId: `${os.hostname()}-${process.pid}`,
      cancelGraceMs: 30_000,
      drainMs: 300_000,
      heartbeatMs: undefined,
      eventWindowMs: 250,
      pollSeconds: 30,
      logLevel: 'info',
      resident: true,
    });
  });

  it('reads every flag', () => {
    const options = load([
      '--server', 'https://ty.example', '--key', 'k', '--kinds', 'rl, sft', '--base-models', 'A,B',
      '--concurrency', '2', '--work-dir', '/tmp/w', '--output-dir', '/mnt/adapters', '--release-seconds', '0', '--worker-id', 'gpu-3',
      '--cancel-grace-seconds', '5', '--drain-seconds', '60', '--heartbeat-seconds', '2.5',
      '--event-window-ms', '0', '--poll-seconds', '10', '--log-level', 'debug', '--resident', 'off', '--', 'python', 'train.py', '--lr', '1e-5',
    ]);
    expect(options).toMatchObject({
      serverUrl: 'https://ty.example',
      kinds: ['rl', 'sft'],
      baseModels: ['A', 'B'],
      concurrency: 2,
      workDir: '/tmp/w',
      outputDir: '/mnt/adapters',
      releaseMs: 0,
      workerId: 'gpu-3',
      cancelGraceMs: 5000,
      drainMs: 60_000,
      heartbeatMs: 2500,
      eventWindowMs: 0,
      pollSeconds: 10,
      logLevel: 'debug',
      resident: false,
      command: ['python', 'train.py', '--lr', '1e-5'],
    });
  });

  it('takes the server and key from the environment and keeps the key and the residency offer out of the trainer environment', () => {
    const options = load(['--command', 'train'], { TRAINYARD_URL: 'http://ty:1', TRAINYARD_WORKER_KEY: 'secret', HF_HOME: '/hf', TRAINYARD_RESIDENT: '1' });
    expect(options.serverUrl).toBe('http://ty:1');
    expect(options.key).toBe('secret');
    expect(options.trainerEnv).toEqual({ TRAINYARD_URL: 'http://ty:1', HF_HOME: '/hf' });
  });

  it('prefers the flags to the environment', () => {
    const options = load(['--server', 'http://a:1', '--key', 'flag', '--command', 'train'], { TRAINYARD_URL: 'http://b:2', TRAINYARD_WORKER_KEY: 'env' });
    expect(options.serverUrl).toBe('http://a:1');
    expect(options.key).toBe('flag');
  });

  it('answers help', () => {
    expect(loadWorkerOptions(['--help'], {})).toEqual({ help: true });
  });

  it.each([
    [['--key', 'k', '--command', 'x'], /--server or TRAINYARD_URL is required/],
    [['--server', 'ftp://x', '--key', 'k', '--command', 'x'], /--server must be an http/],
    [['--server', 'http://x', '--command', 'x'], /--key or TRAINYARD_WORKER_KEY is required/],
    [['--server', 'http://x', '--key', 'k'], /--command .* is required/],
    [['--server', 'http://x', '--key', 'k', '--command', 'a', '--', 'b'], /either with --command or after --/],
    [['--server', 'http://x', '--key', 'k', '--command', 'x', '--kinds', 'ppo'], /--kinds takes rl and\/or sft/],
    [['--server', 'http://x', '--key', 'k', '--command', 'x', '--concurrency', '0'], /--concurrency must be at least 1/],
    [['--server', 'http://x', '--key', 'k', '--command', 'x', '--concurrency', 'two'], /--concurrency must be a number/],
    [['--server', 'http://x', '--key', 'k', '--command', 'x', '--poll-seconds', '31'], /--poll-seconds must be at most 30/],
    [['--server', 'http://x', '--key', 'k', '--command', 'x', '--bogus'], /Unknown option '--bogus'/],
    [['--server', 'http://x', '--key', 'k', '--command', "python 'train.py"], /^--command: unterminated ' quote in the command line$/],
    [['--server', 'http://x', '--key', 'k', '--command', 'x', '--resident', 'yes'], /--resident must be on or off/],
    [['--server', 'http://x', '--key', 'k', '--command', 'x', '--release-seconds=-1'], /--release-seconds must be at least 0/],
  ])('refuses %j', (argv, message) => {
    expect(() => loadWorkerOptions(argv, {})).toThrow(WorkerUsageError);
    expect(() => loadWorkerOptions(argv, {})).toThrow(message);
  });
});
