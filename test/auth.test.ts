import { describe, expect, it } from 'vitest';
import { rotateApiKey } from '../src/cli/operations.js';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { errorBody } from './helpers/envelope.js';
import { apiKeys, basicAuth, emails } from './helpers/fixture.js';

const ctx = useTestContext(createTestContext, 'all');

const TARGET = '/api/v1/users/14';
const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

async function get(authorization: string | undefined, host = 'chat.example.com', url = TARGET) {
  return api(ctx.app, { url, host, headers: authorization === undefined ? {} : { authorization } });
}

function expect401(res: Awaited<ReturnType<typeof get>>, msg: string) {
  expect(res.statusCode).toBe(401);
  expect(res.body).toBe(errorBody(msg, 'UNAUTHORIZED'));
  expect(res.headers['www-authenticate']).toBe('Basic realm="zulip"');
  expect(Object.keys(res.headers).filter((name) => name.startsWith('x-ratelimit'))).toEqual([]);
}

describe('Basic authentication (docs/api.md §1.3, cases 20–31)', () => {
  it('case 20: no Authorization header', async () => {
    expect401(await get(undefined), 'Not logged in: API authentication or user session required');
  });

  it('case 21: a non-Basic scheme is 400 without WWW-Authenticate; lower-case basic works', async () => {
    const res = await get('Bearer abc');
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(errorBody('This endpoint requires HTTP basic authentication.'));
    expect(res.headers['www-authenticate']).toBeUndefined();
    const ok = await get(`basic ${b64(`${emails.U}:${apiKeys.U}`)}`);
    expect(ok.statusCode).toBe(200);
  });

  it.each([
    ['base64 of foo', `Basic ${b64('foo')}`],
    ['an empty value', ''],
    ['Basic alone', 'Basic'],
    ['Bearer alone', 'Bearer'],
    ['three tokens', 'Basic a b'],
    ['non-base64', 'Basic !!!!'],
    ['unpadded base64', 'Basic dXNlcjprZXk'],
    ['two colons', `Basic ${b64('a:b:c')}`],
    ['invalid UTF-8', `Basic ${Buffer.from([0xff, 0x3a, 0x61]).toString('base64')}`],
    [
      'an overlong UTF-8 colon',
      `Basic ${Buffer.concat([Buffer.from('u@example.com'), Buffer.from([0xc0, 0xba]), Buffer.from('k')]).toString('base64')}`,
    ],
    ['an encoded surrogate', `Basic ${Buffer.concat([Buffer.from([0xed, 0xa0, 0x80]), Buffer.from(':k')]).toString('base64')}`],
    ['a truncated sequence', `Basic ${Buffer.concat([Buffer.from('a:b'), Buffer.from([0xe2, 0x82])]).toString('base64')}`],
  ])('case 22: %s → Invalid authorization header for basic auth', async (_label, header) => {
    expect401(await get(header), 'Invalid authorization header for basic auth');
  });

  it('case 23: a key that is not 32 alphanumerics is malformed', async () => {
    expect401(await get(`Basic ${b64('u@example.com:short')}`), 'Malformed API key');
    expect401(await get(`Basic ${b64(`u@example.com:${'a'.repeat(31)}!`)}`), 'Malformed API key');
  });

  it('case 24: a well-formed key nobody has', async () => {
    expect401(await get(basicAuth(emails.U, 'Z'.repeat(32))), 'Invalid API key');
  });

  it('case 25: the key with another or unknown email, or the dummy address', async () => {
    expect401(await get(basicAuth('nobody@example.com', apiKeys.U)), 'Invalid API key');
    expect401(await get(basicAuth(emails.V, apiKeys.U)), 'Invalid API key');
    await ctx.db.updateTable('users').set({ email_address_visibility: 3 }).where('id', '=', 14).execute();
    try {
      expect401(await get(basicAuth('user14@chat.example.com', apiKeys.V)), 'Invalid API key');
    } finally {
      await ctx.db.updateTable('users').set({ email_address_visibility: 1 }).where('id', '=', 14).execute();
    }
  });

  it('case 26: email case and surrounding whitespace do not matter', async () => {
    expect((await get(basicAuth('U@EXAMPLE.COM', apiKeys.U))).statusCode).toBe(200);
    expect((await get(`Basic ${b64(`  u@example.com : ${apiKeys.U} `)}`)).statusCode).toBe(200);
    expect((await get(`  Basic   ${b64(`${emails.U}:${apiKeys.U}`)}  `)).statusCode).toBe(200);
    expect((await get(`Basic ${b64(`\uFEFF${emails.U}:${apiKeys.U}`)}`)).statusCode).toBe(200); // a byte-order mark
  });

  it('case 27: deactivated account; deactivated organization checked first', async () => {
    expect401(await get(basicAuth(emails.D, apiKeys.D)), 'Account is deactivated');
    await ctx.db.updateTable('realms').set({ deactivated: true }).where('id', '=', 1).execute();
    try {
      expect401(await get(basicAuth(emails.U, apiKeys.U)), 'This organization has been deactivated');
      expect401(await get(basicAuth(emails.D, apiKeys.D)), 'This organization has been deactivated');
    } finally {
      await ctx.db.updateTable('realms').set({ deactivated: false }).where('id', '=', 1).execute();
    }
  });

  it('case 28: the Host must name the account organization', async () => {
    expect401(await get(basicAuth(emails.X, apiKeys.X)), 'Account is not associated with this subdomain');
    const other = await get(basicAuth(emails.X, apiKeys.X), 'other.chat.example.com', '/api/v1/users/30');
    expect(other.statusCode).toBe(200);
    expect401(await get(basicAuth(emails.U, apiKeys.U), 'nosuch.chat.example.com'), 'Account is not associated with this subdomain');
    for (const host of ['www.chat.example.com', 'chat.example.com:443', '10.0.0.5:8080', 'CHAT.EXAMPLE.COM']) {
      expect((await get(basicAuth(emails.U, apiKeys.U), host)).statusCode, host).toBe(200);
    }
  });

  it('case 28: X-Forwarded-Host counts only with TRUST_PROXY', async () => {
    const forwarded = { authorization: basicAuth(emails.X, apiKeys.X), 'x-forwarded-host': 'other.chat.example.com' };
    const untrusted = await api(ctx.app, { url: '/api/v1/users/30', headers: forwarded });
    expect401(untrusted, 'Account is not associated with this subdomain');
    const proxied = await createTestContext({ env: { TRUST_PROXY: 'true' } });
    try {
      expect((await api(proxied.app, { url: '/api/v1/users/30', headers: forwarded })).statusCode).toBe(200);
    } finally {
      await proxied.close();
    }
  });

  it('case 29: bots authenticate; incoming-webhook bots are refused', async () => {
    expect((await get(basicAuth(emails.B, apiKeys.B))).statusCode).toBe(200);
    expect401(await get(basicAuth(emails.H, apiKeys.H)), 'This API is not available to incoming webhook bots.');
  });

  it('case 31: rotating a key invalidates the old one; no key is stored in clear', async () => {
    const rotated = await rotateApiKey(ctx.db, '', emails.U);
    expect(rotated.api_key).toMatch(/^[A-Za-z0-9]{32}$/);
    expect401(await get(basicAuth(emails.U, apiKeys.U)), 'Invalid API key');
    expect((await get(basicAuth(emails.U, rotated.api_key))).statusCode).toBe(200);
    // Search every text column of every table for either key.
    const { rows: columns } = await ctx.database.pool.query<{ table_name: string; column_name: string }>(
      `SELECT table_name, column_name FROM information_schema.columns
       WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'json', 'jsonb')`,
    );
    expect(columns.length).toBeGreaterThan(10);
    for (const { table_name, column_name } of columns) {
      const { rows } = await ctx.database.pool.query(
        `SELECT count(*)::int AS n FROM "${table_name}" WHERE "${column_name}"::text LIKE $1 OR "${column_name}"::text LIKE $2`,
        [`%${apiKeys.U}%`, `%${rotated.api_key}%`],
      );
      expect(rows[0].n, `${table_name}.${column_name}`).toBe(0);
    }
    const stored = await ctx.db.selectFrom('users').select('api_key_hash').where('id', '=', 13).executeTakeFirstOrThrow();
    expect(stored.api_key_hash).toMatch(/^[0-9a-f]{64}$/);
  });
});
