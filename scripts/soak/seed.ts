import * as ops from '../../src/cli/operations.js';
import type { DatabaseHandle } from '../../src/db/database.js';
import { type SettingColumn, SETTING_COLUMNS } from '../../src/modules/subscriptions/settings.js';
import { EXTERNAL_HOST, USER_COUNT } from './config.js';

// --- The seed: two organizations, channels of every kind, users subscribed to some of them. ---

export type Settings = Record<SettingColumn, string | boolean | null>;
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

export interface View {
  fragment: string;
  is_pinned: boolean;
  name: string | null;
}

export interface ApiEvent {
  type: string;
  [key: string]: unknown;
}

export interface AuditRow {
  stream_id: number;
  property: SettingColumn;
  old_value: string | boolean | null;
  new_value: string | boolean;
}

/** One simulated user: credentials, and the model of everything only this user changes. */
export interface SimUser {
  label: string;
  id: number;
  email: string;
  authorization: string;
  host: string;
  /** Channels with an active subscription, by id, and their names (for list order). */
  streams: Map<number, string>;
  /** Channel ids this user may not change: unsubscribed, private, archived, unknown, foreign. */
  refusedStreams: number[];
  settings: Map<number, Settings>;
  /** The user's views in creation order. */
  views: View[];
  events: ApiEvent[];
  audit: AuditRow[];
  queues: { untouched: string; polled: string; viewsOnly: string };
  /** Events the long-poller received, in order. */
  polled: ApiEvent[];
  nextViewNumber: number;
}

export async function seed(handle: DatabaseHandle): Promise<{ users: SimUser[]; realmUserIds: number[] }> {
  const { db } = handle;
  const writes = { db, transactions: handle.transactions, maxPendingEvents: 10_000 };
  await ops.createRealm(db, { subdomain: '', name: 'Soak', description: 'Soak **test**' });
  await ops.createRealm(db, { subdomain: 'other', name: 'Other' });
  const channels: Record<string, number> = {};
  for (const [name, options] of [
    ['general', {}],
    ['random', {}],
    ['design', {}],
    ['ops', {}],
    ['unjoined', {}],
    ['secret', { private: true }],
    ['old', {}],
    ['web', { webPublic: true }],
  ] as const) {
    channels[name] = (await ops.createStream(db, { realm: '', name, ...options })).stream_id;
  }
  const foreignChannel = (await ops.createStream(db, { realm: 'other', name: 'elsewhere' })).stream_id;
  const accounts: { realm: string; label: string; account: { user_id: number; email: string; api_key: string }; streams: string[] }[] = [];
  for (let i = 0; i < USER_COUNT; i++) {
    const account = await ops.createUser(handle, {
      realm: '',
      email: `user${i}@soak.example`,
      fullName: `Soak User ${i}`,
      role: i === 0 ? 'owner' : 'member',
    });
    const streams = ['general', 'random', 'design', 'ops', 'old', ...(i % 2 === 0 ? ['secret'] : []), ...(i % 3 === 0 ? ['web'] : [])];
    accounts.push({ realm: '', label: `user${i}`, account, streams });
  }
  const outsider = await ops.createUser(handle, { realm: 'other', email: 'outsider@soak.example', fullName: 'Other Org User' });
  accounts.push({ realm: 'other', label: 'outsider', account: outsider, streams: ['elsewhere'] });
  for (const { realm, account, streams } of accounts) {
    for (const stream of streams) await ops.subscribe(writes, { realm, email: account.email, stream });
  }
  await ops.archiveStream(db, '', 'old');
  const users: SimUser[] = [];
  for (const { realm, label, account, streams } of accounts) {
    const rows = await db.selectFrom('subscriptions').selectAll().where('user_id', '=', account.user_id).execute();
    const active = streams.filter((stream) => stream !== 'old');
    const ids = (names: string[]) => names.map((name) => (name === 'elsewhere' ? foreignChannel : channels[name]!));
    users.push({
      label,
      id: account.user_id,
      email: account.email,
      authorization: `Basic ${Buffer.from(`${account.email}:${account.api_key}`).toString('base64')}`,
      host: realm === '' ? EXTERNAL_HOST : `${realm}.${EXTERNAL_HOST}`,
      streams: new Map(active.map((name) => [name === 'elsewhere' ? foreignChannel : channels[name]!, name])),
      refusedStreams: [
        ...ids(['unjoined', 'secret', 'old', 'web', 'general', 'elsewhere'].filter((name) => !active.includes(name))),
        999_999,
        0,
      ],
      settings: new Map(
        rows.map((row) => [row.stream_id, Object.fromEntries(SETTING_COLUMNS.map((column) => [column, row[column]])) as Settings]),
      ),
      views: [],
      events: [],
      audit: [],
      queues: { untouched: '', polled: '', viewsOnly: '' },
      polled: [],
      nextViewNumber: 0,
    });
  }
  const realmUserIds = accounts.filter((entry) => entry.realm === '').map((entry) => entry.account.user_id);
  return { users, realmUserIds };
}
