import { sql } from 'kysely';
import { type Config, loadConfig } from '../config.js';
import { type Database, type DatabaseHandle, kyselyIn } from '../db/database.js';
import type { StatementRunner } from '../db/reusable-statement.js';
import { generateApiKey, hashApiKey } from '../lib/api-keys.js';
import { fakeEmailDomain, type HostConfig } from '../lib/hosts.js';
import { renderMarkdown } from '../lib/markdown.js';
import { ApiError } from '../http/errors.js';
import { apiErrorOfRefusal, findManagedUser, isLastOwner } from '../modules/user-management/users-admin.service.js';
import {
  createUserWithEvents,
  deactivateUserWithEvents,
  type ManagementContext,
  ManagementRefusal,
  reactivateUserWithEvents,
  updateUserWithEvents,
} from '../modules/user-management/users-management.service.js';
import { roleChangeEvents } from '../modules/user-management/users-update.service.js';
import type { UserObjectConfig } from '../modules/users/users.serializers.js';
import { REFUSALS, UPDATE_USER } from '../modules/user-management/users.writes.js';
import type { EventWrites } from '../modules/event-log/event-log.repository.js';
import { ChannelNotFound, subscribeAsOperator, unsubscribeUsers } from '../modules/subscriptions/membership.service.js';
import { EMAIL_ADDRESS_VISIBILITY, MARKDOWN_PROFILE_FIELD_TYPES, PROFILE_FIELD_TYPES, ROLES } from '../zulip.js';

/**
 * Administrative operations, modelled on Zulip's management commands. Used by the admin command
 * line, the demo organization and tests. Each takes `db` first; realms are named by subdomain.
 */

export class AdminError extends Error {}

/** What the user-management service needs of the configuration: the events' user objects and the queues' cap. */
export type ManagementConfig = UserObjectConfig & Pick<Config, 'queueMaxPendingEvents'>;

/**
 * What an operation runs on: Kysely over the pool (reads, single statements) and the write API for
 * its transactions; `tx`, when given, is a transaction of it already open, `db` bound to it (the
 * demo organization's, a deletion's): the operation runs in it.
 */
export type Operator = Pick<DatabaseHandle, 'db' | 'transactions'> & { tx?: StatementRunner };

/** Runs `work` in `operator.tx` when open, else in a transaction of its own (the operator's: no user's turn or lock). */
export function inTransaction<T>(operator: Operator, work: (inside: Operator & { tx: StatementRunner }) => Promise<T>): Promise<T> {
  const { tx } = operator;
  if (tx) return work({ ...operator, tx });
  return operator.transactions.interactive((open) => work({ ...operator, db: kyselyIn(open), tx: open }));
}

/** Runs a service write by the operator (no acting user), in a transaction (inTransaction). */
function asOperator<T>(
  operator: Operator,
  config: ManagementConfig,
  realm: Awaited<ReturnType<typeof findRealm>>,
  write: (context: ManagementContext) => Promise<T>,
): Promise<T> {
  return inTransaction(operator, ({ db, tx }) =>
    write({
      db,
      transactions: { open: tx },
      realm: { id: realm.id, subdomain: realm.subdomain, canAccessAllUsersGroup: realm.can_access_all_users_group },
      maxPendingEvents: config.queueMaxPendingEvents,
      config,
    }),
  );
}

async function findRealm(db: Database, subdomain: string) {
  const realm = await db
    .selectFrom('realms')
    .select(['id', 'subdomain', 'can_access_all_users_group'])
    .where('subdomain', '=', subdomain)
    .executeTakeFirst();
  if (!realm) throw new AdminError(`No organization with subdomain "${subdomain}"`);
  return realm;
}

/** The organization named by `subdomain` and its user with `email`. */
async function findUser(db: Database, subdomain: string, email: string) {
  const realm = await findRealm(db, subdomain);
  const user = await db
    .selectFrom('users')
    .select(['id', 'bot_type', 'is_active', 'role'])
    .select(
      sql<number[]>`ARRAY(SELECT b.id FROM users b WHERE b.bot_owner_id = users.id AND b.is_active ORDER BY b.id)`.as('active_bot_ids'),
    )
    .where('realm_id', '=', realm.id)
    .where((eb) => eb(eb.fn('lower', ['delivery_email']), '=', email.trim().toLowerCase()))
    .executeTakeFirst();
  if (!user) throw new AdminError(`No user with email "${email}" in this organization`);
  return { realm, user };
}

async function findStream(db: Database, realmId: number, name: string) {
  const stream = await db
    .selectFrom('streams')
    .select(['id'])
    .where('realm_id', '=', realmId)
    .where((eb) => eb(eb.fn('lower', ['name']), '=', name.toLowerCase()))
    .executeTakeFirst();
  if (!stream) throw new AdminError(`No channel named "${name}" in this organization`);
  return stream;
}

function requireText(value: string | undefined, option: string): string {
  if (value === undefined || value.trim() === '') throw new AdminError(`${option} is required`);
  return value.trim();
}

/** Runs an insert returning the new row's id; a unique violation is refused with `duplicate`. */
async function insertNew(insert: { executeTakeFirstOrThrow(): Promise<{ id: number }> }, duplicate: string): Promise<number> {
  try {
    return (await insert.executeTakeFirstOrThrow()).id;
  } catch (error) {
    if ((error as { code?: string }).code === '23505') throw new AdminError(duplicate);
    throw error;
  }
}

export async function createRealm(
  db: Database,
  options: { subdomain: string; name: string; description?: string; restrictGuestAccess?: boolean },
): Promise<{ realm_id: number }> {
  const subdomain = options.subdomain.trim().toLowerCase();
  if (subdomain !== '' && !/^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/.test(subdomain)) {
    throw new AdminError(`Invalid subdomain "${options.subdomain}": use letters, digits and inner hyphens`);
  }
  const description = options.description ?? '';
  const insert = db
    .insertInto('realms')
    .values({
      subdomain,
      name: requireText(options.name, '--name'),
      description,
      rendered_description: renderMarkdown(description),
      can_access_all_users_group: options.restrictGuestAccess ? 'members' : 'everyone',
    })
    .returning('id');
  return { realm_id: await insertNew(insert, `An organization with subdomain "${subdomain}" already exists`) };
}

export async function deactivateRealm(db: Database, subdomain: string): Promise<{ realm_id: number; deactivated: true }> {
  const realm = await findRealm(db, subdomain);
  await db.updateTable('realms').set({ deactivated: true }).where('id', '=', realm.id).execute();
  return { realm_id: realm.id, deactivated: true };
}

export interface NewUser {
  realm: string;
  email: string;
  fullName: string;
  role?: keyof typeof ROLES;
  timezone?: string;
  emailVisibility?: keyof typeof EMAIL_ADDRESS_VISIBILITY;
  importedStub?: boolean;
  /** Zulip's special permission for POST /users. */
  canCreateUsers?: boolean;
}

const alreadyExists = (email: string) => `A user with email "${email}" already exists in this organization`;

/** Creates a user through the API's service (src/modules/user-management/users-management.service.ts): the same statement and realm_user/add events. */
export async function createUser(
  operator: Operator,
  options: NewUser,
  config: ManagementConfig = loadConfig(),
): Promise<{ user_id: number; email: string; api_key: string }> {
  const realm = await findRealm(operator.db, options.realm);
  const email = requireText(options.email, '--email');
  if (!/^[^\s@]+@[^\s@]+$/.test(email)) throw new AdminError(`Invalid email address "${email}"`);
  const role = ROLES[options.role ?? 'member'];
  if (role === undefined) throw new AdminError(`Unknown role "${options.role}"`);
  const visibility = EMAIL_ADDRESS_VISIBILITY[options.emailVisibility ?? 'everyone'];
  if (visibility === undefined) throw new AdminError(`Unknown email visibility "${options.emailVisibility}"`);
  const timezone = options.timezone ?? '';
  try {
    if (timezone !== '') new Intl.DateTimeFormat('en', { timeZone: timezone });
  } catch {
    throw new AdminError(`Unknown time zone "${timezone}"`);
  }
  const fullName = requireText(options.fullName, '--full-name');
  try {
    const created = await asOperator(operator, config, realm, (context) =>
      createUserWithEvents(context, {
        email,
        fullName,
        role,
        timezone,
        emailAddressVisibility: visibility,
        isImportedStub: options.importedStub ?? false,
        canCreateUsers: options.canCreateUsers ?? false,
        passwordTooWeak: false,
      }),
    );
    return { user_id: created.userId, email, api_key: created.apiKey };
  } catch (error) {
    if (error instanceof ManagementRefusal && error.reason === REFUSALS.emailInUse) throw new AdminError(alreadyExists(email));
    throw error;
  }
}

export async function createBot(
  db: Database,
  config: HostConfig,
  options: { realm: string; ownerEmail: string; fullName: string; shortName: string; botType?: number },
): Promise<{ user_id: number; email: string; api_key: string }> {
  const { realm, user: owner } = await findUser(db, options.realm, options.ownerEmail);
  if (owner.bot_type !== null) throw new AdminError('A bot cannot own another bot');
  const shortName = requireText(options.shortName, '--short-name').toLowerCase();
  if (!/^[a-z0-9._-]+$/.test(shortName)) throw new AdminError(`Invalid short name "${options.shortName}"`);
  const botType = options.botType ?? 1;
  if (![1, 2, 3, 4].includes(botType)) throw new AdminError(`Invalid bot type ${options.botType}: use 1, 2, 3 or 4`);
  const email = `${shortName}-bot@${fakeEmailDomain(realm.subdomain, config)}`;
  const apiKey = generateApiKey();
  const insert = db
    .insertInto('users')
    .values({
      realm_id: realm.id,
      delivery_email: email,
      full_name: requireText(options.fullName, '--full-name'),
      bot_type: botType,
      bot_owner_id: owner.id,
      api_key_hash: hashApiKey(apiKey),
    })
    .returning('id');
  return { user_id: await insertNew(insert, alreadyExists(email)), email, api_key: apiKey };
}

/**
 * Deactivates a user (and their active bots) through the API's service: their queues end, the
 * organization gets realm_user/update events. Unlike the API, the operator may deactivate anyone,
 * the last owner included; an already deactivated user stays so.
 */
export async function deactivateUser(
  operator: Operator,
  realmName: string,
  email: string,
  config: ManagementConfig = loadConfig(),
): Promise<{ user_id: number; is_active: false }> {
  const { realm, user } = await findUser(operator.db, realmName, email);
  await deactivateQuietly(operator, config, realm, user);
  return { user_id: user.id, is_active: false };
}

/** The service's deactivation by the operator: anyone, the last owner included; a deactivated user stays so, silently. */
async function deactivateQuietly(
  operator: Operator,
  config: ManagementConfig,
  realm: Awaited<ReturnType<typeof findRealm>>,
  user: Awaited<ReturnType<typeof findUser>>['user'],
): Promise<void> {
  try {
    await asOperator(operator, config, realm, (context) =>
      deactivateUserWithEvents(
        context,
        { id: user.id, botType: user.bot_type, activeBotIds: user.active_bot_ids },
        { self: false, keepLastOwner: false },
      ),
    );
  } catch (error) {
    if (!(error instanceof ManagementRefusal && error.reason === REFUSALS.deactivated)) throw error;
  }
}

/**
 * Zulip's delete_user command (do_delete_user_preserving_messages; DELETE /users/{id} only
 * deactivates). One transaction: the API's deactivation of an active user (their bots, queues, and
 * the same events as DELETE /users/{id}); then the personal data is scrubbed as Zulip's
 * do_delete_user_core does: the row stays (ids in history stay valid) with Zulip's placeholders and
 * defaults and an unknown API key, the profile values and subscriptions go. Like Zulip, no event
 * tells of the scrubbed name or address.
 */
export async function deleteUser(
  operator: Operator,
  config: HostConfig & ManagementConfig,
  subdomain: string,
  email: string,
): Promise<{ user_id: number; is_deleted: true }> {
  const { realm, user } = await findUser(operator.db, subdomain, email);
  await inTransaction(operator, async (inside) => {
    const trx = inside.db;
    // Not for a deactivated user: the statement's refusal would abort the transaction.
    if (user.is_active) await deactivateQuietly(inside, config, realm, user);
    await trx.deleteFrom('custom_profile_field_values').where('user_id', '=', user.id).execute();
    await trx.deleteFrom('subscriptions').where('user_id', '=', user.id).execute();
    await trx
      .updateTable('users')
      .set({
        is_deleted: true,
        full_name: `Deleted User ${user.id}`,
        delivery_email: `deleteduser${user.id}@${fakeEmailDomain(realm.subdomain, config)}`,
        timezone: '',
        email_address_visibility: EMAIL_ADDRESS_VISIBILITY.everyone,
        avatar_source: 'G',
        api_key_hash: hashApiKey(generateApiKey()),
      })
      .where('id', '=', user.id)
      .execute();
  });
  return { user_id: user.id, is_deleted: true };
}

export async function createStream(
  db: Database,
  options: { realm: string; name: string; private?: boolean; description?: string; webPublic?: boolean },
): Promise<{ stream_id: number }> {
  const realm = await findRealm(db, options.realm);
  const description = options.description ?? '';
  const insert = db
    .insertInto('streams')
    .values({
      realm_id: realm.id,
      name: requireText(options.name, '--name'),
      description,
      rendered_description: renderMarkdown(description),
      invite_only: options.private ?? false,
      // As Zulip's make_stream: a private channel's history is not public to its subscribers.
      history_public_to_subscribers: !(options.private ?? false),
      is_web_public: options.webPublic ?? false,
    })
    .returning('id');
  return { stream_id: await insertNew(insert, `A channel named "${options.name}" already exists`) };
}

export async function archiveStream(db: Database, realm: string, name: string): Promise<{ stream_id: number; is_archived: true }> {
  const stream = await findStream(db, (await findRealm(db, realm)).id, name);
  await db.updateTable('streams').set({ deactivated: true }).where('id', '=', stream.id).execute();
  return { stream_id: stream.id, is_archived: true };
}

/**
 * Subscribes (or re-subscribes, keeping the old settings) a user to a channel: a client of the
 * API's subscription service (src/modules/subscriptions/membership.service.ts), so the same
 * write, colours and events, without the API's permission checks.
 */
export async function subscribe(
  target: { db: Database; config?: UserObjectConfig } & EventWrites,
  options: { realm: string; email: string; stream: string },
): Promise<{ user_id: number; stream_id: number; color: string }> {
  const { realm, user } = await findUser(target.db, options.realm, options.email);
  try {
    // The configuration builds the user objects of realm_user/add (organizations restricting guests).
    const writes = { ...target, config: target.config ?? loadConfig() };
    const { stream_id, color } = await subscribeAsOperator(writes, realm.id, user.id, options.stream);
    return { user_id: user.id, stream_id, color };
  } catch (error) {
    if (error instanceof ChannelNotFound) throw new AdminError(`No channel named "${options.stream}" in this organization`);
    throw error;
  }
}

export async function createProfileField(
  db: Database,
  options: { realm: string; name: string; type: string; hint?: string },
): Promise<{ field_id: number }> {
  const realm = await findRealm(db, options.realm);
  const fieldType = PROFILE_FIELD_TYPES[options.type as keyof typeof PROFILE_FIELD_TYPES];
  if (fieldType === undefined) {
    throw new AdminError(`Unknown field type "${options.type}": use ${Object.keys(PROFILE_FIELD_TYPES).join(', ')}`);
  }
  const insert = db
    .insertInto('custom_profile_fields')
    .values({ realm_id: realm.id, name: requireText(options.name, '--name'), field_type: fieldType, hint: options.hint ?? '' })
    .returning('id');
  return { field_id: await insertNew(insert, `A profile field named "${options.name}" already exists`) };
}

function checkProfileValue(fieldType: number, value: string): void {
  if (fieldType === PROFILE_FIELD_TYPES.date && !/^\d{4}-\d{2}-\d{2}$/.test(value)) {
    throw new AdminError('A date field takes YYYY-MM-DD');
  }
  if (fieldType === PROFILE_FIELD_TYPES.url && !/^https?:\/\/\S+$/.test(value)) {
    throw new AdminError('A URL field takes an http(s) URL');
  }
  if (fieldType === PROFILE_FIELD_TYPES.user) {
    let ids: unknown;
    try {
      ids = JSON.parse(value);
    } catch {
      ids = undefined;
    }
    if (!Array.isArray(ids) || !ids.every((id) => Number.isInteger(id))) {
      throw new AdminError('A user field takes a JSON list of user ids, e.g. [13]');
    }
  }
}

export async function setProfileFieldValue(
  db: Database,
  options: { realm: string; email: string; fieldId: number; value: string },
): Promise<{ user_id: number; field_id: number }> {
  const { realm, user } = await findUser(db, options.realm, options.email);
  if (user.bot_type !== null) throw new AdminError('Bots have no custom profile fields');
  const field = await db
    .selectFrom('custom_profile_fields')
    .select(['id', 'field_type'])
    .where('realm_id', '=', realm.id)
    .where('id', '=', options.fieldId)
    .executeTakeFirst();
  if (!field) throw new AdminError(`No profile field with id ${options.fieldId} in this organization`);
  checkProfileValue(field.field_type, options.value);
  const renderedValue = MARKDOWN_PROFILE_FIELD_TYPES.has(field.field_type) ? renderMarkdown(options.value) : null;
  await db
    .insertInto('custom_profile_field_values')
    .values({ realm_id: realm.id, user_id: user.id, field_id: field.id, value: options.value, rendered_value: renderedValue })
    .onConflict((oc) => oc.columns(['user_id', 'field_id']).doUpdateSet({ value: options.value, rendered_value: renderedValue }))
    .execute();
  return { user_id: user.id, field_id: field.id };
}

export async function rotateApiKey(db: Database, realm: string, email: string): Promise<{ user_id: number; api_key: string }> {
  const { user } = await findUser(db, realm, email);
  const apiKey = generateApiKey();
  await db
    .updateTable('users')
    .set({ api_key_hash: hashApiKey(apiKey) })
    .where('id', '=', user.id)
    .execute();
  return { user_id: user.id, api_key: apiKey };
}

/** The name of a role number (ROLES), for listings. */
const roleName = (role: number): string => Object.entries(ROLES).find(([, value]) => value === role)?.[0] ?? String(role);

/** Zulip's list_realms: every organization, in id order. */
export async function listRealms(
  db: Database,
): Promise<{ realms: { realm_id: number; subdomain: string; name: string; deactivated: boolean }[] }> {
  const rows = await db.selectFrom('realms').select(['id', 'subdomain', 'name', 'deactivated']).orderBy('id').execute();
  return { realms: rows.map((row) => ({ realm_id: row.id, subdomain: row.subdomain, name: row.name, deactivated: row.deactivated })) };
}

/** An organization's users and bots, in id order (Zulip's list_users, the API key aside). */
export async function listUsers(db: Database, realmName: string) {
  const realm = await findRealm(db, realmName);
  const rows = await db
    .selectFrom('users')
    .select(['id', 'delivery_email', 'full_name', 'role', 'bot_type', 'is_active'])
    .where('realm_id', '=', realm.id)
    .orderBy('id')
    .execute();
  return {
    users: rows.map((row) => ({
      user_id: row.id,
      email: row.delivery_email,
      full_name: row.full_name,
      role: roleName(row.role),
      is_bot: row.bot_type !== null,
      is_active: row.is_active,
    })),
  };
}

/** The service's refusal as the command line's message (AdminError); anything else as it is. */
function adminErrorOf(error: unknown, operation: Parameters<typeof apiErrorOfRefusal>[1]): unknown {
  const mapped = apiErrorOfRefusal(error, operation);
  return mapped instanceof ApiError ? new AdminError(mapped.message) : mapped;
}

/**
 * Zulip's change_user_role: the same statement and events as PATCH /users/{user} with a `role`
 * (users-update.service.ts), without the API's permission checks; like it, never the only owner's.
 */
export async function setUserRole(
  operator: Operator,
  config: ManagementConfig,
  options: { realm: string; email: string; role: string },
): Promise<{ user_id: number; role: string }> {
  const role = ROLES[options.role as keyof typeof ROLES];
  if (role === undefined) throw new AdminError(`Unknown role "${options.role}": use ${Object.keys(ROLES).join(', ')}`);
  const { db } = operator;
  const { realm, user } = await findUser(db, options.realm, options.email);
  const target = (await findManagedUser(db, realm.id, user.id, role))!;
  if (target.role !== role) {
    if (target.role === ROLES.owner && isLastOwner(target)) {
      throw new AdminError('The owner permission cannot be removed from the only organization owner.');
    }
    try {
      await asOperator(operator, config, realm, (context) =>
        updateUserWithEvents(context, UPDATE_USER, [target.id, null, role, '[]', []], roleChangeEvents(context.realm, target, role)),
      );
    } catch (error) {
      throw adminErrorOf(error, 'update');
    }
  }
  return { user_id: user.id, role: options.role };
}

/**
 * Zulip's reactivate_user: the API's reactivation (realm_user/update, the channels' peer_add), a
 * bot keeping its owner; an active user stays so, with nothing sent.
 */
export async function reactivateUser(
  operator: Operator,
  config: ManagementConfig,
  realmName: string,
  email: string,
): Promise<{ user_id: number; is_active: true }> {
  const { realm, user } = await findUser(operator.db, realmName, email);
  if (!user.is_active) {
    try {
      await asOperator(operator, config, realm, (context) =>
        reactivateUserWithEvents(context, { id: user.id, botType: user.bot_type }, null),
      );
    } catch (error) {
      throw adminErrorOf(error, 'delete-other');
    }
  }
  return { user_id: user.id, is_active: true };
}

/**
 * Unsubscribes a user from a channel through the API's service (DELETE /users/me/subscriptions),
 * as the user's own unsubscription: the same write, audit row and events.
 */
export async function unsubscribe(
  target: { db: Database; config: UserObjectConfig } & EventWrites,
  options: { realm: string; email: string; stream: string },
): Promise<{ user_id: number; removed: string[]; not_removed: string[] }> {
  const { realm, user } = await findUser(target.db, options.realm, options.email);
  await findStream(target.db, realm.id, options.stream);
  const caller = { id: user.id, realmId: realm.id, role: user.role, realmSubdomain: realm.subdomain };
  try {
    const result = await unsubscribeUsers(target, caller, { names: [options.stream], principals: undefined });
    return { user_id: user.id, ...result };
  } catch (error) {
    throw error instanceof ApiError ? new AdminError(error.message) : error;
  }
}

// --- The command line's words (src/cli/admin.ts). ---

/**
 * The usage lines of the commands that start with `prefix` (`user`: every user command; `user
 * create`: that one), each with its continuation lines; undefined when no command starts so.
 */
export function usageOf(usage: string, prefix: string): string | undefined {
  const lines: string[] = [];
  let inside = false;
  for (const line of usage.split('\n')) {
    const command = /^ {2}(\S.*)$/.exec(line)?.[1];
    if (command !== undefined) inside = `${command} `.startsWith(`${prefix} `);
    else if (!/^ {3,}\S/.test(line)) inside = false;
    if (inside) lines.push(line);
  }
  return lines.length === 0 ? undefined : `usage: admin ${prefix} …\n${lines.join('\n')}`;
}

/** node:util parseArgs' refusal in a line naming the option (its own text also explains `--` positionals). */
export function optionError(error: unknown): AdminError {
  const code = (error as { code?: string }).code;
  const message = error instanceof Error ? error.message : String(error);
  const option = /'(-[^' ]+)/.exec(message)?.[1] ?? 'an option';
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return new AdminError(`Unknown option ${option} (see --help)`);
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    return new AdminError(/argument missing/.test(message) ? `${option} needs a value` : `${option} takes no value`);
  }
  return new AdminError(`${message.split('\n')[0]} (see --help)`);
}
