import type { Config } from '../config.js';
import type { Database, DatabaseHandle } from '../db/database.js';
import { realmUrl } from '../lib/hosts.js';
import * as ops from './operations.js';

export interface DemoAccount {
  role: string;
  user_id: number;
  email: string;
  api_key: string;
}

/**
 * On the embedded default's first start: a root organization with an owner, a member, a guest,
 * a bot, three channels with subscriptions and a custom profile field. Returns the accounts (their
 * keys can be shown only now), or undefined when an organization already exists.
 */
export async function createDemoOrganization(
  handle: Pick<DatabaseHandle, 'db' | 'transactions'>,
  config: Config,
): Promise<DemoAccount[] | undefined> {
  const { db } = handle;
  const existing = await db.selectFrom('realms').select('id').limit(1).executeTakeFirst();
  if (existing) return undefined;
  // One transaction of the write API: a failed first start leaves no half-made organization.
  const accounts = await ops.inTransaction(handle, async (inside) => {
    const trx = inside.db;
    await ops.createRealm(trx, { subdomain: '', name: 'Demo organization', description: 'A **demo** organization.' });
    const owner = await ops.createUser(inside, { realm: '', email: 'owner@example.com', fullName: 'Olivia Owner', role: 'owner' }, config);
    const member = await ops.createUser(
      inside,
      { realm: '', email: 'member@example.com', fullName: 'Max Member', timezone: 'Europe/Berlin' },
      config,
    );
    const guest = await ops.createUser(inside, { realm: '', email: 'guest@example.com', fullName: 'Greta Guest', role: 'guest' }, config);
    const bot = await ops.createBot(trx, config, { realm: '', ownerEmail: owner.email, fullName: 'Demo Bot', shortName: 'demo' });
    await ops.createStream(trx, { realm: '', name: 'general', description: 'Everything else' });
    await ops.createStream(trx, { realm: '', name: 'random', description: 'Off topic' });
    await ops.createStream(trx, { realm: '', name: 'staff', private: true, description: 'Private to staff' });
    const field = await ops.createProfileField(trx, { realm: '', name: 'Role', type: 'short_text' });
    await ops.setProfileFieldValue(trx, { realm: '', email: member.email, fieldId: field.field_id, value: '**Demo** engineer' });
    return [
      { role: 'owner', ...owner },
      { role: 'member', ...member },
      { role: 'guest', ...guest },
      { role: 'bot', ...bot },
    ];
  });
  // Through the subscription service, after the organization is committed (its own transactions).
  const writes = { db, config, transactions: handle.transactions, maxPendingEvents: config.queueMaxPendingEvents };
  const [owner, member, guest, bot] = accounts;
  for (const [email, streams] of [
    [owner!.email, ['general', 'random', 'staff']],
    [member!.email, ['general', 'random']],
    [guest!.email, ['general']],
    [bot!.email, ['general']],
  ] as const) {
    for (const stream of streams) await ops.subscribe(writes, { realm: '', email, stream });
  }
  return accounts;
}

/** How to get a demo account's new API key (they are kept only as hashes). */
const ROTATE_HINT = 'npm run --silent admin -- api-key rotate --realm "" --email <email>';

/** The first start's text: the URL to give a client, each account's key (shown only now), a request to try. */
export function describeDemo(accounts: DemoAccount[], config: Config): string {
  const url = realmUrl('', config);
  const member = accounts.find((account) => account.role === 'member')!;
  const owner = accounts.find((account) => account.role === 'owner')!;
  return [
    `Demo organization created. Give a client the server URL ${url} and an account's email and API key.`,
    `API keys are shown only this once (a new one: ${ROTATE_HINT}):`,
    ...accounts.map((a) => `  ${a.role.padEnd(6)} user_id=${a.user_id}  email=${a.email}  api_key=${a.api_key}`),
    'Try:',
    `  curl -sS -u ${member.email}:${member.api_key} ${url}/api/v1/users/${owner.user_id}`,
  ].join('\n');
}

/** The addresses of the demo's people, as createDemoOrganization makes them. */
const DEMO_EMAILS = ['owner@example.com', 'member@example.com', 'guest@example.com'];

/** Later starts' one line: the URL and the demo accounts still active, or undefined when none is. */
export async function demoReminder(db: Database, config: Config): Promise<string | undefined> {
  const rows = await db
    .selectFrom('users')
    .innerJoin('realms', 'realms.id', 'users.realm_id')
    .select('users.delivery_email')
    .where('realms.subdomain', '=', '')
    .where('users.is_active', '=', true)
    .where('users.delivery_email', 'in', DEMO_EMAILS)
    .orderBy('users.id')
    .execute();
  if (rows.length === 0) return undefined;
  const emails = rows.map((row) => row.delivery_email).join(', ');
  return `Demo organization at ${realmUrl('', config)}: ${emails} (a new API key: ${ROTATE_HINT})`;
}
