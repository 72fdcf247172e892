import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectionStream } from '../src/db/socket-writes.js';
import { largeReads } from '../src/lib/keyed-queue.js';
import { jsonInSlices } from '../src/lib/slices.js';
import { canAccessUser } from '../src/modules/users/users.access.js';
import { realmUserRecord, selectRealmUsers } from '../src/modules/users/users.repository.js';
import { buildUserObject, type UserObjectOptions } from '../src/modules/users/users.serializers.js';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { ids } from './helpers/fixture.js';

/**
 * Large reads: GET /users and register of a large organization are built and serialized
 * a slice at a time (src/lib/slices.ts) and their rows decoded a chunk per turn
 * (src/db/socket-reads.ts), with exactly the bytes the one-piece serializer produced.
 */

const EXTRA_USERS = 3000;

let ctx: TestContext;
beforeAll(async () => {
  ctx = await createTestContext();
  // Every shape of user object: roles, bots, deactivated and deleted users, uploaded avatars,
  // each address visibility, time zones, profile values (Markdown ones with and without HTML).
  await sql`
    INSERT INTO users (realm_id, delivery_email, full_name, date_joined, is_active, role, bot_type, bot_owner_id, timezone,
                       avatar_source, avatar_version, email_address_visibility, is_imported_stub, is_deleted, api_key_hash)
    SELECT 1, 'person' || g || '@example.com', 'Person ' || g || ' "quoted" é ✓', timestamptz '2023-01-01' + g * interval '7 hours',
           g % 13 <> 0 AND g % 211 <> 0, CASE WHEN g % 200 = 0 THEN 200 WHEN g % 100 = 0 THEN 300 WHEN g % 16 = 0 THEN 600 ELSE 400 END,
           CASE WHEN g % 50 = 0 THEN 1 + g % 4 END, CASE WHEN g % 50 = 0 THEN ${ids.U}::int END,
           (ARRAY['', 'Europe/Berlin', 'Asia/Kolkata'])[1 + g % 3], CASE WHEN g % 5 = 0 THEN 'U' ELSE 'G' END, 1 + g % 3,
           1 + g % 5, g % 97 = 0, g % 211 = 0, encode(sha256(convert_to('large-' || g, 'UTF8')), 'hex')
    FROM generate_series(1, ${EXTRA_USERS}) AS g
  `.execute(ctx.db);
  await sql`
    INSERT INTO custom_profile_field_values (realm_id, user_id, field_id, value, rendered_value)
    SELECT 1, u.id, f.id, 'Value of ' || u.id || E'\n**bold**', CASE WHEN u.id % 7 = 0 THEN NULL ELSE '<p>Value</p>' END
    FROM users u CROSS JOIN custom_profile_fields f
    WHERE u.realm_id = 1 AND u.bot_type IS NULL AND u.id % 3 = 0 AND f.realm_id = 1
  `.execute(ctx.db);
});
afterAll(() => ctx.close());

/** The caller U as the services see it (see the fixture: a member of realm 1). */
const VIEWER = { id: ids.U, role: 400, realmSubdomain: '', realmCanAccessAllUsersGroup: 'everyone' } as const;

/** What the one-piece serializer sent: every object built, then one JSON.stringify. */
async function unslicedMembers(options: UserObjectOptions) {
  const rows = await selectRealmUsers(ctx.db, 1, { withProfileData: options.includeCustomProfileFields }).execute();
  return rows
    .map(realmUserRecord)
    .filter((user) => canAccessUser(VIEWER, user))
    .map((user) => buildUserObject(VIEWER, user, options, ctx.config));
}

describe('GET /users of a large organization', () => {
  it.each([
    ['', { clientGravatar: true, includeCustomProfileFields: false }],
    ['?client_gravatar=false&include_custom_profile_fields=true', { clientGravatar: false, includeCustomProfileFields: true }],
  ])('sends exactly the bytes of the one-piece serializer (%s)', async (query, options) => {
    const res = await api(ctx.app, { url: `/api/v1/users${query}`, as: 'U' });
    expect(res.statusCode).toBe(200);
    const members = await unslicedMembers(options);
    expect(members.length).toBeGreaterThan(EXTRA_USERS);
    expect(res.body).toBe(JSON.stringify({ result: 'success', msg: '', members }));
    expect(res.json()).toEqual({ result: 'success', msg: '', members });
    expect(res.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(res.headers['content-length']).toBe(String(Buffer.byteLength(res.body)));
    expect(res.headers['transfer-encoding']).toBeUndefined();
  });

  it('keeps ignored_parameters_unsupported last', async () => {
    const res = await api(ctx.app, { url: '/api/v1/users?apply_markdown=true', as: 'U' });
    const members = await unslicedMembers({ clientGravatar: true, includeCustomProfileFields: false });
    expect(res.body).toBe(JSON.stringify({ result: 'success', msg: '', members, ignored_parameters_unsupported: ['apply_markdown'] }));
  });

  it('HEAD answers with the same status and headers, without a body', async () => {
    const get = await api(ctx.app, { url: '/api/v1/users', as: 'U' });
    const head = await api(ctx.app, { method: 'HEAD', url: '/api/v1/users', as: 'U' });
    expect(head.statusCode).toBe(200);
    expect(head.body).toBe('');
    expect(head.headers['content-length']).toBe(get.headers['content-length']);
    expect(head.headers['content-type']).toBe(get.headers['content-type']);
  });

  it('errors still answer through the one error handler', async () => {
    const res = await api(ctx.app, { url: '/api/v1/users?user_ids=nope', as: 'U' });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ result: 'error', code: 'BAD_REQUEST' });
  });

  it('yields to the event loop while it builds and serializes the answer', async () => {
    // Turns of the event loop counted from the moment the rows are in (Kysely logs a statement
    // once its result has arrived) until the answer is complete: a serializer that held the loop
    // for the whole answer would leave none.
    let turnsAfterRows = 0;
    let ticking = true;
    const tick = () => {
      if (ctx.database.statements.some((statement) => statement.includes('string_agg'))) turnsAfterRows++;
      if (ticking) setImmediate(tick);
    };
    ctx.database.statements.length = 0;
    setImmediate(tick);
    const res = await api(ctx.app, { url: '/api/v1/users?include_custom_profile_fields=true', as: 'U' });
    ticking = false;
    expect(res.statusCode).toBe(200);
    expect(turnsAfterRows).toBeGreaterThan(10);
  });
});

describe('register of a large organization', () => {
  it('sends exactly the bytes of the one-piece serializer', async () => {
    const res = await api(ctx.app, { method: 'POST', url: '/api/v1/register', as: 'U', form: { fetch_event_types: '["realm_user"]' } });
    expect(res.statusCode).toBe(200);
    const options = { clientGravatar: true, includeCustomProfileFields: true, omitIsActive: true };
    const rows = await selectRealmUsers(ctx.db, 1, { withProfileData: true }).execute();
    const users = rows.map(realmUserRecord);
    const realmUsers = users.filter((user) => user.isActive).map((user) => buildUserObject(VIEWER, user, options, ctx.config));
    const nonActive = users.filter((user) => !user.isActive).map((user) => buildUserObject(VIEWER, user, options, ctx.config));
    const body = res.json<{ queue_id: string }>();
    expect(res.body).toBe(
      JSON.stringify({
        result: 'success',
        msg: '',
        queue_id: body.queue_id,
        idle_queue_timeout_secs: 600,
        zulip_version: ctx.config.zulipVersion,
        zulip_feature_level: 490,
        zulip_merge_base: ctx.config.zulipVersion,
        event_queue_longpoll_timeout_seconds: 90,
        realm_users: realmUsers,
        realm_non_active_users: nonActive,
        last_event_id: -1,
      }),
    );
    expect(res.headers['content-length']).toBe(String(Buffer.byteLength(res.body)));
  });
});

describe('large reads of one user at once', () => {
  it('all answer, one after the other (src/lib/keyed-queue.ts, largeReads)', async () => {
    const [first, ...others] = await Promise.all([
      api(ctx.app, { url: '/api/v1/users', as: 'U' }),
      api(ctx.app, { url: '/api/v1/users', as: 'U' }),
      api(ctx.app, { method: 'POST', url: '/api/v1/register', as: 'U', form: { fetch_event_types: '["realm_user"]' } }),
      api(ctx.app, { url: '/api/v1/users', as: 'U' }),
    ]);
    expect(first.statusCode).toBe(200);
    for (const res of others) expect(res.statusCode).toBe(200);
    expect(others[0].body).toBe(first.body);
    expect(others[2].body).toBe(first.body);
    expect(largeReads.running).toBe(0);
  });
});

describe("the pool's connections", () => {
  it("pause once a turn's large chunks have taken a slice's budget, and go on in a later turn (node-postgres Connection.stream, private)", async () => {
    const client = await ctx.database.pool.connect();
    try {
      const stream = connectionStream(client);
      // node-postgres's decoder and src/db/socket-reads.ts's: an upgrade that moves the socket fails here.
      expect(stream?.listenerCount?.('data')).toBe(2);
      let largeChunks = 0;
      let pauses = 0;
      stream!.on!('data', (chunk: Buffer) => {
        if (chunk.length >= 16 * 1024) largeChunks++;
        if (stream!.isPaused!()) pauses++;
      });
      // 20 MB: far more than a slice's budget to receive and decode.
      const { rows } = await client.query("SELECT repeat('x', 1000) AS text FROM generate_series(1, 20000)");
      expect(rows).toHaveLength(20000);
      expect(pauses).toBeGreaterThan(0);
      // The chunk a budget is counted from never pauses: two large chunks or more per turn, not one
      // (the first may pause at once on a budget left from an earlier answer on this connection).
      expect(pauses).toBeLessThanOrEqual(Math.ceil(largeChunks / 2));
    } finally {
      client.release();
    }
  });
});

describe('jsonInSlices', () => {
  it('gives the bytes of JSON.stringify, whatever the values', async () => {
    const values: object[] = [
      {},
      { a: [] },
      { a: undefined, b: () => 1, c: [undefined, () => 1, null, 1], d: 'é"\\\n✓\u2028', e: { nested: [1, { x: undefined }] } },
      { 2: 'two', 1: 'one', z: new Date(0), list: Array.from({ length: 5000 }, (_, i) => ({ i, text: `item ${i}` })) },
    ];
    for (const value of values) {
      const chunks = await jsonInSlices(value);
      expect(Buffer.concat(chunks).toString()).toBe(JSON.stringify(value));
    }
  });

  it('lets a timer set after it started fire before it ends, when the work is long', async () => {
    const list = Array.from({ length: 200_000 }, (_, i) => ({ i, text: `item ${i}`, flags: [true, false, null] }));
    let fired = false;
    const done = jsonInSlices({ list });
    setImmediate(() => {
      fired = true;
    });
    const chunks = await done;
    expect(fired).toBe(true);
    expect(chunks.length).toBeGreaterThan(1);
  });
});
