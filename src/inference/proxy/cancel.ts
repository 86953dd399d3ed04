/**
 * What the upstream client needs of a cancellation signal; an AbortSignal is one. `Cancel` is a light
 * one: Node's AbortController costs about 5 µs to create and wire (EventTarget), and a proxied
 * request needs two (the client's connection and the upstream request), which showed in profiles.
 * undici accepts either as its `signal`.
 */
export interface CancelSignal {
  readonly aborted: boolean;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

export class Cancel implements CancelSignal {
  aborted = false;
  private listeners: (() => void)[] | undefined;

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const listeners = this.listeners;
    this.listeners = undefined;
    if (listeners) for (const listener of listeners) listener();
  }

  /** Listeners run once, on the first abort. */
  addEventListener(_type: 'abort', listener: () => void): void {
    if (this.aborted) return;
    (this.listeners ??= []).push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const index = this.listeners?.indexOf(listener) ?? -1;
    if (index !== -1) this.listeners!.splice(index, 1);
  }
}

/** Resolves after `ms`, or rejects with `onAbort()` as soon as the signal fires. */
export function sleep(ms: number, signal: CancelSignal | undefined, onAbort: () => Error): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(onAbort());
    const stop = () => {
      clearTimeout(timer);
      reject(onAbort());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', stop);
      resolve();
    }, ms);
    signal?.addEventListener('abort', stop, { once: true });
  });
}
