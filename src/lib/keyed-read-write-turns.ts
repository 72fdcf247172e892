/** How a call holds its key's turn: alone, or together with the other shared calls. */
export type TurnMode = 'shared' | 'exclusive';

interface KeyState {
  /** Shared calls running. */
  shared: number;
  /** Whether an exclusive call is running. */
  exclusive: boolean;
  /** Calls waiting, in call order. */
  waiting: { mode: TurnMode; start: () => void }[];
}

/**
 * A readers-writer turn per key within this process: an exclusive call runs alone, shared calls
 * of a key run together, and calls of different keys run concurrently. Calls are admitted in call
 * order: a shared call waits behind an exclusive one that came before it (even while other shared
 * calls run), so a stream of shared calls cannot starve an exclusive one. A failed call does not
 * block the ones after it.
 */
export class KeyedReadWriteTurns<K> {
  /** Per key, what runs and waits; removed once nothing does. */
  private readonly states = new Map<K, KeyState>();

  run<T>(key: K, mode: TurnMode, work: () => Promise<T>): Promise<T> {
    let state = this.states.get(key);
    if (!state) {
      state = { shared: 0, exclusive: false, waiting: [] };
      this.states.set(key, state);
    }
    const keyState = state;
    const runWork = (): Promise<T> => {
      let result: Promise<T>;
      try {
        result = work();
      } catch (error) {
        result = Promise.reject(error);
      }
      const release = () => this.release(key, keyState, mode);
      return result.finally(release);
    };
    if (keyState.waiting.length === 0 && admits(keyState, mode)) {
      enter(keyState, mode);
      return runWork();
    }
    return new Promise<void>((resolve) => keyState.waiting.push({ mode, start: resolve })).then(runWork);
  }

  /** Keys with a call running or waiting (for tests: the map must not grow without bound). */
  get activeKeys(): number {
    return this.states.size;
  }

  private release(key: K, state: KeyState, mode: TurnMode): void {
    if (mode === 'shared') state.shared--;
    else state.exclusive = false;
    // Admits the waiting calls in order while they fit: one exclusive call, or a run of shared ones.
    while (state.waiting.length > 0 && admits(state, state.waiting[0]!.mode)) {
      const next = state.waiting.shift()!;
      enter(state, next.mode);
      next.start();
    }
    if (state.shared === 0 && !state.exclusive && state.waiting.length === 0) this.states.delete(key);
  }
}

const admits = (state: KeyState, mode: TurnMode) => !state.exclusive && (mode === 'shared' || state.shared === 0);

function enter(state: KeyState, mode: TurnMode): void {
  if (mode === 'shared') state.shared++;
  else state.exclusive = true;
}
