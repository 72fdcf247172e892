import { describe, expect, it } from 'vitest';
import { LargeReadTurns } from '../src/lib/large-read-turns.js';

/** Large reads take turns: one at a time per user, a few per instance, in arrival order. */

function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('LargeReadTurns', () => {
  it('runs one read at a time per user, in arrival order', async () => {
    const turns = new LargeReadTurns(4);
    const started: string[] = [];
    const gates = [gate(), gate(), gate()];
    const reads = gates.map((g, i) =>
      turns.run(7, async () => {
        started.push(`read ${i}`);
        await g.opened;
        return i;
      }),
    );
    await settle();
    expect(started).toEqual(['read 0']);
    gates[0]!.open();
    await settle();
    expect(started).toEqual(['read 0', 'read 1']);
    gates[2]!.open();
    gates[1]!.open();
    expect(await Promise.all(reads)).toEqual([0, 1, 2]);
    expect(turns.inFlight).toBe(0);
  });

  it('runs different users at once, up to the instance limit', async () => {
    const turns = new LargeReadTurns(2);
    const started: number[] = [];
    const g = gate();
    const reads = [1, 2, 3, 4].map((user) =>
      turns.run(user, async () => {
        started.push(user);
        await g.opened;
      }),
    );
    await settle();
    expect(started).toEqual([1, 2]);
    expect(turns.inFlight).toBe(2);
    g.open();
    await Promise.all(reads);
    expect(started).toEqual([1, 2, 3, 4]);
    expect(turns.inFlight).toBe(0);
  });

  it('gives the turn on after a failed read', async () => {
    const turns = new LargeReadTurns(1);
    const failed = turns.run(1, async () => {
      throw new Error('read failed');
    });
    const next = turns.run(1, async () => 'next');
    const other = turns.run(2, async () => 'other');
    await expect(failed).rejects.toThrow('read failed');
    expect(await next).toBe('next');
    expect(await other).toBe('other');
    expect(turns.inFlight).toBe(0);
  });
});
