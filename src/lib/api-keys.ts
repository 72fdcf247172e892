import { createHash, randomInt, timingSafeEqual } from 'node:crypto';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
export const API_KEY_LENGTH = 32;
export const API_KEY_PATTERN = /^[A-Za-z0-9]{32}$/;

/** 32 characters, each uniformly random (crypto.randomInt rejects biased draws). */
export function generateApiKey(): string {
  let key = '';
  for (let i = 0; i < API_KEY_LENGTH; i++) key += ALPHABET[randomInt(ALPHABET.length)];
  return key;
}

export function hashApiKey(key: string): string {
  return createHash('sha256').update(key, 'utf8').digest('hex');
}

// What hashApiKey produces (and the users table's CHECK enforces).
const HEX_DIGEST = /^[0-9a-f]{64}$/;

/**
 * Constant-time comparison of two digests. Anything but a well-formed digest is unequal: Buffer's
 * hex decoding stops at the first bad character, so "zz" and "yy" would otherwise both be empty
 * and compare equal.
 */
export function hashesEqual(storedHex: string, computedHex: string): boolean {
  if (!HEX_DIGEST.test(storedHex) || !HEX_DIGEST.test(computedHex)) return false;
  const stored = Buffer.from(storedHex, 'hex');
  const computed = Buffer.from(computedHex, 'hex');
  return stored.length === computed.length && timingSafeEqual(stored, computed);
}
