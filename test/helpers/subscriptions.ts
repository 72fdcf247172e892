import { expect } from 'vitest';
import type { LightMyRequestResponse } from 'fastify';
import { api, type TestContext } from './app.js';
import type { FixtureUser } from './fixture.js';

/** Shared by the subscription test files. */

export const PROPERTIES_URL = '/api/v1/users/me/subscriptions/properties';
export const OK = JSON.stringify({ result: 'success', msg: '' });

export const badRequestBody = (msg: string): string => JSON.stringify({ result: 'error', msg, code: 'BAD_REQUEST' });

export function expectBadRequest(res: LightMyRequestResponse, msg: string): void {
  expect(res.statusCode).toBe(400);
  expect(res.body).toBe(badRequestBody(msg));
}

/** POST .../properties with subscription_data JSON-encoded (a string is sent as is). */
export function bulk(ctx: TestContext, data: unknown, as: FixtureUser = 'U', extra: Record<string, string> = {}) {
  const subscriptionData = typeof data === 'string' ? data : JSON.stringify(data);
  return api(ctx.app, { method: 'POST', url: PROPERTIES_URL, as, form: { subscription_data: subscriptionData, ...extra } });
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
    events: await ctx.db.selectFrom('events').selectAll().execute(),
  };
}

/** Runs a request that must fail with 400 `msg` and leave every row as it was. */
export async function expectRejectedWithoutChanges(
  ctx: TestContext,
  send: () => Promise<LightMyRequestResponse>,
  msg: string,
): Promise<void> {
  const before = await writableState(ctx);
  expectBadRequest(await send(), msg);
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
