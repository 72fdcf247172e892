import { randomUUID } from 'node:crypto';

/**
 * UUID-shaped ids unique across instances and restarts, for ids made on every request (request
 * ids, poll ids): a random prefix per process (a UUID's first 24 characters: 74 random bits) and a
 * counter. randomUUID() builds its string from 13 pieces that V8 keeps as 12 concatenation nodes,
 * about 450 bytes for each of a waiting poll's two ids; this is two pieces, about 100.
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
