/**
 * What API keys hold in this process, counted per key and bounded: the claims a worker key has waiting, the
 * job event streams a key has open. A key at its bound is refused the next one.
 */
export class KeySlots {
  private readonly byKey = new Map<string, number>();
  /** Slots held by all keys together. */
  total = 0;

  constructor(private readonly perKey: number) {}

  /** Takes one of `keyId`'s slots, or throws `refusal()` when it holds `perKey` already. */
  take(keyId: string, refusal: () => Error): void {
    const held = this.byKey.get(keyId) ?? 0;
    if (held >= this.perKey) throw refusal();
    this.byKey.set(keyId, held + 1);
    this.total++;
  }

  /** Gives one of `keyId`'s slots back. */
  free(keyId: string): void {
    const held = (this.byKey.get(keyId) ?? 1) - 1;
    if (held > 0) this.byKey.set(keyId, held);
    else this.byKey.delete(keyId);
    this.total--;
  }
}
