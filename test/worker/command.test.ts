import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { findExecutable, splitCommandLine } from '../../src/worker/command.js';

describe('splitCommandLine', () => {
  it.each([
    ['python train.py', ['python', 'train.py']],
    ['  python   -m  trainer  ', ['python', '-m', 'trainer']],
    [`python train.py --name 'my run' --tag "a b"`, ['python', 'train.py', '--name', 'my run', '--tag', 'a b']],
    [String.raw`echo "say \"hi\"" 'it''s' a\ b`, ['echo', 'say "hi"', 'its', 'a b']],
    [`run "" ''`, ['run', '', '']],
    [String.raw`sh -c 'exec python train.py "$1"' --`, ['sh', '-c', 'exec python train.py "$1"', '--']],
  ])('splits %j', (line, words) => {
    expect(splitCommandLine(line)).toEqual(words);
  });

  it('refuses an unterminated quote', () => {
    expect(() => splitCommandLine(`python "train.py`)).toThrow(/unterminated " quote/);
  });
});

describe('findExecutable', () => {
  it('finds a program on PATH', () => {
    expect(findExecutable('node', { PATH: path.dirname(process.execPath) })).toBe(process.execPath);
  });

  it('finds a path relative to the working directory only when it is executable', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'worker-exe-'));
    fs.writeFileSync(path.join(dir, 'train.sh'), '#!/bin/sh\n', { mode: 0o644 });
    expect(findExecutable('./train.sh', {}, dir)).toBeUndefined();
    fs.chmodSync(path.join(dir, 'train.sh'), 0o755);
    expect(findExecutable('./train.sh', {}, dir)).toBe(path.join(dir, 'train.sh'));
  });

  it('answers undefined for a name that is nowhere on PATH', () => {
    expect(findExecutable('no-such-trainer-here', { PATH: '/nonexistent' })).toBeUndefined();
  });
});
