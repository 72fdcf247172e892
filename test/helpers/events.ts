import type { FastifyInstance } from 'fastify';
import { expect } from 'vitest';
import type { Database } from '../../src/db/database.js';
import { api } from './app.js';
import { success } from './envelope.js';
import type { FixtureUser } from './fixture.js';

/** Shared by the register and events test files. */

export function register(app: FastifyInstance, form: Record<string, string> = {}, as: FixtureUser = 'U') {
  return api(app, { method: 'POST', url: '/api/v1/register', as, form });
}

/** Registers and returns the queue id. */
export async function registerQueue(app: FastifyInstance, form: Record<string, string> = {}, as: FixtureUser = 'U'): Promise<string> {
  const res = await register(app, form, as);
  expect(res.statusCode, res.body).toBe(200);
  return res.json().queue_id as string;
}

export function getEvents(app: FastifyInstance, query: Record<string, string>, as: FixtureUser = 'U') {
  return api(app, { url: `/api/v1/events?${new URLSearchParams(query).toString()}`, as });
}

/** "events for U" of docs/api.md §5.0: everything pending, at once. */
export async function pendingEvents(app: FastifyInstance, queueId: string, as: FixtureUser = 'U', lastEventId = -1) {
  const res = await getEvents(app, { queue_id: queueId, last_event_id: String(lastEventId), dont_block: 'true' }, as);
  expect(res.statusCode, res.body).toBe(200);
  return res.json().events as Record<string, unknown>[];
}

export function deleteQueue(app: FastifyInstance, form: Record<string, string>, as: FixtureUser = 'U') {
  return api(app, { method: 'DELETE', url: '/api/v1/events', as, form });
}

export function setPinToTop(app: FastifyInstance, value: boolean, as: FixtureUser = 'U') {
  return api(app, {
    method: 'PATCH',
    url: '/api/v1/users/me/subscriptions/100',
    as,
    form: { property: 'pin_to_top', value: String(value) },
  });
}

export function setColor(app: FastifyInstance, color: string, as: FixtureUser = 'U') {
  return api(app, { method: 'PATCH', url: '/api/v1/users/me/subscriptions/100', as, form: { property: 'color', value: color } });
}

/** The queue row, or undefined once deleted. */
export function queueRow(db: Database, queueId: string) {
  return db.selectFrom('event_queues').selectAll().where('id', '=', queueId).executeTakeFirst();
}

export async function storedEventIds(db: Database, queueId: string): Promise<number[]> {
  const rows = await db.selectFrom('events').select('id').where('queue_id', '=', queueId).orderBy('id').execute();
  return rows.map((row) => row.id);
}

/** A delivered pin_to_top change of channel P, as the queue numbers it. */
export const pinEvent = (value: boolean, id: number) => ({
  type: 'subscription',
  op: 'update',
  property: 'pin_to_top',
  value,
  stream_id: 100,
  id,
});

/** The exact body of a long poll that waited (queue_id present, last). */
export const waited = (queueId: string, events: object[]) => success({ events, queue_id: queueId });

/** A class's method as its prototype has it, for a spy that wraps it (`original.call(this, …)`). */
export function originalMethod<T extends object, K extends keyof T>(prototype: T, name: K): T[K] {
  return Object.getOwnPropertyDescriptor(prototype, name)!.value as T[K];
}
