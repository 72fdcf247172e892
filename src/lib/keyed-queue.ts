/** How a call holds its key: alone, or together with the key's other shared calls. */
export type QueueMode = 'shared' | 'exclusive';

interface KeyState {
  /** Shared calls let through by the key (running, or waiting for room under the limit). */
  shared: number;
  /** Whether an exclusive call is let through. */
  exclusive: boolean;
  /** Calls waiting for the key, in call order. */
  waiting: { mode: QueueMode; start: () => void }[];
}

/**
 * Async calls queued per key within this process, in call order. An exclusive call (the default)
 * runs alone for its key; shared calls of a key run together; calls of different keys run at once,
 * at most `limit` of them in the whole queue: the others wait for room in call order, keeping
 * their key's place. A shared call waits behind an exclusive one that came before it (even while
 * other shared calls run), so shared calls cannot starve an exclusive one. A failed call, rejected
 * or thrown, does not block the ones after it.
 */
export class KeyedQueue<K> {
  /** Per key, what runs and waits; removed once nothing does. */
  readonly #keys = new Map<K, KeyState>();
  /** Calls let through by their key, waiting for room under the limit. */
  readonly #waitingForRoom: (() => void)[] = [];
  #running = 0;

  constructor(private readonly limit = Infinity) {}

  run<T>(key: K, work: () => Promise<T>, mode: QueueMode = 'exclusive'): Promise<T> {
    let state = this.#keys.get(key);
    if (!state) this.#keys.set(key, (state = { shared: 0, exclusive: false, waiting: [] }));
    const keyState = state;
    if (keyState.waiting.length === 0 && admits(keyState, mode)) {
      enter(keyState, mode);
      // Started at once, in the caller's turn of the event loop, when nothing holds it back.
      if (this.#takeRoom()) return this.#start(key, keyState, mode, work);
      return new Promise<void>((start) => this.#waitingForRoom.push(start)).then(() => this.#start(key, keyState, mode, work));
    }
    return new Promise<void>((start) => keyState.waiting.push({ mode, start })).then(() => this.#start(key, keyState, mode, work));
  }

  /** Keys with a call running or waiting (for tests: the map must not grow without bound). */
  get activeKeys(): number {
    return this.#keys.size;
  }

  /** Calls running now. */
  get running(): number {
    return this.#running;
  }

  // No named closures per call: tsx (npm start, tests) wraps each in a property definition.
  #start<T>(key: K, state: KeyState, mode: QueueMode, work: () => Promise<T>): Promise<T> {
    let result: Promise<T>;
    try {
      result = work();
    } catch (error) {
      result = Promise.reject(error);
    }
    // Not finally(): it costs two more promises per call.
    return result.then(
      (value) => (this.#release(key, state, mode), value),
      (error: unknown) => {
        this.#release(key, state, mode);
        throw error;
      },
    );
  }

  #takeRoom(): boolean {
    if (this.#running >= this.limit) return false;
    this.#running++;
    return true;
  }

  #release(key: K, state: KeyState, mode: QueueMode): void {
    // Its room goes to the next call waiting for it: the count stays as it is.
    const next = this.#waitingForRoom.shift();
    if (next) next();
    else this.#running--;
    if (mode === 'shared') state.shared--;
    else state.exclusive = false;
    // The key lets its waiting calls through in order while they fit: one exclusive call, or a run of shared ones.
    while (state.waiting.length > 0 && admits(state, state.waiting[0]!.mode)) {
      const { mode: nextMode, start } = state.waiting.shift()!;
      enter(state, nextMode);
      if (this.#takeRoom()) start();
      else this.#waitingForRoom.push(start);
    }
    if (state.shared === 0 && !state.exclusive && state.waiting.length === 0) this.#keys.delete(key);
  }
}

const admits = (state: KeyState, mode: QueueMode) => !state.exclusive && (mode === 'shared' || state.shared === 0);

function enter(state: KeyState, mode: QueueMode): void {
  if (mode === 'shared') state.shared++;
  else state.exclusive = true;
}

/**
 * The large reads' queue (a large organization's user list: GET /users, register with realm_user):
 * one at a time per user, so that one account's many connections cannot put everyone else behind
 * theirs, and two per instance. Each holds a pooled connection, megabytes of rows and slices of the
 * event loop (src/lib/slices.ts); the slices share one budget whatever the number of reads, so more
 * would only hold more connections and memory at once.
 */
export const largeReads = new KeyedQueue<number>(2);
