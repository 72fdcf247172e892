import { describe, expect, it } from 'vitest';
import { KeyedReadWriteTurns, type TurnMode } from '../src/lib/keyed-read-write-turns.js';

/** An organization's membership turn within the process (src/db/user-transactions.ts RealmTurn). */

function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

/** Calls on one turn object that log when they start and wait for their gate to end. */
function harness() {
  const turns = new KeyedReadWriteTurns<string>();
  const started: string[] = [];
  const call = (key: string, mode: TurnMode, name: string) => {
    const g = gate();
    const result = turns.run(key, mode, async () => {
      started.push(name);
      await g.opened;
      return name;
    });
    return { end: g.open, result };
  };
  return { turns, started, call };
}

describe('KeyedReadWriteTurns', () => {
  it('runs shared calls of a key together, an exclusive one alone, in call order', async () => {
    const { turns, started, call } = harness();
    const r1 = call('a', 'shared', 'r1');
    const r2 = call('a', 'shared', 'r2');
    const w1 = call('a', 'exclusive', 'w1');
    // Behind the waiting exclusive call, though shared calls run: it cannot be starved.
    const r3 = call('a', 'shared', 'r3');
    const r4 = call('a', 'shared', 'r4');
    const w2 = call('a', 'exclusive', 'w2');
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
    expect(turns.activeKeys).toBe(1);
    w2.end();
    expect(await Promise.all([r1, r2, w1, r3, r4, w2].map((c) => c.result))).toEqual(['r1', 'r2', 'w1', 'r3', 'r4', 'w2']);
    expect(turns.activeKeys).toBe(0);
  });

  it('runs calls of different keys at once', async () => {
    const { turns, started, call } = harness();
    const a = call('a', 'exclusive', 'a');
    const b = call('b', 'exclusive', 'b');
    const c = call('c', 'shared', 'c');
    await settle();
    expect(started).toEqual(['a', 'b', 'c']);
    expect(turns.activeKeys).toBe(3);
    for (const each of [a, b, c]) each.end();
    await Promise.all([a.result, b.result, c.result]);
    expect(turns.activeKeys).toBe(0);
  });

  it('starts a call at once, in the caller’s turn of the event loop, when nothing holds its key', () => {
    const { started, call } = harness();
    call('a', 'exclusive', 'w').end();
    expect(started).toEqual(['w']);
  });

  it('a failed call, rejected or thrown, passes its error on and does not block the ones after it', async () => {
    const turns = new KeyedReadWriteTurns<string>();
    const rejected = turns.run('a', 'exclusive', () => Promise.reject(new Error('rejected')));
    const thrown = turns.run('a', 'exclusive', () => {
      throw new Error('thrown');
    });
    const shared = turns.run('a', 'shared', () => Promise.resolve('after'));
    await expect(rejected).rejects.toThrow('rejected');
    await expect(thrown).rejects.toThrow('thrown');
    expect(await shared).toBe('after');
    expect(turns.activeKeys).toBe(0);
  });
});
