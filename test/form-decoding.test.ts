import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeForm } from '../src/http/form-decoding.js';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { storedViews } from './helpers/navigation-views.js';

const decode = (text: string | Buffer) => Object.fromEntries(decodeForm(Buffer.isBuffer(text) ? text : Buffer.from(text, 'utf8')));

describe('urlencoded bodies (docs/api.md §1.5): the URL Standard, on bytes', () => {
  it('+ is a space, %XX a byte, invalid escapes stay as they are, invalid UTF-8 becomes U+FFFD', () => {
    expect(decode('a=1+2&b=%41%2B%zz%4&c=%E2%82%AC&d=%FF%C3&e=%')).toEqual({ a: '1 2', b: 'A+%zz%4', c: '€', d: '\uFFFD\uFFFD', e: '%' });
  });

  it('names: no "=" is an empty value, a second "=" belongs to the value, empty fields are skipped, the last occurrence wins', () => {
    expect(decode('&&a&b==x=&=v&a=2&&')).toEqual({ a: '2', b: '=x=', '': 'v' });
    expect(decodeForm(Buffer.from('__proto__=1&constructor=2'))).toEqual(
      new Map([
        ['__proto__', '1'],
        ['constructor', '2'],
      ]),
    );
    expect(decode('')).toEqual({});
  });

  it('decodes what URLSearchParams (the URL Standard reference) decodes, for any bytes', () => {
    const byte = fc.oneof(fc.constantFrom(0x25, 0x2b, 0x26, 0x3d, 0x30, 0x41, 0x66, 0xc3, 0xa9, 0xff), fc.integer({ min: 0, max: 255 }));
    fc.assert(
      fc.property(fc.array(byte, { maxLength: 60 }), (bytes) => {
        const body = Buffer.from(bytes);
        const expected = new Map<string, string>();
        // Its text form: bytes above 0x7f percent-encoded (the same bytes once decoded), and a
        // leading "&" so that a leading "?" is a name, as in a body, not a query string's mark.
        for (const [name, value] of new URLSearchParams(
          '&' + body.toString('latin1').replace(/[\u0080-\u00ff]/g, (c) => `%${c.charCodeAt(0).toString(16)}`),
        )) {
          expected.set(name, value);
        }
        expect(decodeForm(body)).toEqual(expected);
      }),
      { numRuns: 2000 },
    );
  });

  it('a megabyte of + is one field of spaces', () => {
    const fields = decodeForm(Buffer.alloc(1 << 20, '+'));
    expect([...fields.keys()].map((name) => [name.length, name.trim()])).toEqual([[1 << 20, '']]);
  });
});

describe('through the HTTP stack', () => {
  const ctx = useTestContext(createTestContext, 'all');

  it('a navigation view named with escapes, valid and not, is stored as decoded', async () => {
    const res = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/navigation_views',
      as: 'U',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: 'fragment=narrow%2Fchannel%2F9&is_pinned=true&name=%zz+caf%C3%A9%FF',
    });
    expect(res.statusCode).toBe(200);
    expect((await storedViews(ctx, 'U')).find((view) => view.fragment === 'narrow/channel/9')?.name).toBe('%zz caf\u00e9\uFFFD');
  });
});
