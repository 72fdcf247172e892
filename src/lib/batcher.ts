/** How a Batcher splits what it gathered into batches and sends each. */
export interface BatcherOptions<Item, Result> {
  /** How long the first item waits for others: undefined, until the end of this turn of the event loop (setImmediate). */
  delayMs?: number;
  /** Bounds a batch's work: its most items, or its most weight. */
  max: number;
  /** An item's share of `max` (1 when not given); an item heavier than `max` is a batch of its own. */
  weight?: (item: Item) => number;
  /** Items of one key never share a batch: a later one goes in a later batch, sent after. */
  key?: (item: Item) => unknown;
  /** The items' order within their batches (the order they were added in when not given). */
  order?: (a: Item, b: Item) => number;
  /** Sends a batch: for each item, in order, its result, or the promise of one (an item sent again on its own). */
  send: (batch: Item[]) => Promise<(Result | Promise<Result>)[]>;
  /** Whether a batch that failed with `error` is sent again one item at a time; otherwise every item fails with it. */
  retryAlone?: (error: unknown) => boolean;
  /** Batches in flight at most (unbounded when not given): what is gathered meanwhile goes together once one settles. */
  maxInFlight?: number;
}

/** An item added, with the settling of its promise. */
interface Entry<Item, Result> {
  item: Item;
  resolve: (result: Result | Promise<Result>) => void;
  reject: (error: unknown) => void;
}

interface Batch<Item, Result> {
  entries: Entry<Item, Result>[];
  weight: number;
  keys: Set<unknown>;
}

/**
 * Gather, then send once: the items added until the flush (`delayMs` after the first, or at the
 * end of this turn of the event loop, or when `flush()` is called) go in as few batches as fit,
 * each one round trip instead of one per item. Retrying alone (`retryAlone`) keeps one item whose
 * value a batch cannot take from failing the others.
 */
export class Batcher<Item, Result> {
  private gathered: Entry<Item, Result>[] = [];
  private timer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  private inFlight = 0;

  constructor(private readonly options: BatcherOptions<Item, Result>) {}

  add(item: Item): Promise<Result> {
    const added = new Promise<Result>((resolve, reject) => this.gathered.push({ item, resolve, reject }));
    const { delayMs } = this.options;
    this.timer ??= delayMs === undefined ? setImmediate(() => this.flush()) : setTimeout(() => this.flush(), delayMs);
    return added;
  }

  /** Sends every gathered item now. */
  flush(): void {
    const { delayMs, max, weight = () => 1, key, order } = this.options;
    if (delayMs === undefined) clearImmediate(this.timer as NodeJS.Immediate | undefined);
    else clearTimeout(this.timer as NodeJS.Timeout | undefined);
    this.timer = undefined;
    if (this.inFlight >= (this.options.maxInFlight ?? Infinity)) return;
    const gathered = this.gathered;
    this.gathered = [];
    if (order) gathered.sort((a, b) => order(a.item, b.item));
    // Each item in the first batch it fits in: the batches holding one key's items are in their order.
    const batches: Batch<Item, Result>[] = [];
    for (const entry of gathered) {
      const share = weight(entry.item);
      const itemKey = key?.(entry.item);
      let batch = batches.find((open) => open.weight + share <= max && !open.keys.has(itemKey));
      if (!batch) batches.push((batch = { entries: [], weight: 0, keys: new Set() }));
      batch.entries.push(entry);
      batch.weight += share;
      if (key) batch.keys.add(itemKey);
    }
    for (const batch of batches) this.send(batch.entries);
  }

  private send(entries: Entry<Item, Result>[]): void {
    this.inFlight++;
    const settled = () => {
      this.inFlight--;
      if (this.gathered.length > 0 && this.timer === undefined) this.flush();
    };
    this.options.send(entries.map((entry) => entry.item)).then(
      (results) => {
        settled();
        entries.forEach((entry, index) => entry.resolve(results[index]!));
      },
      (error: unknown) => {
        settled();
        if (entries.length > 1 && this.options.retryAlone?.(error)) for (const entry of entries) this.send([entry]);
        else for (const entry of entries) entry.reject(error);
      },
    );
  }
}
