import { spawn, type ChildProcess } from 'node:child_process';
import type { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { headOf, tailOf } from './text.js';
import { parseTrainerLine } from './trainer-output.js';

export interface TrainerExit {
  /** Exit status, or null when killed by a signal or never started. */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Set when the command could not be started at all (ENOENT, EACCES). */
  spawnError?: Error;
}

export interface TrainerHandlers {
  onStdoutLine(line: string): void;
  onStderrLine(line: string): void;
  /** A line of `stream` was longer than MAX_LINE_CHARS and was cut; called once per stream and process. */
  onLongLine(stream: 'stdout' | 'stderr'): void;
}

export interface StartTrainerOptions extends TrainerHandlers {
  /** argv of the trainer command; the spec path is appended. */
  command: readonly string[];
  specPath: string;
  env: Readonly<Record<string, string | undefined>>;
  cwd?: string;
  /** Offer residency (`TRAINYARD_RESIDENT=1`): the trainer may ask for further jobs on stdin instead of exiting. */
  resident?: boolean;
  /** Bytes of stderr kept for the failure message. */
  stderrTailBytes?: number;
  /**
   * When the command exits, what it left behind in its process group gets SIGTERM, and SIGKILL after this
   * long if any of it is still there.
   */
  groupGraceMs: number;
}

function isJobEndLine(line: string): boolean {
  return line.trimStart().startsWith('{') && parseTrainerLine(line).kind === 'job_end';
}

/** The environment variable that offers residency to a trainer command. */
export const RESIDENT_OFFER_ENV = 'TRAINYARD_RESIDENT';

/** How long stdout may stay open after the command exited (a grandchild holding the pipe). */
const DRAIN_AFTER_EXIT_MS = 5_000;

/** Characters of one line of the command's output that are kept (1 MiB of ASCII); the rest of a longer line is dropped. */
export const MAX_LINE_CHARS = 1 << 20;

/** The onLongLine handler that logs the cut to `log` (the trainer's log, during a job or between jobs). */
export function warnLongLine(log: { warn(details: Record<string, unknown>, message: string): void }): TrainerHandlers['onLongLine'] {
  return (stream) => log.warn({ stream, max_chars: MAX_LINE_CHARS }, 'a trainer line was longer than the limit; only its start was kept');
}

/** How often the command's process group is looked at while what is left of it gets its grace period. */
const GROUP_POLL_MS = 100;

/**
 * Calls `onLine` for each line of `stream`, split as readline splits them (at \n, \r\n or \r; a last line
 * may lack its end). Of a line longer than `maxChars` only the first `maxChars` characters are kept, and
 * `onCut` is called: the rest is dropped as it arrives, so that output without line ends (a binary dump, a
 * progress display gone wrong) holds no more than that in memory. Resolves once the stream is closed.
 */
function readLines(stream: Readable, maxChars: number, onLine: (line: string) => void, onCut: () => void): Promise<void> {
  let line = '';
  let cut = false;
  // The previous chunk ended with \r: a \n at the start of the next one ends no further line.
  let afterCr = false;
  const take = (text: string) => {
    if (cut || text === '') return;
    if (line.length + text.length <= maxChars) {
      line += text;
      return;
    }
    line = headOf(line + text.slice(0, maxChars - line.length + 1), maxChars);
    cut = true;
    onCut();
  };
  const end = () => {
    const done = line;
    line = '';
    cut = false;
    onLine(done);
  };
  stream.setEncoding('utf8');
  stream.on('data', (chunk: string) => {
    const breaks = /\r\n|\r|\n/g;
    let start = afterCr && chunk.startsWith('\n') ? 1 : 0;
    breaks.lastIndex = start;
    for (let match = breaks.exec(chunk); match; match = breaks.exec(chunk)) {
      take(chunk.slice(start, match.index));
      end();
      start = breaks.lastIndex;
    }
    take(chunk.slice(start));
    afterCr = chunk.endsWith('\r');
  });
  stream.once('end', () => {
    if (line !== '') end();
  });
  return new Promise((resolve) => stream.once('close', resolve));
}

/**
 * One run of the trainer command. It gets its own process group, so that signals reach the trainer's
 * own children too (torchrun, dataloader workers) and a Ctrl-C at the worker's terminal reaches only the
 * worker, which then decides how the job ends. stdin is an open pipe that is written only to hand a resident
 * trainer its next job: it reaches end-of-file when the worker dies, which an orphaned trainer can watch for.
 */
export class TrainerProcess {
  readonly exited: Promise<TrainerExit>;
  private readonly child: ChildProcess;
  private tail = '';
  private readonly tailBytes: number;
  private handlers: TrainerHandlers;

  constructor(options: StartTrainerOptions) {
    this.tailBytes = options.stderrTailBytes ?? 8192;
    this.handlers = { onStdoutLine: options.onStdoutLine, onStderrLine: options.onStderrLine, onLongLine: options.onLongLine };
    const [file, ...args] = options.command;
    this.child = spawn(file, [...args, options.specPath], {
      cwd: options.cwd,
      env: { ...options.env, TRAINYARD_JOB_SPEC: options.specPath, ...(options.resident ? { [RESIDENT_OFFER_ENV]: '1' } : {}) },
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    this.child.stdin?.on('error', () => {}); // EPIPE when the trainer closes its stdin: not our concern

    const cutOnce = (stream: 'stdout' | 'stderr') => {
      let told = false;
      return () => {
        if (!told) this.handlers.onLongLine(stream);
        told = true;
      };
    };
    const stdoutDone = readLines(this.child.stdout!, MAX_LINE_CHARS, (line) => this.handlers.onStdoutLine(line), cutOnce('stdout'));
    const stderrDone = readLines(
      this.child.stderr!,
      MAX_LINE_CHARS,
      (line) => {
        // A resident trainer's job_end copy on stderr marks where its job's stderr ends; it is not the job's output.
        if (!isJobEndLine(line)) this.tail = tailOf(this.tail + line + '\n', this.tailBytes);
        this.handlers.onStderrLine(line);
      },
      cutOnce('stderr'),
    );

    this.exited = new Promise<TrainerExit>((resolve) => {
      this.child.once('error', (error) => {
        // Spawn failures emit 'error' and no 'exit'; errors of a running child (kill failing) are ignored.
        if (this.child.pid === undefined) resolve({ code: null, signal: null, spawnError: error });
      });
      this.child.once('exit', (code, signal) => {
        // Nothing of the command outlives it: children it left in its group (a dataloader worker, an engine it
        // started) would hold on to the GPU's memory.
        const leftovers = this.stopGroup(options.groupGraceMs);
        const drained = Promise.all([stdoutDone, stderrDone]);
        const patience = new AbortController();
        const gaveUp = sleep(DRAIN_AFTER_EXIT_MS, undefined, { signal: patience.signal }).catch(() => {});
        void Promise.all([Promise.race([drained, gaveUp]), leftovers]).then(() => {
          patience.abort();
          this.child.stdout?.destroy();
          this.child.stderr?.destroy();
          this.child.stdin?.destroy();
          resolve({ code, signal });
        });
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** True once the process has exited (or never started). */
  get hasExited(): boolean {
    return this.child.pid === undefined || this.child.exitCode !== null || this.child.signalCode !== null;
  }

  /** Where the process's output lines go from now on (a resident trainer's next job, or the idle log). */
  attach(handlers: TrainerHandlers): void {
    this.handlers = handlers;
  }

  /**
   * Hands a resident trainer its next job on stdin. The stderr tail starts afresh, so that a failure message
   * carries only this job's lines.
   */
  startJob(specPath: string): void {
    this.tail = '';
    this.child.stdin?.write(`${JSON.stringify({ type: 'job', spec_path: specPath })}\n`);
  }

  /**
   * Ends an idle resident trainer: its stdin is closed (no more jobs), then it is terminated if it has not
   * exited after `graceMs`.
   */
  async release(graceMs: number): Promise<TrainerExit> {
    this.child.stdin?.end();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), graceMs)));
    const exit = await Promise.race([this.exited, late]);
    clearTimeout(timer);
    return exit === 'late' ? this.terminate(graceMs) : exit;
  }

  /** The last lines the command wrote to stderr. */
  stderrTail(maxChars = this.tailBytes): string {
    return tailOf(this.tail, maxChars);
  }

  /** Sends a signal to the command's process group (the command and its children). */
  signal(signal: NodeJS.Signals): void {
    const pid = this.child.pid;
    if (pid === undefined) return;
    try {
      process.kill(-pid, signal);
    } catch {
      try {
        this.child.kill(signal);
      } catch {
        // already gone
      }
    }
  }

  /**
   * SIGTERM, then SIGKILL if the command is still there after `graceMs`; resolves once it exited. Children
   * the command left behind in its group are stopped with it (see `groupGraceMs`).
   */
  async terminate(graceMs: number): Promise<TrainerExit> {
    let finished = false;
    void this.exited.then(() => (finished = true));
    this.signal('SIGTERM');
    const timer = setTimeout(() => {
      if (!finished) this.signal('SIGKILL');
    }, graceMs);
    const exit = await this.exited;
    clearTimeout(timer);
    return exit;
  }

  /**
   * Once the command has exited: SIGTERM to what is left of its process group, then SIGKILL after `graceMs`
   * if any of it is still there. Resolves at once when nothing is left.
   */
  private async stopGroup(graceMs: number): Promise<void> {
    const pid = this.child.pid!;
    const signalGroup = (signal: NodeJS.Signals | 0) => {
      try {
        process.kill(-pid, signal);
        return true;
      } catch {
        return false; // the group is gone
      }
    };
    if (!signalGroup('SIGTERM')) return;
    const deadline = Date.now() + graceMs;
    while (Date.now() < deadline) {
      await sleep(GROUP_POLL_MS);
      if (!signalGroup(0)) return;
    }
    signalGroup('SIGKILL');
  }
}
