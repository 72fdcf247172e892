import { describe, expect, it } from 'vitest';
import { uniqueId } from '../src/lib/unique-ids.js';

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe('uniqueId (request and poll ids)', () => {
  it('is a version 4 UUID in form, a new one each time, with a prefix of its process', () => {
    const made = Array.from({ length: 10_000 }, uniqueId);
    for (const id of made.slice(0, 100)) expect(id).toMatch(UUID_V4);
    expect(new Set(made).size).toBe(made.length);
    // One process's ids differ in their last twelve digits: a counter after a random prefix.
    expect(new Set(made.map((id) => id.slice(0, 24))).size).toBe(1);
    expect(parseInt(made[1]!.slice(24), 16) - parseInt(made[0]!.slice(24), 16)).toBe(1);
  });
});
