// npm run --silent admin -- <command>: prints one JSON object on success; a one-line message on
// stderr and a non-zero exit on failure.
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig } from '../config.js';
import type { Database, DatabaseHandle } from '../db/database.js';
import { EmbeddedDatabaseInUse } from '../db/embedded.js';
import { EMAIL_ADDRESS_VISIBILITY, ROLES } from '../zulip.js';
import { connectForCli } from './connect.js';
import * as ops from './operations.js';
import { AdminError } from './operations.js';

const USAGE = `usage: admin <command> [options]
  realm create --subdomain S --name N [--description D] [--restrict-guest-access]
  realm deactivate --realm S
  realm list
  user create --realm S --email E --full-name N [--role owner|admin|moderator|member|guest]
              [--timezone TZ] [--email-visibility everyone|members|moderators|admins|nobody] [--imported-stub]
              [--can-create-users]
  user list --realm S
  user set-role --realm S --email E --role owner|admin|moderator|member|guest
  user deactivate --realm S --email E
  user reactivate --realm S --email E
  user delete --realm S --email E
  bot create --realm S --owner E --full-name N --short-name X [--bot-type 1|2|3|4]
  stream create --realm S --name N [--private] [--web-public] [--description D]
  stream archive --realm S --name N
  subscribe --realm S --email E --stream N
  unsubscribe --realm S --email E --stream N
  profile-field create --realm S --name N --type short_text|long_text|select|date|url|user|external_account|pronouns
  profile-field set --realm S --email E --field ID --value V
  api-key rotate --realm S --email E
Realm S is the subdomain; "" is the root organization.`;

const OPTIONS = {
  subdomain: { type: 'string' },
  name: { type: 'string' },
  description: { type: 'string' },
  'restrict-guest-access': { type: 'boolean' },
  realm: { type: 'string' },
  email: { type: 'string' },
  'full-name': { type: 'string' },
  role: { type: 'string' },
  timezone: { type: 'string' },
  'email-visibility': { type: 'string' },
  'imported-stub': { type: 'boolean' },
  'can-create-users': { type: 'boolean' },
  owner: { type: 'string' },
  'short-name': { type: 'string' },
  'bot-type': { type: 'string' },
  private: { type: 'boolean' },
  'web-public': { type: 'boolean' },
  stream: { type: 'string' },
  type: { type: 'string' },
  field: { type: 'string' },
  value: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

type Values = ReturnType<typeof parseArgs<{ options: typeof OPTIONS; allowPositionals: true }>>['values'];

function need(values: Values, name: keyof Values): string {
  const value = values[name];
  if (typeof value !== 'string') throw new AdminError(`--${name} is required`);
  return value;
}

function integer(text: string, option: string): number {
  if (!/^\d+$/.test(text)) throw new AdminError(`--${option} takes a positive integer`);
  return Number(text);
}

type Command = (db: Database, values: Values, config: ReturnType<typeof loadConfig>, handle: DatabaseHandle) => Promise<object>;

const COMMANDS: Record<string, Command> = {
  'realm create': (db, v) =>
    ops.createRealm(db, {
      subdomain: need(v, 'subdomain'),
      name: need(v, 'name'),
      description: v.description,
      restrictGuestAccess: v['restrict-guest-access'],
    }),
  'realm deactivate': (db, v) => ops.deactivateRealm(db, need(v, 'realm')),
  'realm list': (db) => ops.listRealms(db),
  'user list': (db, v) => ops.listUsers(db, need(v, 'realm')),
  'user set-role': (_db, v, config, handle) =>
    ops.setUserRole(handle, config, { realm: need(v, 'realm'), email: need(v, 'email'), role: need(v, 'role') }),
  'user reactivate': (_db, v, config, handle) => ops.reactivateUser(handle, config, need(v, 'realm'), need(v, 'email')),
  'user create': (_db, v, config, handle) =>
    ops.createUser(
      handle,
      {
        realm: need(v, 'realm'),
        email: need(v, 'email'),
        fullName: need(v, 'full-name'),
        role: v.role as keyof typeof ROLES | undefined,
        timezone: v.timezone,
        emailVisibility: v['email-visibility'] as keyof typeof EMAIL_ADDRESS_VISIBILITY | undefined,
        importedStub: v['imported-stub'],
        canCreateUsers: v['can-create-users'],
      },
      config,
    ),
  'user deactivate': (_db, v, config, handle) => ops.deactivateUser(handle, need(v, 'realm'), need(v, 'email'), config),
  'user delete': (_db, v, config, handle) => ops.deleteUser(handle, config, need(v, 'realm'), need(v, 'email')),
  'bot create': (db, v, config) =>
    ops.createBot(db, config, {
      realm: need(v, 'realm'),
      ownerEmail: need(v, 'owner'),
      fullName: need(v, 'full-name'),
      shortName: need(v, 'short-name'),
      botType: v['bot-type'] === undefined ? undefined : integer(v['bot-type'], 'bot-type'),
    }),
  'stream create': (db, v) =>
    ops.createStream(db, {
      realm: need(v, 'realm'),
      name: need(v, 'name'),
      private: v.private,
      webPublic: v['web-public'],
      description: v.description,
    }),
  'stream archive': (db, v) => ops.archiveStream(db, need(v, 'realm'), need(v, 'name')),
  subscribe: (db, v, config, handle) =>
    ops.subscribe(
      { db, config, transactions: handle.transactions, maxPendingEvents: config.queueMaxPendingEvents },
      { realm: need(v, 'realm'), email: need(v, 'email'), stream: need(v, 'stream') },
    ),
  unsubscribe: (db, v, config, handle) =>
    ops.unsubscribe(
      { db, config, transactions: handle.transactions, maxPendingEvents: config.queueMaxPendingEvents },
      { realm: need(v, 'realm'), email: need(v, 'email'), stream: need(v, 'stream') },
    ),
  'profile-field create': (db, v) => ops.createProfileField(db, { realm: need(v, 'realm'), name: need(v, 'name'), type: need(v, 'type') }),
  'profile-field set': (db, v) =>
    ops.setProfileFieldValue(db, {
      realm: need(v, 'realm'),
      email: need(v, 'email'),
      fieldId: integer(need(v, 'field'), 'field'),
      value: need(v, 'value'),
    }),
  'api-key rotate': (db, v) => ops.rotateApiKey(db, need(v, 'realm'), need(v, 'email')),
};

/** Where a command's output goes (process.stdout and process.stderr, or a test's capture). */
export interface AdminOutput {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
}

/**
 * Runs one command (`argv` as after `admin`) with the configuration of `env`: one JSON line on
 * stdout, or one line on stderr; returns the exit code.
 */
export async function runAdmin(argv: string[], env: NodeJS.ProcessEnv, output: AdminOutput): Promise<number> {
  try {
    await dispatch(argv, env, (line) => output.stdout.write(`${line}\n`));
    return 0;
  } catch (error) {
    const known = error instanceof AdminError || error instanceof ConfigError || error instanceof EmbeddedDatabaseInUse;
    output.stderr.write(`${known ? error.message : `admin: ${(error as Error).message ?? String(error)}`}\n`);
    return 1;
  }
}

async function dispatch(argv: string[], env: NodeJS.ProcessEnv, print: (line: string) => void): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    throw ops.optionError(error);
  }
  const { values, positionals } = parsed;
  const name = positionals.join(' ');
  // `admin user` and `--help` after a command or group: its usage lines.
  const usage = name === '' ? USAGE : ops.usageOf(USAGE, name);
  if (values.help || positionals.length === 0 || (usage !== undefined && !COMMANDS[name])) {
    print(usage ?? USAGE);
    return;
  }
  const command = COMMANDS[name];
  if (!command) {
    const hint = ops.usageOf(USAGE, positionals[0]!) === undefined ? 'see --help' : `admin ${positionals[0]} lists its commands`;
    throw new AdminError(`Unknown command "${name}" (${hint})`);
  }
  const config = loadConfig(env);
  const handle = await connectForCli(config);
  try {
    print(JSON.stringify(await command(handle.db, values, config, handle)));
  } finally {
    await handle.close();
  }
}

// Run as a program (node dist/cli/admin.js), not imported (test/cli.test.ts).
if (process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await runAdmin(process.argv.slice(2), process.env, process);
}
