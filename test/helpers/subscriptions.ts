import { expect } from 'vitest';
import type { LightMyRequestResponse } from 'fastify';
import { api, type TestContext } from './app.js';
import { expectError } from './envelope.js';
import { type FixtureUser, ids } from './fixture.js';

/** Shared by the subscription test files. */

export const PROPERTIES_URL = '/api/v1/users/me/subscriptions/properties';

/** POST .../properties with subscription_data JSON-encoded (a string is sent as is). */
export function bulk(ctx: TestContext, data: unknown, as: FixtureUser = 'U', extra: Record<string, string> = {}) {
  const subscriptionData = typeof data === 'string' ? data : JSON.stringify(data);
  return api(ctx.app, { method: 'POST', url: PROPERTIES_URL, as, form: { subscription_data: subscriptionData, ...extra } });
}

/** A bulk payload that pins channel P to the top (U is subscribed to P). */
export const pinP = JSON.stringify([{ stream_id: ids.P, property: 'pin_to_top', value: true }]);

/** U's pin_to_top on channel P as stored. */
export async function pinToTopOfP(ctx: TestContext): Promise<boolean> {
  const row = await ctx.db
    .selectFrom('subscriptions')
    .select('pin_to_top')
    .where('user_id', '=', ids.U)
    .where('stream_id', '=', ids.P)
    .executeTakeFirstOrThrow();
  return row.pin_to_top;
}

export function subscriptionOf(ctx: TestContext, userId: number, streamId: number) {
  return ctx.db
    .selectFrom('subscriptions')
    .selectAll()
    .where('user_id', '=', userId)
    .where('stream_id', '=', streamId)
    .executeTakeFirstOrThrow();
}

export function auditRows(ctx: TestContext) {
  return ctx.db
    .selectFrom('subscription_audit_log')
    .select(['realm_id', 'acting_user_id', 'stream_id', 'property', 'old_value', 'new_value'])
    .orderBy('id')
    .execute();
}

/** Everything a settings request may write: subscriptions, audit rows and stored events. */
export async function writableState(ctx: TestContext) {
  return {
    subscriptions: await ctx.db.selectFrom('subscriptions').selectAll().orderBy('user_id').orderBy('stream_id').execute(),
    audit: await auditRows(ctx),
    events: await ctx.db.selectFrom('events').selectAll().orderBy('queue_id').orderBy('id').execute(),
  };
}

/** Runs a request that must fail with 400 `msg` and leave every row as it was. */
export async function expectRejectedWithoutChanges(
  ctx: TestContext,
  send: () => Promise<LightMyRequestResponse>,
  msg: string,
): Promise<void> {
  const before = await writableState(ctx);
  expectError(await send(), msg);
  expect(await writableState(ctx)).toEqual(before);
}

export const subscriptionEvent = (property: string, value: string | boolean, streamId: number, id: number) => ({
  type: 'subscription',
  op: 'update',
  property,
  value,
  stream_id: streamId,
  id,
});
