import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Database } from '../../src/db/database.js';
import { hashApiKey } from '../../src/lib/api-keys.js';
import { renderMarkdown } from '../../src/lib/markdown.js';
import type { ApiEvent } from '../../src/modules/event-log/event-log.repository.js';
import { createEventQueue } from '../../src/modules/events/event-queues.repository.js';

/** The fixture of docs/api.md §5.0, with the same ids. */
export const ids = {
  R: 1,
  R2: 2,
  O: 10,
  A: 11,
  M: 12,
  U: 13,
  V: 14,
  G: 15,
  B: 16,
  H: 17,
  D: 18,
  X: 30,
  P: 100,
  Q: 101,
  S: 102,
  Z: 103,
  W: 104,
  C2: 200,
} as const;

export type FixtureUser = 'O' | 'A' | 'M' | 'U' | 'V' | 'G' | 'B' | 'H' | 'D' | 'X';

const users: Record<FixtureUser, { name: string; role: number; email: string; realm?: number; botType?: number; active?: boolean }> = {
  O: { name: 'O Owner', role: 100, email: 'owner@example.com' },
  A: { name: 'A Admin', role: 200, email: 'admin@example.com' },
  M: { name: 'M Mod', role: 300, email: 'mod@example.com' },
  U: { name: 'U Member', role: 400, email: 'u@example.com' },
  V: { name: 'V Member', role: 400, email: 'v@example.com' },
  G: { name: 'G Guest', role: 600, email: 'guest@example.com' },
  B: { name: 'B Bot', role: 400, email: 'b-bot@chat.example.com', botType: 1 },
  H: { name: 'H Hook', role: 400, email: 'h-bot@chat.example.com', botType: 2 },
  D: { name: 'D Gone', role: 400, email: 'd@example.com', active: false },
  X: { name: 'X Other', role: 400, email: 'x@example.com', realm: 2 },
};

/** Each fixture user's API key: 32 alphanumerics, distinct per user. */
export const apiKeys = Object.fromEntries(Object.keys(users).map((name) => [name, `key${name}`.padEnd(32, '0')])) as Record<
  FixtureUser,
  string
>;

export const emails = Object.fromEntries(Object.entries(users).map(([name, user]) => [name, user.email])) as Record<FixtureUser, string>;

export function basicAuth(email: string, key: string): string {
  return `Basic ${Buffer.from(`${email}:${key}`).toString('base64')}`;
}

/** Authorization header of a fixture user. */
export const auth = (name: FixtureUser): string => basicAuth(users[name].email, apiKeys[name]);

const JOINED = new Date('2024-01-02T03:04:05Z');

export async function seedFixture(db: Database): Promise<void> {
  await db
    .insertInto('realms')
    .values([
      { id: 1, subdomain: '', name: 'Example', description: 'Our team', rendered_description: renderMarkdown('Our team') },
      { id: 2, subdomain: 'other', name: 'Other' },
    ])
    .execute();
  await db
    .insertInto('users')
    .values(
      (Object.keys(users) as FixtureUser[]).map((name) => {
        const user = users[name];
        return {
          id: ids[name],
          realm_id: user.realm ?? 1,
          delivery_email: user.email,
          full_name: user.name,
          role: user.role,
          date_joined: JOINED,
          is_active: user.active ?? true,
          bot_type: user.botType ?? null,
          bot_owner_id: user.botType ? ids.U : null,
          api_key_hash: hashApiKey(apiKeys[name]),
        };
      }),
    )
    .execute();
  const stream = (id: number, name: string, extra: Record<string, unknown> = {}) => ({
    id,
    realm_id: 1,
    name,
    date_created: JOINED,
    ...extra,
  });
  await db
    .insertInto('streams')
    .values([
      stream(ids.P, 'P', { description: 'General chat', rendered_description: renderMarkdown('General chat') }),
      stream(ids.Q, 'Q'),
      stream(ids.S, 'S', { invite_only: true }),
      stream(ids.Z, 'Z', { deactivated: true }),
      stream(ids.W, 'W', { is_web_public: true }),
      stream(ids.C2, 'C2', { realm_id: 2 }),
    ])
    .execute();
  const subscription = (user: FixtureUser, streamId: number, color = '#c2c2c2') => ({
    realm_id: user === 'X' ? 2 : 1,
    user_id: ids[user],
    stream_id: streamId,
    color,
  });
  await db
    .insertInto('subscriptions')
    .values([
      subscription('U', ids.P, '#76ce90'),
      subscription('V', ids.P),
      subscription('G', ids.P),
      subscription('D', ids.P),
      subscription('V', ids.Q),
      subscription('V', ids.S),
      subscription('U', ids.Z),
      subscription('V', ids.W),
      subscription('X', ids.C2),
    ])
    .execute();
  await db
    .insertInto('custom_profile_fields')
    .values([
      { id: 1, realm_id: 1, name: 'Role', field_type: 1 },
      { id: 2, realm_id: 1, name: 'Biography', field_type: 2 },
      { id: 3, realm_id: 1, name: 'Team', field_type: 3, field_data: '{"opt1":{"text":"One","order":"1"}}' },
      { id: 4, realm_id: 1, name: 'Birthday', field_type: 4 },
    ])
    .execute();
  const value = (fieldId: number, text: string, markdown: boolean) => ({
    realm_id: 1,
    user_id: ids.V,
    field_id: fieldId,
    value: text,
    rendered_value: markdown ? renderMarkdown(text) : null,
  });
  await db
    .insertInto('custom_profile_field_values')
    .values([value(1, '**Lead**', true), value(2, 'line1\nline2 <b>x</b>', true), value(3, 'opt1', false), value(4, '2000-01-01', false)])
    .execute();
  // Identity columns were given explicit ids: move the sequences past them.
  for (const table of ['realms', 'users', 'streams', 'custom_profile_fields']) {
    await sql`SELECT setval(pg_get_serial_sequence(${table}, 'id'), 1000)`.execute(db);
  }
}

/** Makes R "restricted" (docs/api.md §5.0): guests see only the users they share a channel with. */
export const restrict = (db: Database) =>
  db.updateTable('realms').set({ can_access_all_users_group: 'members' }).where('id', '=', ids.R).execute();

/** A queue for a fixture user, made directly in the database (register is another endpoint). */
export async function createQueue(
  db: Database,
  user: FixtureUser,
  eventTypes: string[] | null = null,
  userListIncomplete = false,
): Promise<string> {
  const id = randomUUID();
  const queue = { id, realmId: users[user].realm ?? 1, userId: ids[user], eventTypes, lifespanSeconds: 600, userListIncomplete };
  await createEventQueue(db, queue, 20).execute();
  return id;
}

/** The queue's pending events in id order, each with its "id" appended last. */
export async function queueEvents(db: Database, queueId: string): Promise<ApiEvent[]> {
  const rows = await db.selectFrom('events').select(['id', 'payload']).where('queue_id', '=', queueId).orderBy('id').execute();
  return rows.map((row) => ({ ...(row.payload as ApiEvent), id: row.id }));
}
