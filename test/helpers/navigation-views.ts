import type { LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';
import { api, createTestContext, type TestContext } from './app.js';
import { errorBody } from './envelope.js';
import { createQueue, type FixtureUser, ids, queueEvents } from './fixture.js';

/** A fresh fixture database with one queue each for U and V (the acting user and a bystander). */
export interface ViewsContext extends TestContext {
  queueU: string;
  queueV: string;
}

export async function createViewsContext(): Promise<ViewsContext> {
  const ctx = await createTestContext();
  return { ...ctx, queueU: await createQueue(ctx.db, 'U'), queueV: await createQueue(ctx.db, 'V') };
}

export interface SeedView {
  fragment: string;
  is_pinned: boolean;
  name: string | null;
}

/** Views made directly in the database, in this order. */
export async function seedViews(ctx: TestContext, user: FixtureUser, views: SeedView[]): Promise<void> {
  await ctx.db
    .insertInto('navigation_views')
    .values(views.map((view) => ({ realm_id: user === 'X' ? ids.R2 : ids.R, user_id: ids[user], ...view })))
    .execute();
}

/** Every navigation view row of every user, in id order. */
export function allViewRows(ctx: TestContext) {
  return ctx.db
    .selectFrom('navigation_views')
    .select(['id', 'realm_id', 'user_id', 'fragment', 'is_pinned', 'name'])
    .orderBy('id')
    .execute();
}

/** The user's views as stored, in creation order, in the API shape. */
export async function storedViews(ctx: TestContext, user: FixtureUser): Promise<SeedView[]> {
  return ctx.db
    .selectFrom('navigation_views')
    .select(['fragment', 'is_pinned', 'name'])
    .where('user_id', '=', ids[user])
    .orderBy('id')
    .execute();
}

/** Every stored event of every queue, plus the queues' counters. */
async function eventState(ctx: TestContext) {
  const events = await ctx.db.selectFrom('events').select(['queue_id', 'id', 'payload']).orderBy('queue_id').orderBy('id').execute();
  const queues = await ctx.db.selectFrom('event_queues').select(['id', 'next_event_id']).orderBy('id').execute();
  return { events, queues };
}

export const eventsOf = (ctx: TestContext, queueId: string) => queueEvents(ctx.db, queueId);

export function post(ctx: TestContext, form: Record<string, string>, as: FixtureUser = 'U') {
  return api(ctx.app, { method: 'POST', url: '/api/v1/navigation_views', as, form });
}

/** PATCH with `path` appended to /api/v1/navigation_views/ as given (already encoded). */
export function patch(ctx: TestContext, path: string, form: Record<string, string> = {}, as: FixtureUser = 'U') {
  return api(ctx.app, { method: 'PATCH', url: `/api/v1/navigation_views/${path}`, as, form });
}

export function remove(ctx: TestContext, path: string, as: FixtureUser = 'U') {
  return api(ctx.app, { method: 'DELETE', url: `/api/v1/navigation_views/${path}`, as });
}

export function list(ctx: TestContext, as: FixtureUser = 'U', query = '') {
  return api(ctx.app, { url: `/api/v1/navigation_views${query}`, as });
}

/**
 * Sends a request that must be refused: asserts the exact status and body, and that no view row
 * and no event (in any queue) changed.
 */
export async function expectRefused(
  ctx: TestContext,
  send: () => Promise<LightMyRequestResponse>,
  status: number,
  body: string,
): Promise<void> {
  const rowsBefore = await allViewRows(ctx);
  const eventsBefore = await eventState(ctx);
  const res = await send();
  expect(res.statusCode).toBe(status);
  expect(res.body).toBe(body);
  expect(await allViewRows(ctx)).toEqual(rowsBefore);
  expect(await eventState(ctx)).toEqual(eventsBefore);
}

export const EXISTS = errorBody('Navigation view already exists.');
export const BUILT_IN_NAMED = errorBody('Built-in views cannot have a custom name');
export const UPDATE_MISSING = errorBody('Navigation view does not exist.', 'NOT_FOUND');
export const REMOVE_MISSING = errorBody('Navigation view does not exist.');
export const BUILT_INS = [
  'inbox',
  'recent',
  'feed',
  'drafts',
  'narrow/has/reaction/sender/me',
  'narrow/is/mentioned',
  'narrow/is/starred',
  'scheduled',
  'reminders',
];
