import { EventEmitter } from 'node:events';

/**
 * Things one area does that another must react to, without importing it: the inference router
 * unloads an engine's adapter when training deletes the checkpoint behind it, and routes `latest` to a
 * checkpoint as soon as it lands.
 */
export interface DomainEventMap {
  /** Checkpoints removed (by step, or all of a deleted model). `uris` and `ids` are theirs, in the order of `steps`. */
  'checkpoints-deleted': [{ entity: string; project: string; model: string; steps: number[]; uris: string[]; ids: string[] }];
  /** A training job registered a checkpoint of this model (its complete committed). */
  'checkpoint-landed': [{ modelId: string }];
}

export class DomainEvents extends EventEmitter<DomainEventMap> {}
