import { UNSTORABLE_CHARACTER } from '../db/refusals.js';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../http/json-depth.js';
import { TRAINING_LIMITS, type WorkerEvent } from '../training/schemas.js';

/**
 * The trainer command's stdout contract: one JSON object per line.
 *
 *   {"type":"training_started","data":{"num_sequences":N, ...}}
 *   {"type":"gradient_step","data":{"loss":0.12, ...}}        numbers only
 *   {"type":"checkpoint","uri":"...","metrics":{...}}         the last one wins
 *   {"type":"job_end","spec_path":"...","exit_code":0|3}      a resident trainer's job is over (numbers may follow)
 *
 * Anything else (progress bars, prints, JSON of other types) is `other`: logged by the worker, never
 * forwarded. Values the server would refuse are dropped here with a note, so that one sloppy metric does
 * not cost the whole batch a 422.
 */
export type TrainerLine =
  | { kind: 'event'; event: WorkerEvent; dropped: string[] }
  | { kind: 'checkpoint'; checkpoint: { uri: string; metrics: Record<string, number> }; dropped: string[] }
  | { kind: 'job_end'; specPath: string; exitCode: number; usage: Record<string, number> }
  | { kind: 'other'; line: string; problem?: string };

export function parseTrainerLine(raw: string): TrainerLine {
  const line = raw.trim();
  const other = (problem?: string): TrainerLine => ({ kind: 'other', line: raw, ...(problem ? { problem } : {}) });
  if (!line.startsWith('{')) return other();
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return other();
  }
  if (!isObject(value) || typeof value.type !== 'string') return other();

  switch (value.type) {
    case 'training_started': {
      const data = isObject(value.data) ? value.data : {};
      const n = data.num_sequences;
      if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) {
        return other('training_started needs data.num_sequences, a non-negative integer');
      }
      const { num_sequences: _n, ...rest } = data;
      // The server's bounds on training_started data: those of a metric map (num_sequences is one of its keys),
      // no value nested past MAX_JSON_DEPTH (the data object is one level of it), and text PostgreSQL stores.
      const { kept, dropped } = boundedEntries(rest, (item) => !nestsDeeperThan(item, MAX_JSON_DEPTH - 1) && !holdsUnstorableText(item), 1);
      return { kind: 'event', event: { type: 'training_started', data: { num_sequences: n, ...kept } }, dropped };
    }
    case 'gradient_step': {
      if (!isObject(value.data)) return other('gradient_step needs a data object of numbers');
      const { numbers, dropped } = finiteNumbers(value.data);
      return { kind: 'event', event: { type: 'gradient_step', data: numbers }, dropped };
    }
    case 'checkpoint': {
      if (typeof value.uri !== 'string' || value.uri === '') return other('checkpoint needs uri, a non-empty string');
      const { numbers, dropped } = isObject(value.metrics) ? finiteNumbers(value.metrics) : { numbers: {}, dropped: [] };
      return { kind: 'checkpoint', checkpoint: { uri: value.uri, metrics: numbers }, dropped };
    }
    case 'job_end': {
      const { spec_path: specPath, exit_code: exitCode, type: _type, ...rest } = value;
      if (typeof specPath !== 'string' || typeof exitCode !== 'number' || !Number.isInteger(exitCode)) {
        return other('job_end needs spec_path, a string, and exit_code, an integer');
      }
      return { kind: 'job_end', specPath, exitCode, usage: finiteNumbers(rest).numbers };
    }
    default:
      return other();
  }
}

/** The finite numbers of a map, within the server's bounds on metric maps; the rest is dropped. */
function finiteNumbers(data: Record<string, unknown>): { numbers: Record<string, number>; dropped: string[] } {
  const { kept, dropped } = boundedEntries(data, (item) => typeof item === 'number' && Number.isFinite(item));
  return { numbers: kept as Record<string, number>, dropped };
}

/**
 * The entries of a map the server takes: `accept`ed values under keys of at most TRAINING_LIMITS.metricName
 * characters that PostgreSQL can store, and at most TRAINING_LIMITS.metrics keys, of which the caller adds
 * `reserved` of its own. The keys of the rest are listed as dropped (long ones shortened).
 */
function boundedEntries(
  data: Record<string, unknown>,
  accept: (item: unknown) => boolean,
  reserved = 0,
): { kept: Record<string, unknown>; dropped: string[] } {
  const kept: Record<string, unknown> = {};
  const dropped: string[] = [];
  let count = reserved;
  for (const [key, item] of Object.entries(data)) {
    const fits = key.length <= TRAINING_LIMITS.metricName && !UNSTORABLE_CHARACTER.test(key) && count < TRAINING_LIMITS.metrics;
    if (fits && accept(item)) {
      kept[key] = item;
      count++;
    } else {
      dropped.push(key.length > 64 ? `${key.slice(0, 64)}…` : key);
    }
  }
  return { kept, dropped };
}

/** Whether a JSON value holds U+0000 or a lone surrogate in a string or key: PostgreSQL refuses either. */
function holdsUnstorableText(value: unknown): boolean {
  if (typeof value === 'string') return UNSTORABLE_CHARACTER.test(value);
  if (value === null || typeof value !== 'object') return false;
  return Object.entries(value).some(([key, item]) => UNSTORABLE_CHARACTER.test(key) || holdsUnstorableText(item));
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The server's order rule for one attempt (src/training/protocol.ts): `training_started` first and once.
 * A trainer that skips it gets one made up from the job's input count before its first gradient step (the
 * ART client waits for it); a repeated one is dropped.
 */
export class EventOrder {
  private started = false;

  constructor(private readonly numInputs: number) {}

  /** The events to post for one the trainer printed, and a note when something was changed. */
  admit(event: WorkerEvent): { events: WorkerEvent[]; note?: string } {
    if (event.type === 'training_started') {
      if (this.started) return { events: [], note: 'training_started was already sent for this attempt; dropped' };
      this.started = true;
      return { events: [event] };
    }
    if (!this.started) {
      this.started = true;
      return {
        events: [{ type: 'training_started', data: { num_sequences: this.numInputs } }, event],
        note: `${event.type} before training_started; sent training_started {num_sequences: ${this.numInputs}} first`,
      };
    }
    return { events: [event] };
  }
}
