import type { Logger } from 'pino';
import type { ResidentTrainer } from '../training/schemas.js';
import { warnLongLine, type TrainerProcess } from './trainer-process.js';

/**
 * The resident trainer of one worker slot (one device set): a trainer process that finished its job with a
 * `job_end` line and waits on stdin for the next one, so that its base model stays loaded. A slot holds at
 * most one; a job takes it (or starts a new process) and gives it back only when its job ended cleanly.
 */
export class ResidentTrainerSlot {
  private idle: TrainerProcess | undefined;
  private held: ResidentTrainer | undefined;

  constructor(private readonly logger: Logger) {}

  /** What the waiting trainer holds (reported with claims, shown by /v1/admin/workers); undefined when none waits. */
  get holds(): ResidentTrainer | undefined {
    return this.idle && !this.idle.hasExited ? this.held : undefined;
  }

  /** The waiting trainer, if one is still alive; the caller owns it from now on. */
  take(): TrainerProcess | undefined {
    const trainer = this.idle;
    this.idle = this.held = undefined;
    return trainer && !trainer.hasExited ? trainer : undefined;
  }

  /** Keeps a trainer whose job ended for the next job; what it prints meanwhile is logged. */
  keep(trainer: TrainerProcess, holds: ResidentTrainer): void {
    const log = this.logger.child({ source: 'trainer', pid: trainer.pid, idle: true });
    trainer.attach({
      onStdoutLine: (line) => log.info({ stream: 'stdout' }, line),
      onStderrLine: (line) => log.info({ stream: 'stderr' }, line),
      onLongLine: warnLongLine(log),
    });
    this.idle = trainer;
    this.held = holds;
    void trainer.exited.then((exit) => {
      if (this.idle !== trainer) return;
      this.idle = this.held = undefined;
      log.warn({ code: exit.code, signal: exit.signal }, 'the resident trainer exited between jobs; the next job starts a new one');
    });
  }

  /** Ends the waiting trainer, if any: stdin closed, then SIGTERM and SIGKILL after `graceMs` each. */
  async close(graceMs: number): Promise<void> {
    const trainer = this.take();
    if (!trainer) return;
    const exit = await trainer.release(graceMs);
    this.logger.info({ pid: trainer.pid, code: exit.code, signal: exit.signal }, 'resident trainer stopped');
  }
}
