import { performance } from 'node:perf_hooks';

/**
 * Long CPU work done a little at a time, so that one request's large answer (a 20,000-user
 * organization's user list) never holds the event loop. All the work waiting here shares ONE budget
 * per turn of the event loop, whatever the number of requests: between two turns everything else
 * runs. The tasks run round robin in arrival order, each until the budget is spent.
 */

/** CPU time large work may take per turn of the event loop (src/db/socket-reads.ts decodes by it too). */
export const SLICE_BUDGET_MS = 1;

/** How many items are processed between two looks at the clock. */
const ITEMS_PER_CLOCK_CHECK = 16;

interface Task {
  /** Works until `deadline` (performance.now()); true once finished. */
  step(deadline: number): boolean;
  resolve(): void;
  reject(error: unknown): void;
  /** Its work happens after step returns (see afterTurnOfSlices): nothing else runs in its turn. */
  fillsTurn?: boolean;
}

const tasks: Task[] = [];
let scheduled = false;

function schedule(): void {
  if (scheduled) return;
  scheduled = true;
  // A timer (Node's shortest, 1 ms), not setImmediate: the process sleeps between two turns. Spinning
  // kept a core busy and lost the kernel's preference for tasks waking from sleep, so on a busy
  // machine small requests waited for a core (bench/RESULTS.md).
  setTimeout(runTurn, 1);
}

function runTurn(): void {
  scheduled = false;
  const deadline = performance.now() + SLICE_BUDGET_MS;
  do {
    const task = tasks.shift()!;
    let finished: boolean;
    try {
      finished = task.step(deadline);
    } catch (error) {
      task.reject(error);
      continue;
    }
    if (finished) task.resolve();
    else tasks.push(task);
    if (task.fillsTurn) break;
  } while (tasks.length > 0 && performance.now() < deadline);
  if (tasks.length > 0) schedule();
}

/**
 * Runs `step` until it returns true (see above): its first slice at once when no other large work
 * is waiting (a small organization's answer is done then, without waiting for a timer), the
 * rest on later turns of the event loop.
 */
function runInSlices(step: (deadline: number) => boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    if (tasks.length === 0 && step(performance.now() + SLICE_BUDGET_MS)) return resolve();
    tasks.push({ step, resolve, reject });
    schedule();
  });
}

const nothing = () => undefined;

/**
 * Runs `start` in a turn of its own, in line with the sliced work: for work that `start` only sets
 * off and that runs right after it (a paused socket resumed: its next chunk is decoded then), so
 * that it cannot be timed against the budget. It counts as the turn's budget instead.
 */
export function afterTurnOfSlices(start: () => void): void {
  tasks.push({ step: () => (start(), true), resolve: nothing, reject: nothing, fillsTurn: true });
  schedule();
}

/** Calls `visit` on each item in order, a slice at a time. */
export async function forEachInSlices<T>(items: readonly T[], visit: (item: T) => void): Promise<void> {
  let next = 0;
  await runInSlices((deadline) => {
    while (next < items.length) {
      const end = Math.min(items.length, next + ITEMS_PER_CLOCK_CHECK);
      for (; next < end; next++) visit(items[next]!);
      if (performance.now() >= deadline) break;
    }
    return next >= items.length;
  });
}

/** `items.map(build)` without the undefined results, a slice at a time. */
export async function mapInSlices<T, U>(items: readonly T[], build: (item: T) => U | undefined): Promise<U[]> {
  const built: U[] = [];
  await forEachInSlices(items, (item) => {
    const result = build(item);
    if (result !== undefined) built.push(result);
  });
  return built;
}

/** A list whose elements are JSON texts already (built by PostgreSQL): jsonInSlices writes them as they are. */
export class JsonTextList {
  constructor(readonly items: readonly string[]) {}
}

/**
 * Exactly the bytes of JSON.stringify(value) for a plain object, as UTF-8 chunks, the elements of its
 * arrays serialized a slice at a time; a JsonTextList among its values is written as the array of its texts.
 */
export async function jsonInSlices(value: object): Promise<Buffer[]> {
  const chunks: Buffer[] = [];
  let text: string[] = [];
  // JSON.stringify's order: the own enumerable string keys, as Object.entries lists them.
  const entries = Object.entries(value as Record<string, unknown>);
  let entry = 0;
  /** Next element of the array being written; -1 between entries. */
  let element = -1;
  let separator = '{';
  await runInSlices((deadline) => {
    while (entry < entries.length) {
      const [key, item] = entries[entry]!;
      const texts = item instanceof JsonTextList ? item.items : undefined;
      if (element === -1) {
        if (!texts && !Array.isArray(item)) {
          const json = JSON.stringify(item);
          // Values JSON leaves out (undefined, functions) leave their key out too.
          if (json !== undefined) {
            text.push(`${separator}${JSON.stringify(key)}:${json}`);
            separator = ',';
          }
          entry++;
          continue;
        }
        text.push(`${separator}${JSON.stringify(key)}:[`);
        separator = ',';
        element = 0;
      }
      const list = texts ?? (item as unknown[]);
      const end = Math.min(list.length, element + ITEMS_PER_CLOCK_CHECK);
      if (texts) {
        for (; element < end; element++) text.push(element === 0 ? texts[element]! : `,${texts[element]!}`);
      } else {
        for (; element < end; element++) text.push(`${element === 0 ? '' : ','}${JSON.stringify(list[element]) ?? 'null'}`);
      }
      if (element >= list.length) {
        text.push(']');
        entry++;
        element = -1;
      }
      if (performance.now() >= deadline) {
        chunks.push(Buffer.from(text.join('')));
        text = [];
        return false;
      }
    }
    text.push(separator === '{' ? '{}' : '}');
    chunks.push(Buffer.from(text.join('')));
    return true;
  });
  return chunks;
}
