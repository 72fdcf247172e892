import { randomUUID } from 'node:crypto';

/**
 * UUID-shaped ids unique across instances and restarts, for ids made on every request: a random
 * prefix per process (74 random bits) and a counter. Two pieces, about 100 bytes in V8; randomUUID()'s
 * 13 pieces take about 450 for each of a waiting poll's two ids.
 */
const COUNTER_DIGITS = 12;
const COUNTER_LIMIT = 16 ** COUNTER_DIGITS;

let prefix = randomUUID().slice(0, 24);
let counter = 0;

export function uniqueId(): string {
  if (counter === COUNTER_LIMIT) {
    prefix = randomUUID().slice(0, 24);
    counter = 0;
  }
  return prefix + (counter++).toString(16).padStart(COUNTER_DIGITS, '0');
}
