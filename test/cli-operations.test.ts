import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { createDemoOrganization, demoReminder, describeDemo } from '../src/cli/demo.js';
import { connectForCli } from '../src/cli/connect.js';
import * as ops from '../src/cli/operations.js';
import { ConfigError, loadConfig } from '../src/config.js';
import { freePort } from '../src/lib/free-port.js';
import { createTestContext, useTestContext } from './helpers/app.js';
import { createTestDatabase } from './helpers/database.js';
import { pendingEvents, registerQueue } from './helpers/events.js';

// The admin command line's operations and the start's demo text, in-process against a real database.

const dataDir = mkdtempSync(join(tmpdir(), 'cli-operations-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));
/** `PORT=33001 npm start`'s configuration: the embedded default, no EXTERNAL_HOST. */
const config = loadConfig({ DATA_DIR: dataDir, PORT: '33001', AVATAR_SALT: 'salt' });

const empty = useTestContext(async () => {
  const database = await createTestDatabase();
  return { ...database, close: () => database.drop() };
}, 'each');

describe('the demo organization of the first start', () => {
  it('is described with the URL to give a client, the complete rotate command and a request to try; later starts get one line', async () => {
    const accounts = (await createDemoOrganization(empty, config))!;
    const [owner, member, guest, bot] = accounts;
    expect(accounts.map((account) => [account.role, account.email])).toEqual([
      ['owner', 'owner@example.com'],
      ['member', 'member@example.com'],
      ['guest', 'guest@example.com'],
      ['bot', 'demo-bot@localhost'],
    ]);
    expect(describeDemo(accounts, config).split('\n')).toEqual([
      "Demo organization created. Give a client the server URL http://localhost:33001 and an account's email and API key.",
      'API keys are shown only this once (a new one: npm run --silent admin -- api-key rotate --realm "" --email <email>):',
      `  owner  user_id=${owner!.user_id}  email=owner@example.com  api_key=${owner!.api_key}`,
      `  member user_id=${member!.user_id}  email=member@example.com  api_key=${member!.api_key}`,
      `  guest  user_id=${guest!.user_id}  email=guest@example.com  api_key=${guest!.api_key}`,
      `  bot    user_id=${bot!.user_id}  email=demo-bot@localhost  api_key=${bot!.api_key}`,
      'Try:',
      `  curl -sS -u member@example.com:${member!.api_key} http://localhost:33001/api/v1/users/${owner!.user_id}`,
    ]);

    // A later start: no new organization, one line.
    expect(await createDemoOrganization(empty, config)).toBeUndefined();
    expect(await demoReminder(empty.db, config)).toBe(
      'Demo organization at http://localhost:33001: owner@example.com, member@example.com, guest@example.com ' +
        '(a new API key: npm run --silent admin -- api-key rotate --realm "" --email <email>)',
    );
    await empty.db.updateTable('users').set({ is_active: false }).where('delivery_email', '=', 'member@example.com').execute();
    expect(await demoReminder(empty.db, config)).toMatch(
      /^Demo organization at http:\/\/localhost:33001: owner@example.com, guest@example.com \(/,
    );
  });

  it('without the demo accounts, later starts print nothing', async () => {
    expect(await demoReminder(empty.db, config)).toBeUndefined();
  });
});

const ctx = useTestContext(createTestContext, 'each');
const writes = () => ({
  db: ctx.db,
  config: ctx.config,
  transactions: ctx.database.transactions,
  maxPendingEvents: ctx.config.queueMaxPendingEvents,
});
const userRow = (id: number) =>
  ctx.db.selectFrom('users').select(['role', 'is_active', 'full_name']).where('id', '=', id).executeTakeFirstOrThrow();
const subscriptionRow = (userId: number, streamId: number) =>
  ctx.db
    .selectFrom('subscriptions')
    .select(['active'])
    .where('user_id', '=', userId)
    .where('stream_id', '=', streamId)
    .executeTakeFirstOrThrow();

describe("realm list, user list (Zulip's list_realms, list_users)", () => {
  it("list the organizations, and an organization's users and bots, in id order", async () => {
    expect(await ops.listRealms(ctx.db)).toEqual({
      realms: [
        { realm_id: 1, subdomain: '', name: 'Example', deactivated: false },
        { realm_id: 2, subdomain: 'other', name: 'Other', deactivated: false },
      ],
    });
    expect(await ops.listUsers(ctx.db, 'other')).toEqual({
      users: [{ user_id: 30, email: 'x@example.com', full_name: 'X Other', role: 'member', is_bot: false, is_active: true }],
    });
    const root = (await ops.listUsers(ctx.db, '')).users;
    expect(root.slice(0, 9)).toEqual([
      { user_id: 10, email: 'owner@example.com', full_name: 'O Owner', role: 'owner', is_bot: false, is_active: true },
      { user_id: 11, email: 'admin@example.com', full_name: 'A Admin', role: 'admin', is_bot: false, is_active: true },
      { user_id: 12, email: 'mod@example.com', full_name: 'M Mod', role: 'moderator', is_bot: false, is_active: true },
      { user_id: 13, email: 'u@example.com', full_name: 'U Member', role: 'member', is_bot: false, is_active: true },
      { user_id: 14, email: 'v@example.com', full_name: 'V Member', role: 'member', is_bot: false, is_active: true },
      { user_id: 15, email: 'guest@example.com', full_name: 'G Guest', role: 'guest', is_bot: false, is_active: true },
      { user_id: 16, email: 'b-bot@chat.example.com', full_name: 'B Bot', role: 'member', is_bot: true, is_active: true },
      { user_id: 17, email: 'h-bot@chat.example.com', full_name: 'H Hook', role: 'member', is_bot: true, is_active: true },
      { user_id: 18, email: 'd@example.com', full_name: 'D Gone', role: 'member', is_bot: false, is_active: false },
    ]);
    expect(root.every((user) => user.email !== 'x@example.com')).toBe(true);
    await expect(ops.listUsers(ctx.db, 'nosuch')).rejects.toThrow(new ops.AdminError('No organization with subdomain "nosuch"'));
  });
});

describe("user set-role (Zulip's change_user_role)", () => {
  it("changes the role with the API's events", async () => {
    const queue = await registerQueue(ctx.app, { event_types: '["realm_user"]' }, 'V');
    expect(await ops.setUserRole(ctx.database, ctx.config, { realm: '', email: 'U@example.com', role: 'admin' })).toEqual({
      user_id: 13,
      role: 'admin',
    });
    expect((await userRow(13)).role).toBe(200);
    expect(await pendingEvents(ctx.app, queue, 'V')).toEqual([
      { type: 'realm_user', op: 'update', person: { user_id: 13, role: 200 }, id: 0 },
    ]);
    // The same role again: nothing to do, nothing sent.
    await ops.setUserRole(ctx.database, ctx.config, { realm: '', email: 'u@example.com', role: 'admin' });
    expect(await pendingEvents(ctx.app, queue, 'V', 0)).toEqual([]);
  });

  it("refuses an unknown role and the only owner's demotion, changing nothing", async () => {
    await expect(ops.setUserRole(ctx.database, ctx.config, { realm: '', email: 'u@example.com', role: 'boss' })).rejects.toThrow(
      new ops.AdminError('Unknown role "boss": use owner, admin, moderator, member, guest'),
    );
    await expect(ops.setUserRole(ctx.database, ctx.config, { realm: '', email: 'owner@example.com', role: 'member' })).rejects.toThrow(
      new ops.AdminError('The owner permission cannot be removed from the only organization owner.'),
    );
    expect((await userRow(10)).role).toBe(100);
    expect((await userRow(13)).role).toBe(400);
  });
});

describe("user reactivate (Zulip's reactivate_user)", () => {
  it('reactivates a deactivated user; an active one stays as it is', async () => {
    expect((await userRow(18)).is_active).toBe(false);
    expect(await ops.reactivateUser(ctx.database, ctx.config, '', 'd@example.com')).toEqual({ user_id: 18, is_active: true });
    expect((await userRow(18)).is_active).toBe(true);
    expect(await ops.reactivateUser(ctx.database, ctx.config, '', 'u@example.com')).toEqual({ user_id: 13, is_active: true });
    await expect(ops.reactivateUser(ctx.database, ctx.config, '', 'nobody@example.com')).rejects.toThrow(
      new ops.AdminError('No user with email "nobody@example.com" in this organization'),
    );
  });
});

describe('unsubscribe', () => {
  it("unsubscribes through the API's service: the row, the user's event; again, nothing to remove", async () => {
    const queue = await registerQueue(ctx.app, { event_types: '["subscription"]' }, 'U');
    expect(await ops.unsubscribe(writes(), { realm: '', email: 'u@example.com', stream: 'p' })).toEqual({
      user_id: 13,
      removed: ['P'],
      not_removed: [],
    });
    expect(await subscriptionRow(13, 100)).toEqual({ active: false });
    expect(await pendingEvents(ctx.app, queue, 'U')).toEqual([
      { type: 'subscription', op: 'remove', subscriptions: [{ name: 'P', stream_id: 100 }], id: 0 },
    ]);
    expect(await ops.unsubscribe(writes(), { realm: '', email: 'u@example.com', stream: 'P' })).toEqual({
      user_id: 13,
      removed: [],
      not_removed: ['P'],
    });
  });

  it('refuses a channel that does not exist, changing nothing', async () => {
    await expect(ops.unsubscribe(writes(), { realm: '', email: 'u@example.com', stream: 'nope' })).rejects.toThrow(
      new ops.AdminError('No channel named "nope" in this organization'),
    );
    expect(await subscriptionRow(13, 100)).toEqual({ active: true });
  });
});

describe("the command line's words", () => {
  const USAGE =
    'usage: admin <command> [options]\n  user create --realm S\n              [--role R]\n  user list --realm S\n  users x\n  subscribe --realm S';

  it("lists a group's commands (`admin user`), or one command's usage", () => {
    expect(ops.usageOf(USAGE, 'user')).toBe(
      'usage: admin user …\n  user create --realm S\n              [--role R]\n  user list --realm S',
    );
    expect(ops.usageOf(USAGE, 'user list')).toBe('usage: admin user list …\n  user list --realm S');
    expect(ops.usageOf(USAGE, 'nope')).toBeUndefined();
  });

  it('says what is wrong with an option in one line', () => {
    const refusal = (args: string[]) => {
      try {
        parseArgs({ args, options: { realm: { type: 'string' }, private: { type: 'boolean' } }, strict: true, allowPositionals: true });
      } catch (error) {
        return ops.optionError(error).message;
      }
      return 'accepted';
    };
    expect(refusal(['user', 'list', '--nope'])).toBe('Unknown option --nope (see --help)');
    expect(refusal(['user', 'list', '--realm'])).toBe('--realm needs a value');
    expect(refusal(['--private=yes'])).toBe('--private takes no value');
  });
});

describe('a command whose DATABASE_URL cannot be reached', () => {
  it('fails at once with the start-up line: DATABASE_URL, password hidden, and the cause', async () => {
    const port = await freePort(); // closed again: nothing listens there
    const unreachable = loadConfig({ DATABASE_URL: `postgres://admin:secret@127.0.0.1:${port}/zulip`, AVATAR_SALT: 's' });
    await expect(connectForCli(unreachable)).rejects.toThrow(
      new ConfigError(`DATABASE_URL (postgres://admin:***@127.0.0.1:${port}/zulip): connection refused`),
    );
  });
});
