import { createHash, randomInt, timingSafeEqual } from 'node:crypto';

const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const API_KEY_LENGTH = 32;
export const API_KEY_PATTERN = /^[A-Za-z0-9]{32}$/;

/** 32 characters, each uniformly random (crypto.randomInt rejects biased draws). */
export function generateApiKey(): string {
  let key = '';
  for (let i = 0; i < API_KEY_LENGTH; i++) key += ALPHABET[randomInt(ALPHABET.length)];
  return key;
}

/** SHA-256 of a key: its bytes (for the comparison) and their lowercase hex (what is stored). */
export function apiKeyDigest(key: string): { bytes: Buffer; hex: string } {
  const bytes = createHash('sha256').update(key, 'utf8').digest();
  return { bytes, hex: bytes.toString('hex') };
}

export const hashApiKey = (key: string): string => apiKeyDigest(key).hex;

// What hashApiKey produces (and the users table's CHECK enforces).
const HEX_DIGEST = /^[0-9a-f]{64}$/;

/**
 * Constant-time comparison of a stored hex digest with a computed one's bytes. A malformed stored
 * digest is unequal: Buffer's hex decoding stops at the first bad character, so "zz" would
 * otherwise decode to nothing and match an empty digest.
 */
export function storedDigestMatches(storedHex: string, computed: Buffer): boolean {
  if (!HEX_DIGEST.test(storedHex)) return false;
  const stored = Buffer.from(storedHex, 'hex');
  return stored.length === computed.length && timingSafeEqual(stored, computed);
}
