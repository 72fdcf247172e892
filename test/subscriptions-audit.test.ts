import { sql } from 'kysely';
import { describe, expect, it } from 'vitest';
import { subscribeAsOperator } from '../src/modules/subscriptions/membership.service.js';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { ids } from './helpers/fixture.js';
import { subscribe, unsubscribe } from './helpers/membership.js';

/**
 * The audit rows of membership changes, Zulip's RealmAuditLog rows (zerver/actions/streams.py
 * bulk_add_subs_to_db_with_logging, bulk_remove_subscriptions; migration 0009): one per
 * subscription created (301), reactivated (302) or deactivated (303), written by the change's one
 * write statement.
 */

const { A, U, V, M, P, Q, S } = ids;
const CREATED = 301;
const ACTIVATED = 302;
const DEACTIVATED = 303;

const ctx = useTestContext(createTestContext);

/** Every audit row, in id order, without id and time. */
const auditRows = () =>
  ctx.db
    .selectFrom('subscription_audit_log')
    .select(['realm_id', 'event_type', 'acting_user_id', 'modified_user_id', 'stream_id', 'property', 'old_value', 'new_value'])
    .orderBy('id')
    .execute();

/** A membership row as the audit stores it: no property, no values. */
const row = (eventType: number, acting: number | null, modified: number, streamId: number) => ({
  realm_id: ids.R,
  event_type: eventType,
  acting_user_id: acting,
  modified_user_id: modified,
  stream_id: streamId,
  property: null,
  old_value: null,
  new_value: null,
});

const distinctTimes = async () =>
  new Set((await ctx.db.selectFrom('subscription_audit_log').select('created_at').execute()).map((r) => r.created_at.getTime())).size;

describe('subscribing', () => {
  it('writes SUBSCRIPTION_CREATED per new row, then SUBSCRIPTION_ACTIVATED per reactivated one, by the acting user, at one time', async () => {
    // U left P earlier: its row is there, inactive.
    await ctx.db.updateTable('subscriptions').set({ active: false }).where('user_id', '=', U).where('stream_id', '=', P).execute();
    const res = await subscribe(ctx, { subscriptions: [{ name: 'P' }, { name: 'Q' }, { name: 'New' }], principals: [U, V, M] }, 'A');
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().already_subscribed).toEqual({ [V]: ['P', 'Q'] });
    const created = await ctx.db.selectFrom('streams').select('id').where('name', '=', 'New').executeTakeFirstOrThrow();
    // The created rows, then the reactivated ones (Zulip's order; within each, user by user in id
    // order, channel by channel: Zulip's users come from a set, in no defined order).
    expect(await auditRows()).toEqual([
      row(CREATED, A, M, P),
      row(CREATED, A, M, Q),
      row(CREATED, A, M, created.id),
      row(CREATED, A, U, Q),
      row(CREATED, A, U, created.id),
      row(CREATED, A, V, created.id),
      row(ACTIVATED, A, U, P),
    ]);
    expect(await distinctTimes()).toBe(1);
  });

  it('oneself: the caller is both the acting and the modified user; nothing already subscribed is written', async () => {
    expect((await subscribe(ctx, { subscriptions: [{ name: 'Q' }, { name: 'P' }] }, 'U')).statusCode).toBe(200);
    expect(await auditRows()).toEqual([row(CREATED, U, U, Q)]);
    expect((await subscribe(ctx, { subscriptions: [{ name: 'Q' }, { name: 'P' }] }, 'U')).json().subscribed).toEqual({});
    expect(await auditRows()).toHaveLength(1);
  });

  it('a refused request writes no audit row', async () => {
    const refused = await subscribe(ctx, { subscriptions: [{ name: 'Q' }], principals: [U, 999_999] }, 'A');
    expect(refused.json()).toMatchObject({ result: 'error', msg: 'No such user' });
    const unauthorized = await subscribe(ctx, { subscriptions: [{ name: 'Q' }, { name: 'S' }] }, 'U');
    expect(unauthorized.json()).toMatchObject({ result: 'error', msg: 'Unable to access channel (S).' });
    expect(await auditRows()).toEqual([]);
  });

  it("the admin command line's subscribe has no acting user (Zulip's acting_user=None)", async () => {
    const writes = { transactions: ctx.database.transactions, maxPendingEvents: ctx.config.queueMaxPendingEvents, config: ctx.config };
    await subscribeAsOperator(writes, ids.R, U, 'S');
    expect(await auditRows()).toEqual([row(CREATED, null, U, S)]);
  });
});

describe('a rolling deploy across migration 0009', () => {
  it('an instance of the previous release still writes its settings rows (no modified user, no event type)', async () => {
    // The previous release's settings statement named these columns only.
    await sql`INSERT INTO subscription_audit_log (realm_id, acting_user_id, stream_id, property, old_value, new_value, created_at)
      VALUES (${ids.R}, ${U}, ${P}, 'pin_to_top', 'false', 'true', now())`.execute(ctx.db);
    expect(await auditRows()).toEqual([
      {
        realm_id: ids.R,
        event_type: 304,
        acting_user_id: U,
        modified_user_id: null,
        stream_id: P,
        property: 'pin_to_top',
        old_value: false,
        new_value: true,
      },
    ]);
  });
});

describe('unsubscribing', () => {
  it('writes SUBSCRIPTION_DEACTIVATED per removed subscription, in request order; none for not_removed', async () => {
    const res = await unsubscribe(ctx, { subscriptions: ['P', 'Q'], principals: [V, U] }, 'A');
    expect(res.json()).toMatchObject({ removed: ['P', 'Q', 'P'], not_removed: ['Q'] });
    expect(await auditRows()).toEqual([row(DEACTIVATED, A, V, P), row(DEACTIVATED, A, V, Q), row(DEACTIVATED, A, U, P)]);
    expect(await distinctTimes()).toBe(1);
    // Subscribing again reactivates the row.
    expect((await subscribe(ctx, { subscriptions: [{ name: 'P' }] }, 'U')).statusCode).toBe(200);
    expect((await auditRows()).at(-1)).toEqual(row(ACTIVATED, U, U, P));
  });

  it('a refused request writes no audit row', async () => {
    const res = await unsubscribe(ctx, { subscriptions: ['P', 'Nowhere'] }, 'U');
    expect(res.json()).toMatchObject({ result: 'error', msg: 'Channel(s) (Nowhere) do not exist' });
    expect(await auditRows()).toEqual([]);
  });
});

describe('deactivating and reactivating a user', () => {
  it("writes no subscription audit row and keeps the subscriptions, as Zulip's do_deactivate_user", async () => {
    const subscriptionsOfV = () =>
      ctx.db.selectFrom('subscriptions').select(['stream_id', 'active']).where('user_id', '=', V).orderBy('stream_id').execute();
    const before = await subscriptionsOfV();
    expect((await api(ctx.app, { method: 'DELETE', url: `/api/v1/users/${V}`, as: 'A' })).statusCode).toBe(200);
    expect(await subscriptionsOfV()).toEqual(before);
    expect((await api(ctx.app, { method: 'POST', url: `/api/v1/users/${V}/reactivate`, as: 'A' })).statusCode).toBe(200);
    expect(await subscriptionsOfV()).toEqual(before);
    expect(await auditRows()).toEqual([]);
  });
});

/** U subscribed to `count` new channels of organization 1 (`Many 0`, …), pin_to_top false; their ids. */
async function channelsOfU(count: number): Promise<number[]> {
  const streams = await ctx.db
    .insertInto('streams')
    .values(Array.from({ length: count }, (_, index) => ({ realm_id: ids.R, name: `Many ${index}` })))
    .returning('id')
    .execute();
  await ctx.db
    .insertInto('subscriptions')
    .values(streams.map((stream) => ({ realm_id: ids.R, user_id: U, stream_id: stream.id, color: '#c2c2c2' })))
    .execute();
  return streams.map((stream) => stream.id);
}

/** The ids of the channels named `names`, in that order. */
async function idsOf(names: string[]): Promise<number[]> {
  const streams = await ctx.db.selectFrom('streams').select(['id', 'name']).where('name', 'in', names).execute();
  return names.map((name) => streams.find((stream) => stream.name === name)!.id);
}

/** The one row of a membership request of more than 100 pairs: [user_id, stream_id, event_type] of each. */
const summaryRow = (eventType: number, acting: number, pairs: [number, number, number][]) => ({
  realm_id: ids.R,
  event_type: eventType,
  acting_user_id: acting,
  modified_user_id: null,
  stream_id: null,
  property: null,
  old_value: null,
  new_value: pairs,
});

describe('the rows of a large membership change', () => {
  const names = (count: number) => Array.from({ length: count }, (_, index) => `New ${index}`);

  it('a subscribe of 100 (user, channel) pairs writes one row each', async () => {
    const res = await subscribe(ctx, { subscriptions: names(50).map((name) => ({ name })), principals: [U, V] }, 'A');
    expect(res.json()).toMatchObject({ result: 'success', subscribed: { [U]: names(50), [V]: names(50) } });
    const streamIds = await idsOf(names(50));
    expect(await auditRows()).toEqual(
      [U, V].sort((a, b) => a - b).flatMap((user) => streamIds.map((streamId) => row(CREATED, A, user, streamId))),
    );
  });

  it('a subscribe of 101 pairs writes one row holding them all, in the order of the rows; the answer and the subscriptions are the same', async () => {
    await ctx.db.updateTable('subscriptions').set({ active: false }).where('user_id', '=', U).where('stream_id', '=', P).execute();
    const res = await subscribe(ctx, { subscriptions: [{ name: 'P' }, ...names(100).map((name) => ({ name }))], principals: [U] }, 'A');
    expect(res.json()).toEqual({
      result: 'success',
      msg: '',
      subscribed: { [U]: ['P', ...names(100)] },
      already_subscribed: {},
      new_subscription_messages_sent: true,
    });
    const streamIds = await idsOf(names(100));
    expect(await auditRows()).toEqual([
      summaryRow(CREATED, A, [...streamIds.map((streamId): [number, number, number] => [U, streamId, CREATED]), [U, P, ACTIVATED]]),
    ]);
    const active = await ctx.db
      .selectFrom('subscriptions')
      .select('stream_id')
      .where('user_id', '=', U)
      .where('stream_id', 'in', [P, ...streamIds])
      .where('active', '=', true)
      .execute();
    expect(active).toHaveLength(101);
  });

  it('an unsubscribe of 100 pairs writes one row each', async () => {
    const streamIds = await channelsOfU(100);
    const res = await unsubscribe(ctx, { subscriptions: streamIds.map((_, index) => `Many ${index}`) }, 'U');
    expect(res.json().removed).toHaveLength(100);
    expect(await auditRows()).toEqual(streamIds.map((streamId) => row(DEACTIVATED, U, U, streamId)));
  });

  it('an unsubscribe of 101 pairs writes one row holding them all; the answer and the subscriptions are the same', async () => {
    const streamIds = await channelsOfU(101);
    const manyNames = streamIds.map((_, index) => `Many ${index}`);
    const res = await unsubscribe(ctx, { subscriptions: manyNames }, 'U');
    expect(res.json()).toEqual({ result: 'success', msg: '', removed: manyNames, not_removed: [] });
    expect(await auditRows()).toEqual([
      summaryRow(
        DEACTIVATED,
        U,
        streamIds.map((streamId) => [U, streamId, DEACTIVATED]),
      ),
    ]);
    const active = await ctx.db
      .selectFrom('subscriptions')
      .select('stream_id')
      .where('user_id', '=', U)
      .where('stream_id', 'in', streamIds)
      .where('active', '=', true)
      .execute();
    expect(active).toEqual([]);
  });
});

describe('the rows of a settings change', () => {
  const pinAll = (streamIds: number[]) =>
    api(ctx.app, {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      as: 'U',
      // Each channel twice: its (channel, setting) pair's row holds the value it ends with.
      form: {
        subscription_data: JSON.stringify(
          [false, true].flatMap((value) => streamIds.map((streamId) => ({ stream_id: streamId, property: 'pin_to_top', value }))),
        ),
      },
    });
  const settingRow = (streamId: number | null, property: string | null, oldValue: unknown, newValue: unknown) => ({
    realm_id: ids.R,
    event_type: 304,
    acting_user_id: U,
    modified_user_id: U,
    stream_id: streamId,
    property,
    old_value: oldValue,
    new_value: newValue,
  });

  it('are one per (channel, setting) up to 100 pairs', async () => {
    const streamIds = await channelsOfU(100);
    const res = await pinAll(streamIds);
    expect(res.body).toBe('{"result":"success","msg":""}');
    expect(await auditRows()).toEqual(streamIds.map((streamId) => settingRow(streamId, 'pin_to_top', false, true)));
  });

  it('beyond 100 pairs, one row holds them all, stored and final values in request order; the answer and the settings are the same', async () => {
    const streamIds = await channelsOfU(101);
    const res = await pinAll(streamIds);
    expect(res.body).toBe('{"result":"success","msg":""}');
    expect(await auditRows()).toEqual([
      settingRow(
        null,
        null,
        streamIds.map((streamId) => [streamId, 'pin_to_top', false]),
        streamIds.map((streamId) => [streamId, 'pin_to_top', true]),
      ),
    ]);
    const pinned = await ctx.db
      .selectFrom('subscriptions')
      .select('pin_to_top')
      .where('user_id', '=', U)
      .where('stream_id', 'in', streamIds)
      .execute();
    expect(pinned.map((row) => row.pin_to_top)).toEqual(streamIds.map(() => true));
  });
});
