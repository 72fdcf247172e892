import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestContext, type TestContext } from './helpers/app.js';
import { auth } from './helpers/fixture.js';

// One test through a real TCP port with Node's own HTTP client, like a real Zulip client.
let ctx: TestContext;
let base: string;
beforeAll(async () => {
  ctx = await createTestContext();
  const address = await ctx.app.listen({ port: 0, host: '127.0.0.1' });
  base = address;
});
afterAll(() => ctx.close());

describe('a real port', () => {
  it('serves discovery, authenticated reads and form writes', async () => {
    const headers = { host: 'chat.example.com', authorization: auth('U') };
    const settings = await fetch(`${base}/api/v1/server_settings`, { headers: { host: 'chat.example.com' } });
    expect(settings.status).toBe(200);
    expect(((await settings.json()) as { realm_name: string }).realm_name).toBe('Example');

    const user = await fetch(`${base}/api/v1/users/14`, { headers });
    expect(user.status).toBe(200);
    expect(user.headers.get('content-type')).toMatch(/^application\/json/);
    expect(((await user.json()) as { user: { email: string } }).user.email).toBe('v@example.com');

    const form = new URLSearchParams({ subscription_data: JSON.stringify([{ stream_id: 100, property: 'pin_to_top', value: true }]) });
    const update = await fetch(`${base}/api/v1/users/me/subscriptions/properties`, { method: 'POST', headers, body: form });
    expect(await update.json()).toEqual({ result: 'success', msg: '' });
    const row = await ctx.db
      .selectFrom('subscriptions')
      .select('pin_to_top')
      .where('user_id', '=', 13)
      .where('stream_id', '=', 100)
      .executeTakeFirstOrThrow();
    expect(row.pin_to_top).toBe(true);

    const denied = await fetch(`${base}/api/v1/users/14`, { headers: { host: 'chat.example.com' } });
    expect(denied.status).toBe(401);
    expect(denied.headers.get('www-authenticate')).toBe('Basic realm="zulip"');
  });
});
