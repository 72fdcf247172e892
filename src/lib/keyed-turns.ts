/**
 * Runs async work one call at a time per key, in call order, within this process. Calls for
 * different keys run concurrently. A failed call does not block the ones after it.
 */
export class KeyedTurns<K> {
  /** Per key, the settlement of its latest call; removed once nothing waits behind it. */
  private readonly tails = new Map<K, Promise<void>>();

  run<T>(key: K, work: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key);
    const result = previous ? previous.then(work) : work();
    const tail = result.then(
      () => undefined,
      () => undefined,
    );
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return result;
  }

  /** Keys with a call running or waiting (for tests: the map must not grow without bound). */
  get activeKeys(): number {
    return this.tails.size;
  }
}
