import { describe, expect, it } from 'vitest';
import { KeyedQueue, type QueueMode } from '../src/lib/keyed-queue.js';

/**
 * The keyed queue under a user's writes (exclusive), an organization's membership changes
 * (exclusive) and registers (shared), the long polls of one event queue, and the large reads (one
 * per user, a few per instance).
 */

function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

/** Calls on one queue that log when they start and wait for their gate to end. */
function harness(limit?: number) {
  const queue = new KeyedQueue<string>(limit);
  const started: string[] = [];
  const call = (key: string, name: string, mode?: QueueMode) => {
    const g = gate();
    const result = queue.run(
      key,
      async () => {
        started.push(name);
        await g.opened;
        return name;
      },
      mode,
    );
    return { end: g.open, result };
  };
  return { queue, started, call };
}

describe('KeyedQueue', () => {
  it('runs exclusive calls (the default) one at a time per key, in call order', async () => {
    const { queue, started, call } = harness();
    const calls = [call('a', 'a0'), call('a', 'a1'), call('a', 'a2')];
    await settle();
    expect(started).toEqual(['a0']);
    calls[0]!.end();
    await settle();
    expect(started).toEqual(['a0', 'a1']);
    calls[2]!.end();
    calls[1]!.end();
    expect(await Promise.all(calls.map((c) => c.result))).toEqual(['a0', 'a1', 'a2']);
    expect(queue.activeKeys).toBe(0);
  });

  it('runs shared calls of a key together, an exclusive one alone, in call order', async () => {
    const { queue, started, call } = harness();
    const r1 = call('a', 'r1', 'shared');
    const r2 = call('a', 'r2', 'shared');
    const w1 = call('a', 'w1', 'exclusive');
    // Behind the waiting exclusive call, though shared calls run: it cannot be starved.
    const r3 = call('a', 'r3', 'shared');
    const r4 = call('a', 'r4', 'shared');
    const w2 = call('a', 'w2');
    await settle();
    expect(started).toEqual(['r1', 'r2']);
    r2.end();
    await settle();
    expect(started).toEqual(['r1', 'r2']);
    r1.end();
    await settle();
    expect(started).toEqual(['r1', 'r2', 'w1']);
    w1.end();
    await settle();
    expect(started).toEqual(['r1', 'r2', 'w1', 'r3', 'r4']);
    r4.end();
    await settle();
    expect(started).toEqual(['r1', 'r2', 'w1', 'r3', 'r4']);
    r3.end();
    await settle();
    expect(started).toEqual(['r1', 'r2', 'w1', 'r3', 'r4', 'w2']);
    expect(queue.activeKeys).toBe(1);
    w2.end();
    expect(await Promise.all([r1, r2, w1, r3, r4, w2].map((c) => c.result))).toEqual(['r1', 'r2', 'w1', 'r3', 'r4', 'w2']);
    expect(queue.activeKeys).toBe(0);
  });

  it('runs calls of different keys at once', async () => {
    const { queue, started, call } = harness();
    const calls = [call('a', 'a'), call('b', 'b'), call('c', 'c', 'shared')];
    await settle();
    expect(started).toEqual(['a', 'b', 'c']);
    expect(queue.activeKeys).toBe(3);
    expect(queue.running).toBe(3);
    for (const each of calls) each.end();
    await Promise.all(calls.map((c) => c.result));
    expect(queue.activeKeys).toBe(0);
    expect(queue.running).toBe(0);
  });

  it('starts a call at once, in the caller’s turn of the event loop, when nothing holds its key', () => {
    const { started, call } = harness();
    call('a', 'w').end();
    expect(started).toEqual(['w']);
  });

  it('a failed call, rejected or thrown, passes its error on and does not block the ones after it', async () => {
    const queue = new KeyedQueue<string>(1);
    const rejected = queue.run('a', () => Promise.reject(new Error('rejected')));
    const thrown = queue.run('a', () => {
      throw new Error('thrown');
    });
    const shared = queue.run('a', () => Promise.resolve('after'), 'shared');
    const other = queue.run('b', async () => 'other');
    await expect(rejected).rejects.toThrow('rejected');
    await expect(thrown).rejects.toThrow('thrown');
    expect(await shared).toBe('after');
    expect(await other).toBe('other');
    expect(queue.activeKeys).toBe(0);
    expect(queue.running).toBe(0);
  });

  it('runs at most `limit` calls at once; the others wait in call order, the room of one that ends going to the next', async () => {
    const { queue, started, call } = harness(2);
    const calls = [call('1', '1'), call('1', '1 again'), call('2', '2'), call('3', '3'), call('4', '4')];
    await settle();
    // 1's second call waits for 1's first, not for room: 2 takes the room.
    expect(started).toEqual(['1', '2']);
    expect(queue.running).toBe(2);
    calls[0]!.end();
    await settle();
    // 3 and 4 waited for room before 1's second call was let through by its key.
    expect(started).toEqual(['1', '2', '3']);
    expect(queue.running).toBe(2);
    calls[2]!.end();
    await settle();
    expect(started).toEqual(['1', '2', '3', '4']);
    calls[3]!.end();
    await settle();
    expect(started).toEqual(['1', '2', '3', '4', '1 again']);
    expect(queue.running).toBe(2);
    for (const each of calls) each.end();
    await Promise.all(calls.map((c) => c.result));
    expect(queue.running).toBe(0);
    expect(queue.activeKeys).toBe(0);
  });
});
