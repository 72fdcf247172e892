/**
 * Large reads (a large organization's whole user list: GET /users, register with realm_user) take
 * turns: at most one at a time per user, and at most `maxInFlight` per instance. Each
 * one keeps a pooled connection, megabytes of rows and its share of the event loop's slices
 * (src/lib/slices.ts) until its answer is built; without turns, one account with many connections
 * started as many at once, and everyone else's requests waited behind all of them. The others
 * wait in arrival order, holding nothing but their request.
 */
export class LargeReadTurns {
  #inFlight = 0;
  readonly #waiting: (() => void)[] = [];
  /** Per user, the end of the last read of theirs started or waiting. */
  readonly #lastOfUser = new Map<number, Promise<void>>();

  constructor(private readonly maxInFlight: number) {}

  /** Runs `read` in `userId`'s turn, once the instance has room for it. */
  async run<T>(userId: number, read: () => Promise<T>): Promise<T> {
    const previous = this.#lastOfUser.get(userId);
    let finished!: () => void;
    const mine = new Promise<void>((resolve) => (finished = resolve));
    this.#lastOfUser.set(userId, mine);
    try {
      if (previous) await previous;
      await this.#enter();
      try {
        return await read();
      } finally {
        this.#leave();
      }
    } finally {
      finished();
      if (this.#lastOfUser.get(userId) === mine) this.#lastOfUser.delete(userId);
    }
  }

  /** Reads running now (for tests and metrics). */
  get inFlight(): number {
    return this.#inFlight;
  }

  async #enter(): Promise<void> {
    if (this.#inFlight < this.maxInFlight) {
      this.#inFlight++;
      return;
    }
    // #leave hands its place over: the count stays as it is.
    await new Promise<void>((resolve) => this.#waiting.push(resolve));
  }

  #leave(): void {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#inFlight--;
  }
}

/**
 * The instance's turns. Two at a time: the slices already share one budget of the event loop
 * whatever the number of reads, so more would only hold more connections and memory at once.
 */
export const largeReadTurns = new LargeReadTurns(2);
