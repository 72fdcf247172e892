import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { runAdmin } from '../src/cli/admin.js';
import { startEmbeddedPostgres } from '../src/db/embedded.js';
import { hashApiKey } from '../src/lib/api-keys.js';
import { createEventQueue } from '../src/modules/events/event-queues.repository.js';
import { api, createTestContext, useTestContext } from './helpers/app.js';
import { basicAuth, queueEvents } from './helpers/fixture.js';

const run = promisify(execFile);

// Each test writes: a database of its own.
const ctx = useTestContext(() => createTestContext({ fixture: false }));

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs an admin command in this process (runAdmin: the command line's parsing, configuration,
 * connection and output), against the test database unless env says otherwise.
 */
async function admin(args: string[], env: Record<string, string | undefined> = {}): Promise<Outcome> {
  const environment: Record<string, string | undefined> = {
    DATABASE_URL: ctx.database.url,
    EXTERNAL_HOST: 'chat.example.com',
    AVATAR_SALT: 'test-salt',
    ...env,
  };
  for (const [name, value] of Object.entries(environment)) if (value === undefined) delete environment[name];
  const outcome = { stdout: '', stderr: '' };
  const code = await runAdmin(args, environment, {
    stdout: { write: (text: string) => (outcome.stdout += text) },
    stderr: { write: (text: string) => (outcome.stderr += text) },
  });
  return { code, ...outcome };
}

async function ok(args: string[]): Promise<Record<string, unknown>> {
  const outcome = await admin(args);
  expect(outcome.stderr, outcome.stderr).toBe('');
  expect(outcome.code).toBe(0);
  expect(outcome.stdout.trim().split('\n')).toHaveLength(1);
  return JSON.parse(outcome.stdout);
}

async function fails(args: string[], message: string | RegExp): Promise<void> {
  const outcome = await admin(args);
  expect(outcome.code).not.toBe(0);
  expect(outcome.stdout).toBe('');
  expect(outcome.stderr.trim().split('\n')).toHaveLength(1);
  expect(outcome.stderr.trim()).toMatch(message);
}

describe('admin command line', () => {
  it('creates and manages an organization end to end', async () => {
    const realm = await ok(['realm', 'create', '--subdomain', '', '--name', 'Acme', '--restrict-guest-access']);
    expect(realm).toEqual({ realm_id: expect.any(Number) });
    const realmRow = await ctx.db
      .selectFrom('realms')
      .selectAll()
      .where('id', '=', realm.realm_id as number)
      .executeTakeFirstOrThrow();
    expect(realmRow).toMatchObject({ subdomain: '', name: 'Acme', can_access_all_users_group: 'members', deactivated: false });
    await fails(['realm', 'create', '--subdomain', '', '--name', 'Again'], 'An organization with subdomain "" already exists');

    const owner = await ok([
      'user',
      'create',
      '--realm',
      '',
      '--email',
      'boss@acme.test',
      '--full-name',
      'The Boss',
      '--role',
      'owner',
      '--timezone',
      'Europe/Paris',
      '--email-visibility',
      'admins',
    ]);
    expect(Object.keys(owner)).toEqual(['user_id', 'email', 'api_key']);
    expect(owner.email).toBe('boss@acme.test');
    expect(owner.api_key).toMatch(/^[A-Za-z0-9]{32}$/);
    const ownerRow = await ctx.db
      .selectFrom('users')
      .selectAll()
      .where('id', '=', owner.user_id as number)
      .executeTakeFirstOrThrow();
    expect(ownerRow).toMatchObject({
      role: 100,
      timezone: 'Europe/Paris',
      email_address_visibility: 3,
      is_imported_stub: false,
      bot_type: null,
      api_key_hash: hashApiKey(owner.api_key as string),
    });

    // The new account works against the HTTP API.
    const me = await api(ctx.app, {
      url: '/api/v1/users/me/subscriptions',
      headers: { authorization: basicAuth('boss@acme.test', owner.api_key as string) },
    });
    expect(me.statusCode).toBe(200);

    // The command line creates through the API's service: the owner's queue gets realm_user/add,
    // and --can-create-users grants POST /users.
    const ownerQueue = randomUUID();
    await createEventQueue(
      ctx.db,
      {
        id: ownerQueue,
        realmId: realm.realm_id as number,
        userId: owner.user_id as number,
        eventTypes: null,
        lifespanSeconds: 600,
        userListIncomplete: false,
      },
      20,
    ).execute();
    const stub = await ok([
      'user',
      'create',
      '--realm',
      '',
      '--email',
      'old@acme.test',
      '--full-name',
      'Imported',
      '--imported-stub',
      '--can-create-users',
    ]);
    expect(await queueEvents(ctx.db, ownerQueue)).toEqual([
      {
        type: 'realm_user',
        op: 'add',
        person: expect.objectContaining({ user_id: stub.user_id, full_name: 'Imported', is_imported_stub: true }),
        id: 0,
      },
    ]);
    expect(
      (
        await ctx.db
          .selectFrom('users')
          .select('can_create_users')
          .where('id', '=', stub.user_id as number)
          .executeTakeFirstOrThrow()
      ).can_create_users,
    ).toBe(true);
    const stubRow = await ctx.db
      .selectFrom('users')
      .select(['is_imported_stub', 'role'])
      .where('id', '=', stub.user_id as number)
      .executeTakeFirstOrThrow();
    expect(stubRow).toEqual({ is_imported_stub: true, role: 400 });

    const bot = await ok([
      'bot',
      'create',
      '--realm',
      '',
      '--owner',
      'boss@acme.test',
      '--full-name',
      'Helper',
      '--short-name',
      'helper',
      '--bot-type',
      '3',
    ]);
    expect(bot.email).toBe('helper-bot@chat.example.com');
    const botRow = await ctx.db
      .selectFrom('users')
      .select(['bot_type', 'bot_owner_id'])
      .where('id', '=', bot.user_id as number)
      .executeTakeFirstOrThrow();
    expect(botRow).toEqual({ bot_type: 3, bot_owner_id: owner.user_id });

    const stream = await ok(['stream', 'create', '--realm', '', '--name', 'general', '--description', '**hi**']);
    const priv = await ok(['stream', 'create', '--realm', '', '--name', 'secret', '--private']);
    const streams = await ctx.db.selectFrom('streams').select(['id', 'invite_only', 'rendered_description']).orderBy('id').execute();
    expect(streams).toEqual([
      { id: stream.stream_id, invite_only: false, rendered_description: '<p><strong>hi</strong></p>' },
      { id: priv.stream_id, invite_only: true, rendered_description: '' },
    ]);
    const subscribed = await ok(['subscribe', '--realm', '', '--email', 'boss@acme.test', '--stream', 'general']);
    expect(subscribed).toEqual({ user_id: owner.user_id, stream_id: stream.stream_id, color: '#76ce90' });
    expect((await ok(['subscribe', '--realm', '', '--email', 'boss@acme.test', '--stream', 'secret'])).color).toBe('#fae589');
    // Guests are restricted here: a guest subscribed where the owner is gets the owner's object
    // (as the guest sees it: the owner's address is for administrators only).
    const guest = await ok(['user', 'create', '--realm', '', '--email', 'guest@acme.test', '--full-name', 'A Guest', '--role', 'guest']);
    const guestQueue = randomUUID();
    await createEventQueue(
      ctx.db,
      {
        id: guestQueue,
        realmId: realm.realm_id as number,
        userId: guest.user_id as number,
        eventTypes: ['realm_user'],
        lifespanSeconds: 600,
        userListIncomplete: false,
      },
      20,
    ).execute();
    await ok(['subscribe', '--realm', '', '--email', 'guest@acme.test', '--stream', 'general']);
    expect(await queueEvents(ctx.db, guestQueue)).toEqual([
      {
        type: 'realm_user',
        op: 'add',
        person: expect.objectContaining({
          email: `user${owner.user_id as number}@chat.example.com`,
          user_id: owner.user_id,
          full_name: 'The Boss',
          timezone: 'Europe/Paris',
          delivery_email: null,
        }),
        id: 0,
      },
    ]);
    // A user the command line creates shares no channel with the guest yet: its placeholder.
    const late = await ok(['user', 'create', '--realm', '', '--email', 'late@acme.test', '--full-name', 'Late Comer']);
    const events = await queueEvents(ctx.db, guestQueue);
    expect(events.slice(1)).toEqual([
      {
        type: 'realm_user',
        op: 'add',
        person: expect.objectContaining({ user_id: late.user_id, full_name: 'Unknown user', delivery_email: null }),
        id: 1,
      },
    ]);

    const field = await ok(['profile-field', 'create', '--realm', '', '--name', 'Bio', '--type', 'long_text']);
    expect(field).toEqual({ field_id: expect.any(Number) });
    await ok([
      'profile-field',
      'set',
      '--realm',
      '',
      '--email',
      'boss@acme.test',
      '--field',
      String(field.field_id),
      '--value',
      'I <b>lead</b>',
    ]);
    const value = await ctx.db.selectFrom('custom_profile_field_values').select(['value', 'rendered_value']).executeTakeFirstOrThrow();
    expect(value).toEqual({ value: 'I <b>lead</b>', rendered_value: '<p>I &lt;b&gt;lead&lt;/b&gt;</p>' });
    const dateField = await ok(['profile-field', 'create', '--realm', '', '--name', 'Birthday', '--type', 'date']);
    await fails(
      ['profile-field', 'set', '--realm', '', '--email', 'boss@acme.test', '--field', String(dateField.field_id), '--value', 'soon'],
      'A date field takes YYYY-MM-DD',
    );

    const rotated = await ok(['api-key', 'rotate', '--realm', '', '--email', 'BOSS@acme.test']);
    expect(rotated).toEqual({ user_id: owner.user_id, api_key: expect.stringMatching(/^[A-Za-z0-9]{32}$/) });
    const rotatedRow = await ctx.db
      .selectFrom('users')
      .select('api_key_hash')
      .where('id', '=', owner.user_id as number)
      .executeTakeFirstOrThrow();
    expect(rotatedRow.api_key_hash).toBe(hashApiKey(rotated.api_key as string));

    expect(await ok(['stream', 'archive', '--realm', '', '--name', 'secret'])).toEqual({ stream_id: priv.stream_id, is_archived: true });
    expect(await ok(['user', 'deactivate', '--realm', '', '--email', 'old@acme.test'])).toEqual({
      user_id: stub.user_id,
      is_active: false,
    });
    // The last of the owner's queue (ids from 0; the subscriptions above sent theirs before it).
    const ownerEvents = await queueEvents(ctx.db, ownerQueue);
    expect(ownerEvents.at(-1)).toEqual({
      type: 'realm_user',
      op: 'update',
      person: { user_id: stub.user_id, is_active: false },
      id: ownerEvents.length - 1,
    });
    expect(await ok(['user', 'delete', '--realm', '', '--email', 'boss@acme.test'])).toEqual({ user_id: owner.user_id, is_deleted: true });
    const deleted = await ctx.db
      .selectFrom('users')
      .select(['is_active', 'is_deleted', 'full_name'])
      .where('id', '=', owner.user_id as number)
      .executeTakeFirstOrThrow();
    expect(deleted).toEqual({ is_active: false, is_deleted: true, full_name: `Deleted User ${owner.user_id as number}` });
    expect(await ctx.db.selectFrom('custom_profile_field_values').selectAll().execute()).toEqual([]);

    expect(await ok(['realm', 'deactivate', '--realm', ''])).toEqual({ realm_id: realm.realm_id, deactivated: true });
  });

  it('refuses bad input with one line on stderr and changes nothing', async () => {
    await ok(['realm', 'create', '--subdomain', 'team', '--name', 'Team']);
    const before = await ctx.db.selectFrom('users').select('id').orderBy('id').execute();
    await fails(['user', 'create', '--realm', 'team', '--email', 'a@b.c', '--full-name', 'A', '--role', 'king'], 'Unknown role "king"');
    await fails(
      ['user', 'create', '--realm', 'team', '--email', 'a@b.c', '--full-name', 'A', '--timezone', 'Mars/Base'],
      'Unknown time zone "Mars/Base"',
    );
    await fails(
      ['user', 'create', '--realm', 'team', '--email', 'not-an-email', '--full-name', 'A'],
      'Invalid email address "not-an-email"',
    );
    await fails(['user', 'create', '--realm', 'nosuch', '--email', 'a@b.c', '--full-name', 'A'], 'No organization with subdomain "nosuch"');
    await fails(['user', 'create', '--realm', 'team', '--email', 'a@b.c'], '--full-name is required');
    await fails(
      ['bot', 'create', '--realm', 'team', '--owner', 'nobody@b.c', '--full-name', 'B', '--short-name', 'b'],
      'No user with email "nobody@b.c" in this organization',
    );
    await fails(['profile-field', 'create', '--realm', 'team', '--name', 'X', '--type', 'color'], /^Unknown field type "color"/);
    await fails(['frobnicate'], 'Unknown command "frobnicate" (see --help)');
    await fails(['realm', 'create', '--bogus'], 'Unknown option --bogus (see --help)');
    expect(await ctx.db.selectFrom('users').select('id').orderBy('id').execute()).toEqual(before);
    await ok(['user', 'create', '--realm', 'team', '--email', 'a@b.c', '--full-name', 'A']);
    await fails(
      ['user', 'create', '--realm', 'team', '--email', 'A@B.C', '--full-name', 'A'],
      'A user with email "A@B.C" already exists in this organization',
    );
  });

  it('fails clearly on a bad configuration value', async () => {
    const outcome = await admin(['realm', 'create', '--subdomain', 'y', '--name', 'Y'], { EXTERNAL_URI_SCHEME: 'ftp://' });
    expect(outcome.code).not.toBe(0);
    expect(outcome.stderr).toMatch(/^Invalid environment variable EXTERNAL_URI_SCHEME="ftp:\/\/"/);
  });

  it('prints its usage for --help and for no command, without a database', async () => {
    const help = await admin(['--help'], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' });
    expect(help).toEqual({ code: 0, stdout: expect.stringMatching(/^usage: admin <command> \[options\]\n(.+\n)+$/), stderr: '' });
    expect(await admin([])).toEqual(help);
  });

  // The one real process: the README's command, built on first use (scripts/build.mjs --if-stale).
  it('works through npm run --silent admin, printing exactly one JSON object', async () => {
    const { stdout, stderr } = await run(
      'npm',
      ['run', '--silent', 'admin', '--', 'realm', 'create', '--subdomain', 'npm', '--name', 'Via npm'],
      { env: { ...process.env, DATABASE_URL: ctx.database.url, AVATAR_SALT: 'test-salt' } },
    );
    expect({ stdout, stderr }).toEqual({ stdout: expect.stringMatching(/^\{"realm_id":\d+\}\n$/), stderr: '' });
    const realm = JSON.parse(stdout) as { realm_id: number };
    expect(await ctx.db.selectFrom('realms').select(['id', 'subdomain', 'name']).execute()).toEqual([
      { id: realm.realm_id, subdomain: 'npm', name: 'Via npm' },
    ]);
  }, 180_000);

  it('without DATABASE_URL uses the embedded database, and says so when it is in use', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cli-embedded-'));
    try {
      const created = await admin(['realm', 'create', '--subdomain', 'solo', '--name', 'Solo'], {
        DATABASE_URL: undefined,
        AVATAR_SALT: undefined,
        DATA_DIR: dataDir,
      });
      expect(created.stderr).toBe('');
      expect(JSON.parse(created.stdout)).toEqual({ realm_id: 1 });
      // Someone else (not a recorded server) holds the cluster: the command must say so, not hang.
      const holder = await startEmbeddedPostgres({ directory: join(dataDir, 'postgres'), secretsDir: dataDir });
      try {
        const blocked = await admin(['realm', 'create', '--subdomain', 'two', '--name', 'Two'], {
          DATABASE_URL: undefined,
          AVATAR_SALT: undefined,
          DATA_DIR: dataDir,
        });
        expect(blocked.code).not.toBe(0);
        expect(blocked.stderr).toMatch(/^The embedded database in .* is in use by another process/);
      } finally {
        await holder.stop();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
