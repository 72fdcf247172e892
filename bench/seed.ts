import { sql } from 'kysely';
import * as ops from '../src/cli/operations.js';
import type { Database } from '../src/db/database.js';
import type { Operator } from '../src/cli/operations.js';
import { renderMarkdown } from '../src/lib/markdown.js';

/**
 * A realistic organization for the benchmark, inserted with a handful of set-based statements:
 * users of every role (some bots, mixed address visibility, time zones, uploaded avatars), custom
 * profile fields with values, channels (some private, some archived) with subscriptions for
 * everyone, and a few navigation views. The accounts whose keys the benchmark needs are created
 * through the admin operations, as an operator would.
 */

export interface SeedSizes {
  users: number;
  /** More members, each with a known key: the callers the production scenarios rotate over. */
  rotatingCallers: number;
  /** The first ones of those also write: a subscription, a custom view and a connected queue each. */
  writers: number;
  channels: number;
  /** Channels the benchmark caller is subscribed to (bulk updates use the first ones). */
  callerSubscriptions: number;
  subscriptionsPerUser: number;
}

export interface Account {
  id: number;
  email: string;
  apiKey: string;
}

/** One of the production scenarios' callers; writers also have these. */
export interface RotatingCaller extends Account {
  /** The channel of its one subscription (writers only). */
  streamId: number;
}

/** The custom view every writer has (its PATCH target). */
export const WRITER_VIEW_FRAGMENT = 'narrow/channel/7-writers/topic/plans';

export interface Seeded {
  /** Makes every request of the write scenarios. */
  caller: Account;
  /** Polls events (its queue receives nothing, as a quiet client's would). */
  poller: Account;
  /** The user GET /users/{id} fetches: a member with a public address and a Gravatar avatar. */
  targetUserId: number;
  /** The caller's channels, in id order; bulk updates of n entries use the first n. */
  callerStreamIds: number[];
  /** A custom view of the caller that PATCH keeps changing. */
  patchFragment: string;
  /** Distinct members with known keys; the first `writers` of them are writers. */
  rotating: RotatingCaller[];
  counts: Record<string, number>;
}

const REALM = '';
const PROFILE_FIELDS = [
  { name: 'Role', type: 'short_text' },
  { name: 'Biography', type: 'long_text' },
  { name: 'Birthday', type: 'date' },
  { name: 'Website', type: 'url' },
  { name: 'Pronouns', type: 'pronouns' },
] as const;
const TIMEZONES = ['', 'Europe/Berlin', 'America/New_York', 'Asia/Kolkata', 'America/Sao_Paulo', 'Australia/Sydney'];

export async function seedOrganization(operator: Operator, sizes: SeedSizes): Promise<Seeded> {
  const { db } = operator;
  await ops.createRealm(db, { subdomain: REALM, name: 'Benchmark organization', description: 'Load test **data**.' });
  const owner = await ops.createUser(operator, { realm: REALM, email: 'owner@bench.example', fullName: 'Olga Owner', role: 'owner' });
  const caller = await ops.createUser(operator, {
    realm: REALM,
    email: 'caller@bench.example',
    fullName: 'Carla Caller',
    timezone: 'Europe/Berlin',
  });
  const poller = await ops.createUser(operator, { realm: REALM, email: 'poller@bench.example', fullName: 'Paul Poller' });
  const target = await ops.createUser(operator, {
    realm: REALM,
    email: 'target@bench.example',
    fullName: 'Tara Target',
    timezone: 'America/New_York',
  });
  const realm = await db.selectFrom('realms').select('id').where('subdomain', '=', REALM).executeTakeFirstOrThrow();
  const realmId = realm.id;

  // The rest of the people: roles, visibilities, time zones and avatars spread by id.
  await sql`
    INSERT INTO users (realm_id, delivery_email, full_name, date_joined, role, timezone, avatar_source,
                       avatar_version, email_address_visibility, api_key_hash)
    SELECT ${realmId}, 'person' || g || '@bench.example', 'Person ' || g,
           timestamptz '2023-01-01' + g * interval '7 hours',
           CASE WHEN g % 200 = 0 THEN 200 WHEN g % 100 = 0 THEN 300 WHEN g % 16 = 0 THEN 600 ELSE 400 END,
           (${TIMEZONES}::text[])[1 + g % ${TIMEZONES.length}],
           CASE WHEN g % 5 = 0 THEN 'U' ELSE 'G' END, 1 + g % 3, 1 + g % 5,
           encode(sha256(convert_to('bench-person-' || g, 'UTF8')), 'hex')
    FROM generate_series(1, ${sizes.users - 4 - 20}) AS g
  `.execute(db);
  await sql`
    INSERT INTO users (realm_id, delivery_email, full_name, bot_type, bot_owner_id, api_key_hash)
    SELECT ${realmId}, 'bot' || g || '-bot@bench.example', 'Bot ' || g, 1 + g % 4, ${owner.user_id},
           encode(sha256(convert_to('bench-bot-' || g, 'UTF8')), 'hex')
    FROM generate_series(1, 20) AS g
  `.execute(db);

  // Profile fields and values for most humans (the target included).
  const fieldIds: number[] = [];
  for (const field of PROFILE_FIELDS) {
    fieldIds.push((await ops.createProfileField(db, { realm: REALM, name: field.name, type: field.type })).field_id);
  }
  const roles = ['Engineer at **Bench**', 'Support lead', 'Works on _the API_'];
  const bios = ['Likes *load tests*.\n\nAnd [links](https://example.com).', 'Writes `code`.', 'Plain biography.'];
  await sql`
    INSERT INTO custom_profile_field_values (realm_id, user_id, field_id, value, rendered_value)
    SELECT ${realmId}, u.id, f.id,
           CASE f.id
             WHEN ${fieldIds[0]!} THEN (${roles}::text[])[1 + u.id % 3]
             WHEN ${fieldIds[1]!} THEN (${bios}::text[])[1 + u.id % 3]
             WHEN ${fieldIds[2]!} THEN to_char(date '1970-01-01' + u.id * 11, 'YYYY-MM-DD')
             WHEN ${fieldIds[3]!} THEN 'https://example.com/~' || u.id
             ELSE 'they/them' END,
           CASE f.id
             WHEN ${fieldIds[0]!} THEN (${roles.map((text) => renderMarkdown(text))}::text[])[1 + u.id % 3]
             WHEN ${fieldIds[1]!} THEN (${bios.map((text) => renderMarkdown(text))}::text[])[1 + u.id % 3]
           END
    FROM users u CROSS JOIN custom_profile_fields f
    WHERE u.realm_id = ${realmId} AND u.bot_type IS NULL AND (u.id % 5 <> 1 OR u.id = ${target.user_id})
  `.execute(db);

  // Channels: every 10th private, the last 5% archived.
  const archivedFrom = Math.floor(sizes.channels * 0.95);
  await sql`
    INSERT INTO streams (realm_id, name, description, rendered_description, invite_only, creator_id, deactivated)
    SELECT ${realmId}, 'channel-' || lpad(g::text, 5, '0'), 'About channel ' || g, '<p>About channel ' || g || '</p>',
           g % 10 = 0, ${owner.user_id}, g > ${archivedFrom}
    FROM generate_series(1, ${sizes.channels}) AS g
  `.execute(db);
  const streams = await db.selectFrom('streams').select('id').where('realm_id', '=', realmId).orderBy('id').execute();
  const callerStreamIds = streams.slice(0, sizes.callerSubscriptions).map((stream) => stream.id);
  if (callerStreamIds.length < sizes.callerSubscriptions || sizes.callerSubscriptions > archivedFrom) {
    throw new Error('not enough live channels for the caller');
  }
  const colors = ['#76ce90', '#fae589', '#a6c7e5', '#e79ab5', '#bfd56f', '#f4ae55', '#b0a5fd', '#addfe5'];
  // Everyone else: subscriptionsPerUser distinct channels each, spread over the organization.
  await sql`
    INSERT INTO subscriptions (realm_id, user_id, stream_id, color, is_muted, pin_to_top)
    SELECT DISTINCT ON (u.id, s.id) ${realmId}, u.id, s.id, (${colors}::text[])[1 + (u.id + k) % 8], k % 9 = 0, k = 0
    FROM users u
    CROSS JOIN generate_series(0, ${sizes.subscriptionsPerUser - 1}) AS k
    JOIN streams s ON s.realm_id = ${realmId}
      AND s.id = ${streams[0]!.id} + (u.id * 7 + k * 37) % ${sizes.channels}
    WHERE u.realm_id = ${realmId} AND u.id <> ${caller.user_id}
  `.execute(db);
  await sql`
    INSERT INTO subscriptions (realm_id, user_id, stream_id, color, is_muted, desktop_notifications)
    SELECT ${realmId}, ${caller.user_id}, id, (${colors}::text[])[1 + id % 8], id % 7 = 0,
           CASE WHEN id % 3 = 0 THEN true END
    FROM unnest(${callerStreamIds}::int[]) AS id
  `.execute(db);

  // Navigation views: a few for the caller, and some for a hundred other users.
  const patchFragment = 'narrow/channel/1-general/topic/standup';
  await sql`
    INSERT INTO navigation_views (realm_id, user_id, fragment, is_pinned, name)
    VALUES (${realmId}, ${caller.user_id}, 'inbox', true, NULL),
           (${realmId}, ${caller.user_id}, 'recent', false, NULL),
           (${realmId}, ${caller.user_id}, ${patchFragment}, true, 'Standup'),
           (${realmId}, ${caller.user_id}, 'narrow/is/starred/near/5', false, 'Starred'),
           (${realmId}, ${caller.user_id}, 'narrow/channel/2-design', true, 'Design')
  `.execute(db);
  await sql`
    INSERT INTO navigation_views (realm_id, user_id, fragment, is_pinned, name)
    SELECT ${realmId}, u.id, 'narrow/channel/' || k || '-team', k % 2 = 0, 'Team ' || k
    FROM (SELECT id FROM users WHERE realm_id = ${realmId} AND bot_type IS NULL ORDER BY id LIMIT 100 OFFSET 10) u
    CROSS JOIN generate_series(1, 5) AS k
  `.execute(db);

  // The production scenarios' callers: members with deterministic keys (32 alphanumerics). The
  // writers each get one subscription (channels in turn), one custom view and one event queue, as
  // a connected client has: every write then also stores one event.
  const rotatingKey = (g: number) => `r${String(g).padStart(31, '0')}`;
  await sql`
    INSERT INTO users (realm_id, delivery_email, full_name, date_joined, api_key_hash)
    SELECT ${realmId}, 'rotating' || g || '@bench.example', 'Rotating ' || g, timestamptz '2024-01-01' + g * interval '1 minute',
           encode(sha256(convert_to('r' || lpad(g::text, 31, '0'), 'UTF8')), 'hex')
    FROM generate_series(1, ${sizes.rotatingCallers}) AS g
  `.execute(db);
  const rotatingRows = await db
    .selectFrom('users')
    .select(['id', 'delivery_email'])
    .where('delivery_email', 'like', 'rotating%@bench.example')
    .orderBy('id')
    .execute();
  const liveStreamIds = streams.slice(0, archivedFrom).map((stream) => stream.id);
  const rotating = rotatingRows.map((row, i) => ({
    id: row.id,
    email: row.delivery_email,
    apiKey: rotatingKey(Number(/^rotating(\d+)@/.exec(row.delivery_email)![1])),
    streamId: liveStreamIds[i % liveStreamIds.length]!,
  }));
  const writers = rotating.slice(0, sizes.writers);
  await sql`
    INSERT INTO subscriptions (realm_id, user_id, stream_id, color)
    SELECT ${realmId}, w.user_id, w.stream_id, '#76ce90'
    FROM jsonb_to_recordset(${JSON.stringify(writers.map((w) => ({ user_id: w.id, stream_id: w.streamId })))}::jsonb)
      AS w(user_id int, stream_id int)
  `.execute(db);
  await sql`
    INSERT INTO navigation_views (realm_id, user_id, fragment, is_pinned, name)
    SELECT ${realmId}, id, ${WRITER_VIEW_FRAGMENT}, true, 'Plans' FROM unnest(${writers.map((w) => w.id)}::int[]) AS id
  `.execute(db);
  await sql`
    INSERT INTO event_queues (id, realm_id, user_id, lifespan_seconds)
    SELECT gen_random_uuid(), ${realmId}, id, 604800 FROM unnest(${writers.map((w) => w.id)}::int[]) AS id
  `.execute(db);

  const { rows } = await sql<Record<string, number>>`
    SELECT (SELECT count(*) FROM users)::int AS users,
           (SELECT count(*) FROM custom_profile_field_values)::int AS profile_values,
           (SELECT count(*) FROM streams)::int AS channels,
           (SELECT count(*) FROM subscriptions)::int AS subscriptions,
           (SELECT count(*) FROM navigation_views)::int AS navigation_views,
           (SELECT count(*) FROM event_queues)::int AS event_queues
  `.execute(db);
  // Fresh statistics and visibility maps, so autovacuum does not start in the middle of a run.
  await sql`VACUUM (ANALYZE)`.execute(db);
  return {
    caller: { id: caller.user_id, email: caller.email, apiKey: caller.api_key },
    poller: { id: poller.user_id, email: poller.email, apiKey: poller.api_key },
    targetUserId: target.user_id,
    callerStreamIds,
    patchFragment,
    rotating,
    counts: rows[0]!,
  };
}

/** Distinct custom views of the caller for the DELETE scenario, each deleted once. */
export async function createDisposableViews(db: Database, caller: Account, count: number, prefix: string): Promise<void> {
  await sql`
    INSERT INTO navigation_views (realm_id, user_id, fragment, is_pinned, name)
    SELECT u.realm_id, u.id, ${prefix} || g, false, 'Disposable ' || ${prefix} || g
    FROM users u CROSS JOIN generate_series(1, ${count}) AS g
    WHERE u.id = ${caller.id}
  `.execute(db);
  await sql`ANALYZE navigation_views`.execute(db);
}
