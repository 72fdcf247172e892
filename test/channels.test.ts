import { sql } from 'kysely';
import { createDemoOrganization } from '../src/cli/demo.js';
import { createStream } from '../src/cli/operations.js';
import { declaredParameters } from '../src/http/params.js';
import { listChannelsSchema } from '../src/modules/subscriptions/channels.schemas.js';
import { describe, expect, it } from 'vitest';
import { api, createTestContext, useSharedTestContext, useTestContext } from './helpers/app.js';
import { expectError, missingArgument, success } from './helpers/envelope.js';
import { basicAuth, type FixtureUser, ids } from './helpers/fixture.js';
import { streamObject, subscribe, unsubscribe } from './helpers/membership.js';

// GET /streams, GET /streams/{stream_id} and GET /get_stream_id against Zulip's behaviour at
// feature level 490: zerver/tests/test_channel_fetch.py (GetStreamsTest, StreamIdTest) translated
// to the docs/api.md fixture (P, Q public; S private, V subscribed; Z archived; W web-public; C2 another
// organization's; B a bot owned by U), and each parameter and refusal.

const { P, Q, S, Z, W, C2, U, B } = ids;
const ctx = useSharedTestContext();

// X belongs to the other organization.
const hostOf = (as: FixtureUser) => (as === 'X' ? { host: 'other.chat.example.com' } : {});
const streams = (query = '', as: FixtureUser = 'U') => api(ctx.app, { url: `/api/v1/streams${query}`, as, ...hostOf(as) });
const single = (id: number | string, as: FixtureUser = 'U') => api(ctx.app, { url: `/api/v1/streams/${id}`, as });
const streamId = (name: string, as: FixtureUser = 'U') =>
  api(ctx.app, { url: `/api/v1/get_stream_id?stream=${encodeURIComponent(name)}`, as, ...hostOf(as) });

/** The names GET /streams lists, in order. */
async function names(query = '', as: FixtureUser = 'U'): Promise<string[]> {
  const res = await streams(query, as);
  expect(res.statusCode).toBe(200);
  return res.json<{ streams: { name: string }[] }>().streams.map((stream) => stream.name);
}

/** The channel object Zulip sends for a channel row, computed from the database. */
async function expected(id: number) {
  const row = await ctx.db.selectFrom('streams').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const { count } = await ctx.db
    .selectFrom('subscriptions as sub')
    .innerJoin('users as u', 'u.id', 'sub.user_id')
    .select((eb) => eb.fn.countAll<string>().as('count'))
    .where('sub.stream_id', '=', id)
    .where('sub.active', '=', true)
    .where('u.is_active', '=', true)
    .executeTakeFirstOrThrow();
  const ageDays = (Date.now() - row.date_created.getTime()) / 86_400_000;
  // The stream events' object, with the keys Zulip adds in its own places.
  const { stream_weekly_traffic: _null, ...event } = streamObject(row);
  const entries = Object.entries(event);
  entries.splice(entries.findIndex(([key]) => key === 'first_message_id') + 1, 0, ['folder_id', null]);
  return {
    ...Object.fromEntries(entries),
    stream_post_policy: 1,
    is_announcement_only: false,
    stream_weekly_traffic: ageDays >= 7 ? 0 : null,
    subscriber_count: Number(count),
    topics_policy: 'inherit',
  };
}

/** A channel made through the API by `as` (its creator), `private` or not. */
async function createChannel(name: string, as: FixtureUser, options: Record<string, unknown> = {}): Promise<number> {
  expect((await subscribe(ctx, { subscriptions: [{ name }], ...options }, as)).statusCode).toBe(200);
  const row = await ctx.db.selectFrom('streams').select('id').where('name', '=', name).executeTakeFirstOrThrow();
  return row.id;
}

describe('the channel object', () => {
  it("has Zulip's keys in Zulip's order, with its values where this server has no data", async () => {
    expect((await single(P)).body).toBe(
      success({
        stream: {
          is_archived: false,
          creator_id: null,
          date_created: 1704164645,
          description: 'General chat',
          first_message_id: null,
          folder_id: null,
          history_public_to_subscribers: true,
          invite_only: false,
          is_web_public: false,
          message_retention_days: null,
          name: 'P',
          rendered_description: '<p>General chat</p>',
          stream_id: P,
          stream_post_policy: 1,
          is_announcement_only: false,
          stream_weekly_traffic: 0,
          // U, V and G: D, deactivated, is subscribed too.
          subscriber_count: 3,
          topics_policy: 'inherit',
        },
      }),
    );
    expect((await streams()).body).toBe(success({ streams: [await expected(P), await expected(Q), await expected(W)] }));
  });

  it('stream_weekly_traffic is null until the channel is 7 days old, then 0 (no messages)', async () => {
    await ctx.ownDatabase();
    const id = await createChannel('young', 'U');
    expect((await single(id)).json().stream).toMatchObject({ stream_weekly_traffic: null, creator_id: U, subscriber_count: 1 });
    await ctx.db
      .updateTable('streams')
      .set({ date_created: sql`now() - interval '6 days 23 hours'` })
      .where('id', '=', id)
      .execute();
    expect((await single(id)).json().stream.stream_weekly_traffic).toBe(null);
    await ctx.db
      .updateTable('streams')
      .set({ date_created: sql`now() - interval '7 days'` })
      .where('id', '=', id)
      .execute();
    expect((await single(id)).json().stream.stream_weekly_traffic).toBe(0);
  });

  // SubscriptionAPITest.test_stream_creator_id (GET part).
  it("creator_id: the API's channels name their creator, the others null", async () => {
    await ctx.ownDatabase();
    const id = await createChannel('made by V', 'V');
    const listed = (await streams('?include_all=true', 'A')).json().streams as { name: string; creator_id: number | null }[];
    expect(listed.map((stream) => [stream.name, stream.creator_id])).toEqual([
      ['P', null],
      ['Q', null],
      ['S', null],
      ['W', null],
      ['made by V', ids.V],
    ]);
    expect((await single(id)).body).toBe(success({ stream: await expected(id) }));
  });
});

describe('GET /streams (GetStreamsTest)', () => {
  it('test_public_streams_api: include_public=false lists the subscriptions; include_subscribed=false every public channel', async () => {
    const subscriptions = (await api(ctx.app, { url: '/api/v1/users/me/subscriptions', as: 'U' })).json().subscriptions as {
      name: string;
    }[];
    expect(await names('?include_public=false')).toEqual(subscriptions.map((sub) => sub.name));
    expect(await names('?include_public=false')).toEqual(['P']);
    expect(await names('?include_public=true&include_subscribed=false')).toEqual(['P', 'Q', 'W']);
    // V's private S comes from its subscription.
    expect(await names('', 'V')).toEqual(['P', 'Q', 'S', 'W']);
    expect(await names('?include_public=false', 'V')).toEqual(['P', 'Q', 'S', 'W']);
    expect(await names('?include_public=false&include_subscribed=false')).toEqual([]);
  });

  it('test_guest_user_access_to_streams: a guest gets its subscriptions and, when asked, the web-public channels', async () => {
    expect(await names('?include_web_public=true', 'G')).toEqual(['P', 'W']);
    // include_public is ignored for guests.
    expect(await names('', 'G')).toEqual(['P']);
    expect(await names('?include_public=true&include_subscribed=false', 'G')).toEqual([]);
    expect(await names('?include_web_public=true&include_subscribed=false&include_public=false')).toEqual(['W']);
  });

  it("test_streams_api_for_bot_owners: include_owner_subscribed adds the owner's subscriptions, for bots only", async () => {
    await ctx.ownDatabase();
    const ownerOnly = '?include_owner_subscribed=true&include_public=false&include_subscribed=false';
    expect(await names(ownerOnly, 'B')).toEqual(['P']);
    // Humans: ignored.
    expect(await names(ownerOnly, 'V')).toEqual([]);
    expect((await subscribe(ctx, { subscriptions: [{ name: 'Q' }] }, 'B')).statusCode).toBe(200);
    expect(await names('?include_owner_subscribed=true&include_public=false&include_subscribed=true', 'B')).toEqual(['P', 'Q']);
    await createChannel('private_stream', 'V', { invite_only: true, principals: [B] });
    expect(await names('?include_owner_subscribed=true&include_public=true&include_subscribed=false', 'B')).toEqual(['P', 'Q', 'W']);
    expect(await names('?include_owner_subscribed=true&include_public=true&include_subscribed=true', 'B')).toEqual([
      'P',
      'Q',
      'W',
      'private_stream',
    ]);
    await createChannel('private_stream_2', 'V', { invite_only: true });
    expect(await names('?include_owner_subscribed=true&include_can_access_content=true', 'B')).toEqual(['P', 'Q', 'W', 'private_stream']);
    // The owner's private subscriptions count too.
    await createChannel('owners_private', 'U', { invite_only: true });
    expect(await names(ownerOnly, 'B')).toEqual(['P', 'owners_private']);
  });

  it('test_all_streams_api: include_all is metadata access; include_all_active the same; exclude_archived=false', async () => {
    await ctx.ownDatabase();
    await createChannel('private_stream_1', 'V', { invite_only: true, principals: [ids.U] });
    await createChannel('private_stream_3', 'U', { invite_only: true });
    // Its creator keeps metadata access after leaving (Zulip's default can_administer_channel_group).
    expect((await unsubscribe(ctx, { subscriptions: ['private_stream_3'] }, 'U')).statusCode).toBe(200);
    await createChannel('private_stream_4', 'V', { invite_only: true });
    expect(await names('?include_all=true')).toEqual(['P', 'Q', 'W', 'private_stream_1', 'private_stream_3']);

    // Guests: their subscriptions and the web-public channels.
    expect((await subscribe(ctx, { subscriptions: [{ name: 'private_stream_1' }], principals: [ids.G] }, 'U')).statusCode).toBe(200);
    expect(await names('?include_all=true', 'G')).toEqual(['P', 'W', 'private_stream_1']);

    // Administrators: every active channel.
    const all = await streams('?include_all=true', 'A');
    expect(all.json().streams.map((stream: { name: string }) => stream.name)).toEqual([
      'P',
      'Q',
      'S',
      'W',
      'private_stream_1',
      'private_stream_3',
      'private_stream_4',
    ]);
    expect((await streams('?include_all_active=true', 'A')).body).toBe(all.body);
    expect((await streams('?include_all=true&include_public=false&include_subscribed=false', 'A')).body).toBe(all.body);
    expect(await names('?include_all=true&exclude_archived=false', 'A')).toEqual([
      'P',
      'Q',
      'S',
      'W',
      'Z',
      'private_stream_1',
      'private_stream_3',
      'private_stream_4',
    ]);
    expect((await streams('?include_all=true&exclude_archived=false', 'A')).json().streams[4]).toEqual(await expected(Z));

    await ctx.db.updateTable('streams').set({ deactivated: true }).execute();
    expect((await streams('?include_all=true', 'A')).body).toBe(success({ streams: [] }));
  });

  it('test_include_can_access_content_streams_api: public, subscribed and web-public channels; the other sources add nothing', async () => {
    await ctx.ownDatabase();
    await createChannel('private_stream_1', 'V', { invite_only: true, principals: [ids.U] });
    await createChannel('private_stream_2', 'V', { invite_only: true });
    // A private channel's creator has no content access once unsubscribed.
    await createChannel('private_stream_3', 'U', { invite_only: true });
    expect((await unsubscribe(ctx, { subscriptions: ['private_stream_3'] }, 'U')).statusCode).toBe(200);
    const expectedNames = ['P', 'Q', 'W', 'private_stream_1'];
    expect(await names('?include_can_access_content=true')).toEqual(expectedNames);
    expect(await names('?include_can_access_content=true&include_public=false&include_subscribed=false')).toEqual(expectedNames);
    // Administrators have no content access to private channels they are not subscribed to.
    expect(await names('?include_can_access_content=true', 'A')).toEqual(['P', 'Q', 'W']);
    expect(await names('?include_can_access_content=true', 'G')).toEqual(['P', 'W']);
  });

  it('exclude_archived=false lets archived channels in, only through the chosen sources', async () => {
    await ctx.ownDatabase();
    expect(await names('?exclude_archived=false')).toEqual(['P', 'Q', 'W', 'Z']);
    expect(await names('?exclude_archived=false', 'V')).toEqual(['P', 'Q', 'S', 'W', 'Z']);
    expect(await names('?exclude_archived=false&include_public=false', 'V')).toEqual(['P', 'Q', 'S', 'W']);
    // Web-public channels never include archived ones.
    await ctx.db.updateTable('streams').set({ deactivated: true }).where('id', '=', W).execute();
    expect(await names('?exclude_archived=false&include_web_public=true', 'G')).toEqual(['P']);
  });

  // DefaultStreamTest.test_api_calls (GET part): no default channels here.
  it('include_default adds is_default, last', async () => {
    expect((await streams('?include_default=true')).body).toBe(
      success({
        streams: [
          { ...(await expected(P)), is_default: false },
          { ...(await expected(Q)), is_default: false },
          { ...(await expected(W)), is_default: false },
        ],
      }),
    );
    expect((await streams('?include_default=false')).body).toBe((await streams()).body);
  });

  it('sorts by name in code-point order and lists no other organization', async () => {
    await ctx.ownDatabase();
    await createChannel('core team', 'U');
    await createChannel('Verona', 'U');
    expect(await names()).toEqual(['P', 'Q', 'Verona', 'W', 'core team']);
    expect(await names('?include_all=true', 'A')).not.toContain('C2');
    expect(await names('', 'X')).toEqual(['C2']);
  });

  it('refuses a value that is not a JSON boolean, parameter by parameter; reports unknown parameters', async () => {
    for (const name of Object.keys(declaredParameters(listChannelsSchema))) {
      expectError(await streams(`?${name}=True`), `${name} is not valid JSON`);
      expectError(await streams(`?${name}=`), `${name} is not valid JSON`);
      expectError(await streams(`?${name}=1`), `${name} is not a boolean`);
      expectError(await streams(`?${name}=%22true%22`), `${name} is not a boolean`);
      expectError(await streams(`?${name}=null`), `${name} is not a boolean`);
    }
    // In Zulip's order: the first invalid one is reported.
    expectError(await streams('?include_can_access_content=1&include_public=1'), 'include_public is not a boolean');
    expect((await streams('?foo=bar&include_public=false')).body).toBe(
      success({ streams: [await expected(P)], ignored_parameters_unsupported: ['foo'] }),
    );
  });
});

describe('GET /streams/{stream_id} (test_get_single_stream_api)', () => {
  it('answers a channel the caller has metadata access to', async () => {
    await ctx.ownDatabase();
    expect((await single(Q)).body).toBe(success({ stream: await expected(Q) }));
    expect((await single(W, 'G')).body).toBe(success({ stream: await expected(W) }));
    expect((await single(P, 'G')).body).toBe(success({ stream: await expected(P) }));
    // Private: its subscribers and administrators; not other members.
    expect((await single(S, 'V')).body).toBe(success({ stream: await expected(S) }));
    expect((await single(S, 'A')).body).toBe(success({ stream: await expected(S) }));
    expect((await single(S, 'O')).body).toBe(success({ stream: await expected(S) }));
    expectError(await single(S, 'U'), 'Invalid channel ID');
    expectError(await single(S, 'M'), 'Invalid channel ID');
    // Its creator, even unsubscribed.
    const own = await createChannel('own', 'U', { invite_only: true });
    expect((await unsubscribe(ctx, { subscriptions: ['own'] }, 'U')).statusCode).toBe(200);
    expect((await single(own, 'U')).body).toBe(success({ stream: await expected(own) }));
    expectError(await single(own, 'V'), 'Invalid channel ID');
  });

  it('refuses unknown ids, archived channels, guests on unsubscribed public channels and other organizations', async () => {
    expectError(await single(9999), 'Invalid channel ID');
    expectError(await single(99999999999), 'Invalid channel ID');
    expectError(await single(Z), 'Invalid channel ID');
    expectError(await single(Z, 'A'), 'Invalid channel ID');
    expectError(await single(Q, 'G'), 'Invalid channel ID');
    expectError(await single(C2), 'Invalid channel ID');
    expectError(await single(C2, 'A'), 'Invalid channel ID');
    expect((await single('abc')).statusCode).toBe(404);
    // A path parameter is not a parameter: ?stream_id is reported.
    expect((await api(ctx.app, { url: `/api/v1/streams/${P}?stream_id=1`, as: 'U' })).body).toBe(
      success({ stream: await expected(P), ignored_parameters_unsupported: ['stream_id'] }),
    );
  });
});

describe('GET /get_stream_id (StreamIdTest)', () => {
  it("test_get_stream_id: the id of the caller's channel; names compared ignoring case, stripped", async () => {
    const first = (await api(ctx.app, { url: '/api/v1/users/me/subscriptions', as: 'U' })).json().subscriptions[0];
    expect((await streamId(first.name)).body).toBe(success({ stream_id: first.stream_id }));
    expect((await streamId('p')).body).toBe(success({ stream_id: P }));
    expect((await streamId(' P\u00a0')).body).toBe(success({ stream_id: P }));
    expect((await streamId('Q')).body).toBe(success({ stream_id: Q }));
    expect((await streamId('W', 'G')).body).toBe(success({ stream_id: W }));
    expect((await streamId('S', 'V')).body).toBe(success({ stream_id: S }));
  });

  it("test_get_stream_id_wrong_name: Invalid channel name '<stream as sent>' whenever the caller has no content access", async () => {
    expectError(await streamId('wrongname'), "Invalid channel name 'wrongname'");
    expectError(await streamId(' wrongname '), "Invalid channel name ' wrongname '");
    expectError(await streamId(''), "Invalid channel name ''");
    expectError(await streamId('a\u0000b'), "Invalid channel name 'a\u0000b'");
    // Private without a subscription, administrators included (metadata access is not enough).
    expectError(await streamId('S'), "Invalid channel name 'S'");
    expectError(await streamId('S', 'A'), "Invalid channel name 'S'");
    // Archived, even for a subscriber; a guest's unsubscribed public channel; another organization's.
    expectError(await streamId('Z'), "Invalid channel name 'Z'");
    expectError(await streamId('Q', 'G'), "Invalid channel name 'Q'");
    expectError(await streamId('C2'), "Invalid channel name 'C2'");
    expect((await streamId('C2', 'X')).body).toBe(success({ stream_id: C2 }));
  });

  it("answers Missing 'stream' argument without it", async () => {
    const res = await api(ctx.app, { url: '/api/v1/get_stream_id', as: 'U' });
    expect([res.statusCode, res.body]).toEqual([400, missingArgument('stream')]);
    const other = await api(ctx.app, { url: '/api/v1/get_stream_id?stream_name=P', as: 'U' });
    expect([other.statusCode, other.body]).toEqual([400, missingArgument('stream')]);
    expect((await api(ctx.app, { url: '/api/v1/get_stream_id?stream=P&x=1', as: 'U' })).body).toBe(
      success({ stream_id: P, ignored_parameters_unsupported: ['x'] }),
    );
  });
});

describe("the official clients' calls, as they send them", () => {
  it("python-zulip-api: get_streams(), get_streams(include_public=False), get_stream_id('P'), get_subscribers(stream='P')", async () => {
    // get_streams(**request): GET streams, values that are not strings JSON-encoded.
    expect((await streams()).body).toBe(success({ streams: [await expected(P), await expected(Q), await expected(W)] }));
    expect((await streams('?include_public=false')).body).toBe(success({ streams: [await expected(P)] }));
    // get_stream_id(stream): GET get_stream_id?stream=<quoted>.
    expect((await api(ctx.app, { url: '/api/v1/get_stream_id?stream=P', as: 'U' })).body).toBe(success({ stream_id: P }));
    // get_subscribers(**request): get_stream_id first, then GET streams/{id}/members with the same request.
    expect((await api(ctx.app, { url: `/api/v1/streams/${P}/members?stream=P`, as: 'U' })).body).toBe(
      success({ subscribers: [ids.U, ids.V, ids.G], ignored_parameters_unsupported: ['stream'] }),
    );
  });

  it('zulip-js: streams.retrieve() and streams.retrieve({ include_public: false })', async () => {
    expect((await streams()).body).toBe(success({ streams: [await expected(P), await expected(Q), await expected(W)] }));
    // Its GET parameters are URLSearchParams of String(value).
    expect((await streams(`?${new URLSearchParams({ include_public: String(false) }).toString()}`)).body).toBe(
      success({ streams: [await expected(P)] }),
    );
  });
});

describe('channels of the admin command line', () => {
  it("private ones get history_public_to_subscribers false, as Zulip's", async () => {
    await ctx.ownDatabase();
    const priv = await createStream(ctx.db, { realm: '', name: 'cli private', private: true });
    const pub = await createStream(ctx.db, { realm: '', name: 'cli public' });
    const row = (id: number) =>
      ctx.db.selectFrom('streams').select('history_public_to_subscribers').where('id', '=', id).executeTakeFirstOrThrow();
    expect(await row(priv.stream_id)).toEqual({ history_public_to_subscribers: false });
    expect(await row(pub.stream_id)).toEqual({ history_public_to_subscribers: true });
    expect((await single(priv.stream_id, 'A')).json().stream).toMatchObject({
      invite_only: true,
      history_public_to_subscribers: false,
      creator_id: null,
    });
  });
});

describe('cost', () => {
  it('one query per request whatever the number of channels (none without a source), besides authentication', async () => {
    await ctx.ownDatabase();
    const count = async (url: string) => {
      ctx.database.statements.length = 0;
      expect((await api(ctx.app, { url, as: 'A' })).statusCode).toBe(200);
      return ctx.database.statements.length;
    };
    const before = [
      await count('/api/v1/streams?include_all=true'),
      await count(`/api/v1/streams/${S}`),
      await count('/api/v1/get_stream_id?stream=P'),
    ];
    await ctx.db
      .insertInto('streams')
      .values(Array.from({ length: 200 }, (_, i) => ({ realm_id: 1, name: `many ${i}` })))
      .execute();
    expect((await streams('?include_all=true', 'A')).json().streams).toHaveLength(204);
    expect([
      await count('/api/v1/streams?include_all=true'),
      await count(`/api/v1/streams/${S}`),
      await count('/api/v1/get_stream_id?stream=P'),
    ]).toEqual(before);
    expect(before).toEqual([2, 2, 2]);
    expect(await count('/api/v1/streams?include_public=false&include_subscribed=false')).toBe(1);
  });
});

describe('the demo organization (npm start)', () => {
  const demo = useTestContext(() => createTestContext({ fixture: false }));
  it('answers get_stream_id?stream=general with its id, and lists its channels', async () => {
    const accounts = (await createDemoOrganization(demo.database, demo.config))!;
    const member = accounts.find((account) => account.role === 'member')!;
    const headers = { authorization: basicAuth(member.email, member.api_key) };
    const general = await demo.db.selectFrom('streams').select('id').where('name', '=', 'general').executeTakeFirstOrThrow();
    expect((await api(demo.app, { url: '/api/v1/get_stream_id?stream=general', headers })).body).toBe(success({ stream_id: general.id }));
    const listed = await api(demo.app, { url: '/api/v1/streams', headers });
    expect(listed.json().streams.map((stream: { name: string }) => stream.name)).toEqual(['general', 'random']);
    expectError(await api(demo.app, { url: '/api/v1/get_stream_id?stream=staff', headers }), "Invalid channel name 'staff'");
  });
});
