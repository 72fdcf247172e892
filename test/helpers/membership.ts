import type { LightMyRequestResponse } from 'fastify';
import type { Selectable } from 'kysely';
import type { Streams } from '../../src/db/types.js';
import { expect } from 'vitest';
import { api, type TestContext } from './app.js';
import { expectError } from './envelope.js';
import type { FixtureUser } from './fixture.js';

/** Shared by the membership test files (subscribe, unsubscribe, the reads). */

export const MEMBERSHIP_URL = '/api/v1/users/me/subscriptions';

/** POST /users/me/subscriptions; list values are JSON-encoded, strings sent as they are. */
export function subscribe(ctx: TestContext, form: Record<string, unknown>, as: FixtureUser = 'U') {
  return api(ctx.app, { method: 'POST', url: MEMBERSHIP_URL, as, form: encode(form) });
}

/** DELETE /users/me/subscriptions, likewise. */
export function unsubscribe(ctx: TestContext, form: Record<string, unknown>, as: FixtureUser = 'U') {
  return api(ctx.app, { method: 'DELETE', url: MEMBERSHIP_URL, as, form: encode(form) });
}

const encode = (form: Record<string, unknown>): Record<string, string> =>
  Object.fromEntries(Object.entries(form).map(([name, value]) => [name, typeof value === 'string' ? value : JSON.stringify(value)]));

/** Everything a membership change may write: channels, subscriptions, stored events. */
export async function membershipState(ctx: TestContext) {
  return {
    streams: await ctx.db.selectFrom('streams').selectAll().orderBy('id').execute(),
    subscriptions: await ctx.db.selectFrom('subscriptions').selectAll().orderBy('user_id').orderBy('stream_id').execute(),
    events: await ctx.db.selectFrom('events').selectAll().orderBy('queue_id').orderBy('id').execute(),
  };
}

/** Runs a request that must fail with 400 `msg` (code BAD_REQUEST unless told) and change nothing. */
export async function expectMembershipUnchanged(
  ctx: TestContext,
  send: () => Promise<LightMyRequestResponse>,
  msg: string,
  code = 'BAD_REQUEST',
) {
  const before = await membershipState(ctx);
  expectError(await send(), msg, code);
  expect(await membershipState(ctx)).toEqual(before);
}

/** The user's active subscriptions' channel ids, ascending. */
export async function activeChannelsOf(ctx: TestContext, userId: number): Promise<number[]> {
  const rows = await ctx.db
    .selectFrom('subscriptions')
    .select('stream_id')
    .where('user_id', '=', userId)
    .where('active', '=', true)
    .orderBy('stream_id')
    .execute();
  return rows.map((row) => row.stream_id);
}

/** The stream object of stream events for a channel row. */
export const streamObject = (row: Selectable<Streams>) => ({
  is_archived: row.deactivated,
  creator_id: row.creator_id,
  date_created: Math.floor(row.date_created.getTime() / 1000),
  description: row.description,
  first_message_id: null,
  history_public_to_subscribers: row.history_public_to_subscribers,
  invite_only: row.invite_only,
  is_web_public: row.is_web_public,
  message_retention_days: row.message_retention_days,
  name: row.name,
  rendered_description: row.rendered_description,
  stream_id: row.id,
  stream_weekly_traffic: null,
});
