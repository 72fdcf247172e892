import * as ops from '../../src/cli/operations.js';
import type { DatabaseHandle } from '../../src/db/database.js';
import type { LoadUser } from './traffic.js';

/**
 * The organization of the balancer and failover tests, made with the admin command line's
 * operations: `users` members, each subscribed to four channels, with their Basic credentials.
 */
export async function seedLoadUsers(
  handle: DatabaseHandle,
  options: { users: number; organization: string; emailDomain: string; fullName: string; otherOrganization?: boolean },
): Promise<LoadUser[]> {
  const { db } = handle;
  const writes = { db, transactions: handle.transactions, maxPendingEvents: 10_000 };
  await ops.createRealm(db, { subdomain: '', name: options.organization });
  if (options.otherOrganization) await ops.createRealm(db, { subdomain: 'other', name: 'Other' });
  const channels = ['general', 'random', 'design', 'ops'];
  for (const name of channels) await ops.createStream(db, { realm: '', name });
  const users: LoadUser[] = [];
  for (let index = 0; index < options.users; index++) {
    const account = await ops.createUser(handle, {
      realm: '',
      email: `user${index}@${options.emailDomain}`,
      fullName: `${options.fullName} ${index}`,
    });
    const streamIds: number[] = [];
    for (const stream of channels) streamIds.push((await ops.subscribe(writes, { realm: '', email: account.email, stream })).stream_id);
    const authorization = `Basic ${Buffer.from(`${account.email}:${account.api_key}`).toString('base64')}`;
    users.push({ index, id: account.user_id, authorization, streamIds });
  }
  return users;
}
