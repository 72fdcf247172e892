/**
 * Decodes an application/x-www-form-urlencoded body as the URL Standard does (`+` is a space,
 * `%XX` a byte, an invalid escape kept literally, then UTF-8 with U+FFFD for invalid bytes; spec
 * docs/api.md §1.5), working on the body's bytes: linear in its length whatever it holds. fast-querystring (what
 * @fastify/formbody parses with) replaces `+` with a global regular expression on the text, which
 * held the event loop on a body full of `+`, before the credentials were even checked (bench/RESULTS.md).
 * Within the body the last occurrence of a name wins (docs/api.md §1.5), so the result holds one value per name.
 */
export function decodeForm(body: Buffer): Map<string, string> {
  const fields = new Map<string, string>();
  for (let start = 0; start <= body.length;) {
    let end = body.indexOf(AMPERSAND, start);
    if (end === -1) end = body.length;
    // Each search stays within its field (subarray): one field's scan never runs over the next ones.
    const field = body.subarray(start, end);
    if (field.length > 0) {
      const equals = field.indexOf(EQUALS);
      if (equals === -1) fields.set(decodeComponent(field), '');
      else fields.set(decodeComponent(field.subarray(0, equals)), decodeComponent(field.subarray(equals + 1)));
    }
    start = end + 1;
  }
  return fields;
}

const AMPERSAND = 0x26;
const EQUALS = 0x3d;
const PLUS = 0x2b;
const PERCENT = 0x25;
const SPACE = 0x20;

function hexValue(byte: number | undefined): number {
  if (byte === undefined) return -1;
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x57 : -1;
}

function decodeComponent(bytes: Buffer): string {
  if (bytes.indexOf(PLUS) === -1 && bytes.indexOf(PERCENT) === -1) return bytes.toString('utf8');
  const out = Buffer.allocUnsafe(bytes.length);
  let length = 0;
  for (let at = 0; at < bytes.length; at++) {
    const byte = bytes[at]!;
    if (byte === PLUS) {
      out[length++] = SPACE;
      continue;
    }
    if (byte === PERCENT) {
      const high = hexValue(bytes[at + 1]);
      const low = high === -1 ? -1 : hexValue(bytes[at + 2]);
      if (low !== -1) {
        out[length++] = high * 16 + low;
        at += 2;
        continue;
      }
    }
    out[length++] = byte;
  }
  return out.toString('utf8', 0, length);
}
