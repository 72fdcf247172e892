import { gunzipSync } from 'node:zlib';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { ids } from './helpers/fixture.js';

/**
 * Compressed answers (@fastify/compress, src/app.ts): large JSON answers are gzipped for clients
 * that accept it and decompress to exactly what an uncompressed request gets; small ones, and
 * clients that do not ask, get the plain bytes.
 */

let ctx: TestContext;
const EXTRA_USERS = 1000;

beforeAll(async () => {
  ctx = await createTestContext();
  await sql`
    INSERT INTO users (realm_id, delivery_email, full_name, api_key_hash)
    SELECT ${ids.R}, 'person' || g || '@example.com', 'Person ' || g, encode(sha256(convert_to('person-' || g, 'UTF8')), 'hex')
    FROM generate_series(1, ${EXTRA_USERS}) AS g
  `.execute(ctx.db);
});

afterAll(async () => {
  await ctx?.close();
});

const GZIP = { 'accept-encoding': 'gzip, deflate, br' };

describe('compression', () => {
  it('gzips a large GET /users, which decompresses to exactly the uncompressed answer', async () => {
    const plain = await api(ctx.app, { url: '/api/v1/users', as: 'U' });
    expect(plain.statusCode).toBe(200);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.json<{ members: unknown[] }>().members.length).toBeGreaterThan(EXTRA_USERS);

    const compressed = await api(ctx.app, { url: '/api/v1/users', as: 'U', headers: { ...GZIP, 'x-request-id': 'lb-gzip-1' } });
    expect(compressed.statusCode).toBe(200);
    expect(compressed.headers['content-encoding']).toBe('gzip');
    expect(compressed.headers.vary).toMatch(/accept-encoding/i);
    expect(compressed.headers['content-type']).toBe(plain.headers['content-type']);
    expect(compressed.headers['x-request-id']).toBe('lb-gzip-1');
    // The large answer is sent in slices with its plain length declared: compressed, that length must go.
    expect(compressed.headers['content-length'] ?? String(compressed.rawPayload.length)).toBe(String(compressed.rawPayload.length));
    const body = gunzipSync(compressed.rawPayload);
    expect(body.toString('utf8')).toBe(plain.payload);
    expect(compressed.rawPayload.length).toBeLessThan(plain.rawPayload.length / 5);
  });

  it('sends small answers as they are, whatever the client accepts', async () => {
    const small = await api(ctx.app, { url: `/api/v1/users/${ids.V}`, as: 'U', headers: GZIP });
    expect(small.statusCode).toBe(200);
    expect(small.rawPayload.length).toBeLessThan(ctx.config.compressionThresholdBytes);
    expect(small.headers['content-encoding']).toBeUndefined();
    expect(small.json()).toMatchObject({ result: 'success', user: { user_id: ids.V } });
    // GET /users of the other, small organization: sent in one slice, under the threshold.
    const list = await api(ctx.app, { url: '/api/v1/users', as: 'X', host: 'other.chat.example.com', headers: GZIP });
    expect(list.statusCode).toBe(200);
    expect(list.rawPayload.length).toBeLessThan(ctx.config.compressionThresholdBytes);
    expect(list.headers['content-encoding']).toBeUndefined();
    expect(list.headers['content-length']).toBe(String(list.rawPayload.length));
    const error = await api(ctx.app, { url: '/api/v1/users', headers: GZIP });
    expect(error.statusCode).toBe(401);
    expect(error.headers['content-encoding']).toBeUndefined();
  });

  it('does not compress for a client that refuses gzip', async () => {
    const identity = await api(ctx.app, { url: '/api/v1/users', as: 'U', headers: { 'accept-encoding': 'identity' } });
    expect(identity.headers['content-encoding']).toBeUndefined();
    expect(identity.json()).toMatchObject({ result: 'success' });
  });

  it("answers HEAD with the uncompressed representation's headers and no body (nothing is compressed to be dropped)", async () => {
    const plain = await api(ctx.app, { url: '/api/v1/users', as: 'U' });
    const head = await api(ctx.app, { method: 'HEAD', url: '/api/v1/users', as: 'U', headers: GZIP });
    expect(head.statusCode).toBe(200);
    expect(head.headers['content-encoding']).toBeUndefined();
    expect(head.headers['content-length']).toBe(String(plain.rawPayload.length));
    expect(head.rawPayload.length).toBe(0);
  });
});
