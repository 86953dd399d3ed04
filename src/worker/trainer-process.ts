import { spawn, type ChildProcess } from 'node:child_process';
import readline from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
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
}

function isJobEndLine(line: string): boolean {
  return line.trimStart().startsWith('{') && parseTrainerLine(line).kind === 'job_end';
}

/** The environment variable that offers residency to a trainer command. */
export const RESIDENT_OFFER_ENV = 'TRAINYARD_RESIDENT';

/** How long stdout may stay open after the command exited (a grandchild holding the pipe). */
const DRAIN_AFTER_EXIT_MS = 5_000;

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
    this.handlers = { onStdoutLine: options.onStdoutLine, onStderrLine: options.onStderrLine };
    const [file, ...args] = options.command;
    this.child = spawn(file, [...args, options.specPath], {
      cwd: options.cwd,
      env: { ...options.env, TRAINYARD_JOB_SPEC: options.specPath, ...(options.resident ? { [RESIDENT_OFFER_ENV]: '1' } : {}) },
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: true,
    });
    this.child.stdin?.on('error', () => {}); // EPIPE when the trainer closes its stdin: not our concern

    const stdoutDone = new Promise<void>((resolve) => {
      const lines = readline.createInterface({ input: this.child.stdout!, crlfDelay: Infinity });
      lines.on('line', (line) => this.handlers.onStdoutLine(line));
      lines.on('close', resolve);
    });
    const stderrDone = new Promise<void>((resolve) => {
      const lines = readline.createInterface({ input: this.child.stderr!, crlfDelay: Infinity });
      lines.on('line', (line) => {
        // A resident trainer's job_end copy on stderr marks where its job's stderr ends; it is not the job's output.
        if (!isJobEndLine(line)) this.tail = (this.tail + line + '\n').slice(-this.tailBytes);
        this.handlers.onStderrLine(line);
      });
      lines.on('close', resolve);
    });

    this.exited = new Promise<TrainerExit>((resolve) => {
      this.child.once('error', (error) => {
        // Spawn failures emit 'error' and no 'exit'; errors of a running child (kill failing) are ignored.
        if (this.child.pid === undefined) resolve({ code: null, signal: null, spawnError: error });
      });
      this.child.once('exit', (code, signal) => {
        const drained = Promise.all([stdoutDone, stderrDone]);
        const patience = new AbortController();
        const gaveUp = sleep(DRAIN_AFTER_EXIT_MS, undefined, { signal: patience.signal }).catch(() => {});
        void Promise.race([drained, gaveUp]).then(() => {
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
    return this.tail.slice(-maxChars);
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
   * the command left behind in its group are killed too.
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
    this.signal('SIGKILL');
    return exit;
  }
}
