import { describe, expect, it } from 'vitest';
import { Batcher, type BatcherOptions } from '../src/lib/batcher.js';

// src/lib/batcher.ts: its users' tests (auth-batches, rate-limit, transactions,
// events-steady-state) cover it through the database; these cover the splitting rules their
// batches are too small to reach, with a `send` that answers each item doubled.

interface Item {
  id: number;
  key?: string;
  weight?: number;
}

/** A batcher whose batches are recorded (ids) and answered id × 2; a batch holding id 0 fails. */
function recorded(options: Partial<BatcherOptions<Item, number>> = {}) {
  const batches: number[][] = [];
  const batcher = new Batcher<Item, number>({
    max: 3,
    send: async (items) => {
      batches.push(items.map((item) => item.id));
      if (items.some((item) => item.id === 0)) throw new Error('no zero');
      return items.map((item) => item.id * 2);
    },
    ...options,
  });
  return { batcher, batches };
}

describe('Batcher', () => {
  it('sends the items of one turn of the event loop at its end, in batches of at most `max`', async () => {
    const { batcher, batches } = recorded();
    const answers = [1, 2, 3, 4, 5].map((id) => batcher.add({ id }));
    expect(batches).toEqual([]);
    expect(await Promise.all(answers)).toEqual([2, 4, 6, 8, 10]);
    expect(batches).toEqual([
      [1, 2, 3],
      [4, 5],
    ]);
  });

  it('with a delay, sends after it or when flushed', async () => {
    const { batcher, batches } = recorded({ delayMs: 60_000 });
    const answer = batcher.add({ id: 1 });
    await new Promise((resolve) => setImmediate(resolve));
    expect(batches).toEqual([]);
    batcher.flush();
    expect(await answer).toBe(2);
    const timed = recorded({ delayMs: 5 });
    expect(await timed.batcher.add({ id: 7 })).toBe(14);
  });

  it('weights, order and keys: each item in the first batch it fits, a heavy one alone, one key per batch in its order', async () => {
    const { batcher, batches } = recorded({
      max: 4,
      weight: (item) => item.weight ?? 1,
      key: (item) => item.key,
      order: (a, b) => a.id - b.id,
    });
    const items: Item[] = [
      { id: 6, key: 'a' },
      { id: 1, key: 'a', weight: 3 },
      { id: 2, key: 'b', weight: 9 },
      { id: 3, key: 'a' },
      { id: 4, key: 'c' },
      { id: 5, key: 'd' },
    ];
    await Promise.all(items.map((item) => batcher.add(item)));
    expect(batches).toEqual([[1, 4], [2], [3, 5], [6]]);
  });

  it('a failed batch fails every item, or with retryAlone sends each again alone: only the culprit fails', async () => {
    const failing = recorded();
    const all = await Promise.allSettled([1, 0, 2].map((id) => failing.batcher.add({ id })));
    expect(all.map((outcome) => outcome.status)).toEqual(['rejected', 'rejected', 'rejected']);
    expect(failing.batches).toEqual([[1, 0, 2]]);

    const retrying = recorded({ retryAlone: (error) => error instanceof Error });
    const alone = await Promise.allSettled([1, 0, 2].map((id) => retrying.batcher.add({ id })));
    expect(alone).toEqual([
      { status: 'fulfilled', value: 2 },
      { status: 'rejected', reason: new Error('no zero') },
      { status: 'fulfilled', value: 4 },
    ]);
    expect(retrying.batches).toEqual([[1, 0, 2], [1], [0], [2]]);
  });

  it('an item answered with a promise (sent again on its own) settles with it', async () => {
    const batcher = new Batcher<number, string>({
      max: 10,
      send: async (items) => items.map((item) => (item % 2 ? Promise.reject(new Error(`odd ${item}`)) : `even ${item}`)),
    });
    expect(await Promise.allSettled([2, 3].map((item) => batcher.add(item)))).toEqual([
      { status: 'fulfilled', value: 'even 2' },
      { status: 'rejected', reason: new Error('odd 3') },
    ]);
  });

  it('with maxInFlight, what is gathered while that many batches are in flight goes together once one settles', async () => {
    const batches: number[][] = [];
    const answer: (() => void)[] = [];
    const batcher = new Batcher<number, number>({
      max: 10,
      maxInFlight: 1,
      send: (items) => {
        batches.push(items);
        return new Promise((resolve) => answer.push(() => resolve(items.map((item) => item * 2))));
      },
    });
    const turn = () => new Promise((resolve) => setImmediate(resolve));
    const first = batcher.add(1);
    await turn();
    expect(batches).toEqual([[1]]);
    // Two more turns' items while the first batch is in flight: none is sent.
    const second = batcher.add(2);
    await turn();
    const third = batcher.add(3);
    await turn();
    expect(batches).toEqual([[1]]);
    answer[0]!();
    expect(await first).toBe(2);
    expect(batches).toEqual([[1], [2, 3]]);
    answer[1]!();
    expect(await Promise.all([second, third])).toEqual([4, 6]);
  });

  it('with maxInFlight, a batch that fails frees its place as one answered does', async () => {
    const batches: number[][] = [];
    const fail: (() => void)[] = [];
    const batcher = new Batcher<number, number>({
      max: 10,
      maxInFlight: 1,
      send: (items) => {
        batches.push(items);
        if (items[0] === 1) return new Promise((_, reject) => fail.push(() => reject(new Error('lost'))));
        return Promise.resolve(items.map((item) => item * 2));
      },
    });
    const first = batcher.add(1);
    await new Promise((resolve) => setImmediate(resolve));
    const second = batcher.add(2);
    await new Promise((resolve) => setImmediate(resolve));
    expect(batches).toEqual([[1]]);
    fail[0]!();
    await expect(first).rejects.toThrow('lost');
    expect(await second).toBe(4);
    expect(batches).toEqual([[1], [2]]);
  });
});
