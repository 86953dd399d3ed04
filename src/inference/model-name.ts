/**
 * Reads the `model` a client sent. Trained checkpoints are named `entity/project/name`, optionally
 * with `:stepN` or `:latest`, bare or behind `wandb-artifact:///` (the form ART's serverless backend
 * builds) or `wandb-artifact://`. Anything else is a base model name, looked up as served.
 */

export type CheckpointStep = number | 'latest';

export interface CheckpointRef {
  kind: 'checkpoint';
  entity: string;
  project: string;
  /** The trained model's name within its project. */
  model: string;
  step: CheckpointStep;
}

export interface BaseModelRef {
  kind: 'base';
  name: string;
}

export interface InvalidModelRef {
  kind: 'invalid';
  reason: string;
}

export type ModelRef = CheckpointRef | BaseModelRef | InvalidModelRef;

const ARTIFACT_PREFIXES = ['wandb-artifact:///', 'wandb-artifact://'];
/** One segment of a checkpoint name (entity, project or model name); model registration holds names to it. */
export const NAME_SEGMENT = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
const STEP = /^step(\d+)$/;

/**
 * A three-segment name without the artifact prefix is read as a checkpoint. Engines may serve base
 * names of that shape too, so the router checks served base names before trusting this reading.
 */
export function parseModelName(id: string): ModelRef {
  const prefix = ARTIFACT_PREFIXES.find((p) => id.startsWith(p));
  const rest = prefix ? id.slice(prefix.length) : id;
  const parsed = parseCheckpoint(rest);
  if (typeof parsed !== 'string') return parsed;
  return prefix ? { kind: 'invalid', reason: `${id} is not a checkpoint reference: ${parsed}` } : { kind: 'base', name: id };
}

function parseCheckpoint(text: string): CheckpointRef | string {
  const colon = text.lastIndexOf(':');
  const path = colon === -1 ? text : text.slice(0, colon);
  const version = colon === -1 ? null : text.slice(colon + 1);
  const segments = path.split('/');
  if (segments.length !== 3) return 'expected entity/project/name[:stepN|:latest]';
  if (!segments.every((s) => NAME_SEGMENT.test(s))) return 'entity, project and name must be letters, digits, ".", "_" or "-"';

  let step: CheckpointStep = 'latest';
  if (version !== null && version !== 'latest') {
    const match = STEP.exec(version);
    if (!match) return `unknown version ${JSON.stringify(version)}, expected stepN or latest`;
    step = Number(match[1]);
    if (!Number.isSafeInteger(step)) return `step ${match[1]} is too large`;
  }
  const [entity, project, model] = segments;
  return { kind: 'checkpoint', entity, project, model, step };
}

/** The name training clients use for a checkpoint (without the artifact prefix). */
export function formatCheckpointName(ref: Omit<CheckpointRef, 'kind'>): string {
  const base = `${ref.entity}/${ref.project}/${ref.model}`;
  return ref.step === 'latest' ? base : `${base}:step${ref.step}`;
}

/**
 * Whether an engine's model id is shaped like a checkpoint adapter (`entity/project/name:stepN`,
 * optionally with `@<hash>`). Such ids are never taken as base models: an engine that lists adapters
 * without a `parent` (not vLLM) would otherwise make one tenant's checkpoint a base model for all.
 */
export function isAdapterShaped(id: string): boolean {
  return ADAPTER_SHAPE.test(id);
}

const ADAPTER_SHAPE = /^[^/\s]+\/[^/\s]+\/[^/\s]+:step\d+(@[0-9a-f]+)?$/;
