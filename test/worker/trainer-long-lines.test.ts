import { describe, expect, it } from 'vitest';
import { MAX_LINE_CHARS, TrainerProcess } from '../../src/worker/trainer-process.js';

/** Runs `script` (an ES module) as the trainer command and collects what the worker gets of its output. */
async function run(script: string) {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const cut: string[] = [];
  const trainer = new TrainerProcess({
    command: [process.execPath, '--input-type=module', '-e', script],
    specPath: '/dev/null',
    env: { PATH: process.env.PATH },
    groupGraceMs: 1000,
    onStdoutLine: (line) => stdout.push(line),
    onStderrLine: (line) => stderr.push(line),
    onLongLine: (stream) => cut.push(stream),
  });
  const exit = await trainer.exited;
  return { exit, stdout, stderr, cut, trainer };
}

describe('trainer output lines past the limit', () => {
  it('keep their first MAX_LINE_CHARS characters on both streams, and the lines after them', async () => {
    // 3 MiB without a line end, twice on each stream, then ordinary lines.
    const { exit, stdout, stderr, cut, trainer } = await run(`
      const big = 'A'.repeat(1 << 20);
      const write = (stream, text) => new Promise((resolve) => (stream.write(text) ? resolve() : stream.once('drain', resolve)));
      for (const stream of [process.stdout, process.stderr]) {
        for (let line = 0; line < 2; line++) {
          for (let i = 0; i < 3; i++) await write(stream, big);
          await write(stream, '\\n');
        }
        await write(stream, 'after\\r\\nlast');
      }
    `);
    expect(exit).toEqual({ code: 0, signal: null });
    for (const lines of [stdout, stderr]) {
      expect(lines.map((line) => line.length)).toEqual([MAX_LINE_CHARS, MAX_LINE_CHARS, 5, 4]);
      expect(lines[0]).toBe('A'.repeat(MAX_LINE_CHARS));
      expect(lines.slice(2)).toEqual(['after', 'last']);
    }
    // Told once per stream, however many lines were cut.
    expect(cut.sort()).toEqual(['stderr', 'stdout']);
    expect(trainer.stderrTail()).toMatch(/A\nafter\nlast\n$/);
    expect(trainer.stderrTail().length).toBeLessThanOrEqual(8192);
  });

  it('are cut between the halves of no surrogate pair', async () => {
    const { stdout, cut } = await run(`process.stdout.write('x'.repeat(${MAX_LINE_CHARS - 1}) + '😀 and more\\nnext\\n');`);
    expect(stdout).toEqual(['x'.repeat(MAX_LINE_CHARS - 1), 'next']);
    expect(cut).toEqual(['stdout']);
  });
});
