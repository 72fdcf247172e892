import fc from 'fast-check';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { AccountBatches } from '../src/http/auth.repository.js';
import { apiKeyDigest } from '../src/lib/api-keys.js';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { errorBody } from './helpers/envelope.js';
import { apiKeys, basicAuth, emails, type FixtureUser, ids } from './helpers/fixture.js';

// One caller's credentials never fail the requests batched with theirs: a credential
// the shared authentication statement cannot carry is refused before it joins a batch, and a batch
// that fails for any other reason sends each of its requests again alone.

const ctx = useTestContext(() => createTestContext({ env: { RATE_LIMITING: 'true', RATE_LIMIT_MAX_REQUESTS: '100000' } }), 'all');

const b64 = (bytes: Uint8Array | string) => Buffer.from(bytes).toString('base64');
const batchStatements = () => ctx.database.statements.filter((text) => text.includes('jsonb_to_recordset'));
const INVALID_KEY = errorBody('Invalid API key', 'UNAUTHORIZED');

/** Valid requests of users of two organizations (X is in the other one), each answered 200. */
const VALID: { as: FixtureUser; host: string; url: string }[] = [
  { as: 'U', host: 'chat.example.com', url: '/api/v1/users/14' },
  { as: 'V', host: 'chat.example.com', url: '/api/v1/users/14' },
  { as: 'O', host: 'chat.example.com', url: '/api/v1/users/me/subscriptions' },
  { as: 'X', host: 'other.chat.example.com', url: '/api/v1/users/30' },
];

const valid = () => VALID.map((request) => api(ctx.app, request));

async function hitsOf(userId: number): Promise<number> {
  const row = await ctx.db.selectFrom('rate_limit_logs').select('hits').where('user_id', '=', userId).executeTakeFirst();
  return row?.hits.length ?? 0;
}

describe('a credential PostgreSQL cannot carry', () => {
  it('an address with NUL is refused (Invalid API key) before the batch; the requests of its turn are answered', async () => {
    const before = await hitsOf(ids.U);
    ctx.database.statements.length = 0;
    const poisoned = basicAuth(`${emails.U}\0`, apiKeys.U);
    const [refused, ...others] = await Promise.all([
      api(ctx.app, { url: '/api/v1/users/14', headers: { authorization: poisoned } }),
      ...valid(),
    ]);
    expect(refused.statusCode).toBe(401);
    expect(refused.body).toBe(INVALID_KEY);
    expect(others.map((res) => res.statusCode)).toEqual(VALID.map(() => 200));
    // One statement per lookup (GET /users/{id}'s and none), nothing sent again alone.
    expect(batchStatements()).toHaveLength(2);
    // U's valid request counted, the refused one did not.
    expect(await hitsOf(ids.U)).toBe(before + 1);
  });
});

describe('a batch whose statement fails', () => {
  it('sends each request again alone: only the one the statement cannot take fails', async () => {
    // Straight to the batches, past the HTTP guard, as any future credential the statement rejects would go.
    const batches = new AccountBatches(ctx.database.shortStatements);
    const request = (user: FixtureUser, email = emails[user]) => ({
      key_hash: apiKeyDigest(apiKeys[user]).hex,
      email,
      subdomain: user === 'X' ? 'other' : '',
      lookup_argument: 0,
    });
    ctx.database.statements.length = 0;
    const found = await Promise.allSettled([
      batches.find(request('U'), undefined, undefined),
      batches.find(request('V', `${emails.V}\0`), undefined, undefined),
      batches.find(request('X'), undefined, undefined),
      batches.find(request('O'), undefined, undefined),
    ]);
    const [u, poisoned, x, o] = found;
    expect(u).toMatchObject({ status: 'fulfilled', value: { caller_id: ids.U, caller_email_matches: true } });
    expect(x).toMatchObject({
      status: 'fulfilled',
      value: { caller_id: ids.X, caller_email_matches: true, caller_subdomain_matches: true },
    });
    expect(o).toMatchObject({ status: 'fulfilled', value: { caller_id: ids.O } });
    expect(poisoned.status).toBe('rejected');
    expect((poisoned as PromiseRejectedResult).reason).toBeInstanceOf(pg.DatabaseError);
    // The batch, then each of its four requests alone.
    expect(batchStatements()).toHaveLength(5);
  });
});

describe('fuzzing the Authorization header', () => {
  // Any bytes as the decoded credentials (NUL, invalid UTF-8, colons, a valid key after a strange
  // address), and any header text: never a 5xx for anyone, and the valid requests of the same turn
  // are answered as if alone.
  const credentialBytes = fc.oneof(
    fc.uint8Array({ maxLength: 120 }).map((bytes) => `Basic ${b64(bytes)}`),
    fc
      .tuple(fc.string({ unit: 'binary', maxLength: 40 }), fc.constantFrom(...Object.values(apiKeys)))
      .map(([email, key]) => `Basic ${b64(`${email}:${key}`)}`),
    fc
      .tuple(
        fc.constantFrom(...Object.values(emails)),
        fc.string({ unit: 'binary', maxLength: 8 }),
        fc.constantFrom(...Object.values(apiKeys)),
      )
      .map(([email, noise, key]) => `Basic ${b64(`${email}${noise}:${key}`)}`),
    // Header text: printable ASCII and Latin-1 (what an HTTP header value may carry).
    fc
      .string({ unit: fc.integer({ min: 0x20, max: 0xff }).map((code) => String.fromCharCode(code)), maxLength: 80 })
      .filter((text) => text.trim() === text),
  );

  it('no 5xx, and the valid requests batched with the fuzzed ones get 200', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(credentialBytes, { minLength: 1, maxLength: 4 }), async (headers) => {
        const [fuzzed, others] = await Promise.all([
          Promise.all(headers.map((authorization) => api(ctx.app, { url: '/api/v1/users/14', headers: { authorization } }))),
          Promise.all(valid()),
        ]);
        for (const res of fuzzed) expect([200, 400, 401]).toContain(res.statusCode);
        expect(others.map((res) => res.statusCode)).toEqual(VALID.map(() => 200));
      }),
      { numRuns: 150 },
    );
  });
});
