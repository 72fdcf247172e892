import { createHash } from 'node:crypto';
import { type RawBuilder, type Selectable, sql } from 'kysely';
import Type, { type TSchema } from 'typebox';
import type { Config } from '../../config.js';
import type { Users } from '../../db/types.js';
import { fakeEmailDomain } from '../../lib/hosts.js';
import { renderMarkdown } from '../../lib/markdown.js';
import { EMAIL_ADDRESS_VISIBILITY, MARKDOWN_PROFILE_FIELD_TYPES, ROLES } from '../../zulip.js';
import { allowedVisibilities, canSeeDeliveryEmail, effectiveVisibility, type UserViewer } from './users.access.js';

/**
 * The user object of docs/api.md §2.11, declared once (USER_FIELDS): each key's columns, its value in
 * JavaScript and as PostgreSQL's JSON text, when it is sent and the placeholder's value. Derived:
 * USER_COLUMNS, UserRecord, buildUserObject, the placeholder, userJsonSql and the OpenAPI schema.
 * test/users-json.test.ts checks both builds give the same bytes.
 */

export type UserObjectConfig = Pick<
  Config,
  'externalHost' | 'externalUriScheme' | 'rootSubdomainAliases' | 'fakeEmailDomain' | 'enableGravatar' | 'defaultAvatarUri' | 'avatarSalt'
>;

/** One stored custom profile field value of a user. */
export interface ProfileFieldValue {
  fieldId: number;
  fieldType: number;
  value: string;
  /** HTML stored with the value, for the Markdown field types. */
  renderedValue: string | null;
}

export interface UserObjectOptions {
  clientGravatar: boolean;
  includeCustomProfileFields: boolean;
  /** register's realm_users / realm_non_active_users leave is_active out (docs/api.md §3.12). */
  omitIsActive?: boolean;
}

type Camel<S extends string> = S extends `${infer Head}_${infer Tail}` ? `${Head}${Capitalize<Camel<Tail>>}` : S;
type Column = keyof Users;
/** A users row under the record's names (deliveryEmail for delivery_email). */
type StoredUser = { [C in Column as Camel<C>]: Selectable<Users>[C] };
/** What a load adds to the columns: profile values when asked for, the shared-channel fact for restricted viewers (docs/api.md §2.4). */
interface Loaded {
  profileValues?: ProfileFieldValue[];
  sharesActiveChannelWithViewer?: boolean;
}

/** What a value may depend on besides the user. */
type Context = ReturnType<typeof contextOf>;

/** Users a key is sent for (the key is absent for the others), in JavaScript and in SQL. */
const ROW_CONDITIONS = {
  bots: { js: (user: Pick<StoredUser, 'botType'>) => user.botType !== null, sql: sql`users.bot_type IS NOT NULL` },
  humans: { js: (user: Pick<StoredUser, 'botType'>) => user.botType === null, sql: sql`users.bot_type IS NULL` },
  deleted: { js: (user: Pick<StoredUser, 'isDeleted'>) => user.isDeleted, sql: sql`users.is_deleted` },
};

interface Presence {
  /** Sent only for these users. */
  only?: keyof typeof ROW_CONDITIONS;
  /** Sent only with these options. */
  shown?: (options: UserObjectOptions) => boolean;
}

interface Field<C extends Column, V> extends Presence {
  /** The users columns the value reads. */
  from: readonly C[];
  js: (user: Pick<StoredUser, Camel<C>> & Loaded, context: Context) => V;
  /**
   * The value's JSON text over the row `users`, NULL when SQL cannot give js's exact bytes (then js
   * builds the user); or the texts for each value of `caseOf` (none other: NULL; not with `only`).
   */
  sql: (context: Context) => RawBuilder<unknown> | Cases;
  /** The inaccessible-user placeholder's value; absent: the placeholder leaves the key out. */
  unknown?: (userId: number, context: Context) => V;
  /** As documented (the OpenAPI document). */
  schema: TSchema;
}

/** A value as a few constant texts; adjacent keys on the same `caseOf` share one CASE. */
interface Cases {
  caseOf: RawBuilder<unknown>;
  texts: readonly (readonly [when: unknown, text: string])[];
}

const casesSql = ({ caseOf, texts }: Cases) =>
  sql`CASE ${caseOf} ${sql.join(
    texts.map(([when, text]) => sql`WHEN ${sql.lit(when)} THEN ${sql.lit(text)}`),
    sql` `,
  )} END`;

const field = <const C extends Column, V, const P extends Presence = object>(declaration: Field<C, V> & P): Field<C, V> & P => declaration;

const recordKey = (column: string): string => column.replace(/_([a-z])/g, (_, letter: string) => letter.toUpperCase());

type StoredOptions<C extends Column> = Presence &
  Pick<Field<C, StoredUser[Camel<C>]>, 'unknown' | 'schema'> &
  (Selectable<Users>[C] extends string ? { quoted: true } : { quoted?: never });

/** A column sent as stored: strings (`quoted`) through to_json, numbers and booleans as their text. */
const stored = <const C extends Column, const P extends StoredOptions<C>>(column: C, declaration: P) => {
  const ref = sql.ref(`users.${column}`);
  return field<C, StoredUser[Camel<C>], P>({
    ...declaration,
    from: [column],
    js: (user) => user[recordKey(column) as Camel<C>] as StoredUser[Camel<C>],
    sql: () => (declaration.quoted ? sql`to_json(${ref})::text` : sql`coalesce(${ref}::text, 'null')`),
    schema: declaration.schema,
  });
};

const ROLE = sql`users.role`;

/** A value of the role: in SQL a constant per role (a role outside ROLES gives NULL: js builds that user). */
const ofRole = <V>(value: (role: number) => V, schema: TSchema = Type.Boolean()) =>
  field({
    from: ['role'],
    schema,
    js: (user) => value(user.role),
    sql: () => ({ caseOf: ROLE, texts: Object.values(ROLES).map((role) => [role, JSON.stringify(value(role))] as const) }),
    unknown: () => value(ROLES.member),
  });

const text = (value: string) => sql`${value}::text`;
const dummyEmail = (userId: number, fakeDomain: string): string => `user${userId}@${fakeDomain}`;
const emailVisibleSql = (viewer: UserViewer) =>
  sql`(users.id = ${viewer.id}::integer OR (CASE WHEN users.bot_type IS NOT NULL THEN ${sql.lit(EMAIL_ADDRESS_VISIBILITY.everyone)}
    ELSE users.email_address_visibility END) = ANY(${[...allowedVisibilities(viewer)]}::smallint[]))`;
const VISIBILITY_COLUMNS = ['id', 'bot_type', 'email_address_visibility'] as const;

/** The user object's keys in the order they are sent. */
const USER_FIELDS = {
  // Real only when the address is public, for every viewer (docs/api.md §2.3).
  email: field({
    from: [...VISIBILITY_COLUMNS, 'delivery_email'],
    js: (user, { fakeDomain }) =>
      effectiveVisibility(user) === EMAIL_ADDRESS_VISIBILITY.everyone ? user.deliveryEmail : dummyEmail(user.id, fakeDomain),
    sql: ({ fakeDomain }) => sql`to_json(CASE WHEN users.bot_type IS NOT NULL OR users.email_address_visibility =
      ${sql.lit(EMAIL_ADDRESS_VISIBILITY.everyone)} THEN users.delivery_email ELSE 'user' || users.id || '@' || ${text(fakeDomain)} END)::text`,
    unknown: (userId, { fakeDomain }) => dummyEmail(userId, fakeDomain),
    schema: Type.String({ description: 'API email: the real address, or a dummy one when the caller may not see it.' }),
  }),
  user_id: stored('id', { unknown: (userId) => userId, schema: Type.Integer() }),
  avatar_version: stored('avatar_version', { unknown: () => 1, schema: Type.Integer() }),
  is_admin: ofRole((role) => role === ROLES.owner || role === ROLES.admin),
  is_owner: ofRole((role) => role === ROLES.owner),
  is_guest: ofRole((role) => role === ROLES.guest),
  role: ofRole(
    (role) => role,
    Type.Integer({
      description: Object.entries(ROLES)
        .map(([name, role]) => `${role} ${name}`)
        .join(', '),
    }),
  ),
  is_bot: field({
    from: ['bot_type'],
    js: (user) => user.botType !== null,
    sql: () => sql`CASE WHEN users.bot_type IS NULL THEN 'false' ELSE 'true' END`,
    unknown: () => false,
    schema: Type.Boolean(),
  }),
  full_name: stored('full_name', { quoted: true, unknown: () => 'Unknown user', schema: Type.String() }),
  timezone: stored('timezone', {
    quoted: true,
    unknown: () => '',
    schema: Type.String({ description: 'IANA time zone; empty when unset.' }),
  }),
  is_active: stored('is_active', {
    unknown: () => true,
    shown: (options: UserObjectOptions) => !options.omitIsActive,
    schema: Type.Boolean({ description: "Absent in register's user lists." }),
  }),
  date_joined: field({
    from: ['date_joined'],
    js: (user) => formatDateJoined(user.dateJoined),
    sql: () => sql`CASE WHEN users.date_joined >= '0001-01-01T00:00:00Z' AND users.date_joined < '10000-01-01T00:00:00Z'
      THEN '"' || to_char(users.date_joined AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI') || '+00:00"' END`,
    unknown: () => '1970-01-01T00:00:00+00:00',
    schema: Type.String({ description: 'UTC, ISO 8601 to the minute, e.g. 2024-01-02T03:04+00:00.' }),
  }),
  delivery_email: field({
    from: ['delivery_email', ...VISIBILITY_COLUMNS],
    js: (user, { viewer }) => (canSeeDeliveryEmail(viewer, user) ? user.deliveryEmail : null),
    sql: ({ viewer }) => sql`CASE WHEN ${emailVisibleSql(viewer)} THEN to_json(users.delivery_email)::text ELSE 'null' END`,
    unknown: () => null,
    schema: Type.Union([Type.String(), Type.Null()], { description: 'The real address, or null when hidden from the caller.' }),
  }),
  avatar_url: field({
    from: ['realm_id', 'delivery_email', 'avatar_source', 'avatar_version', ...VISIBILITY_COLUMNS],
    js: (user, { viewer, options, config }) => avatarUrl(user, options.clientGravatar, canSeeDeliveryEmail(viewer, user), config),
    sql: avatarUrlSql,
    unknown: (): string | null => UNKNOWN_USER_AVATAR,
    schema: Type.Union([Type.String(), Type.Null()], { description: 'null for Gravatar users when client_gravatar is true.' }),
  }),
  is_imported_stub: stored('is_imported_stub', { unknown: () => false, schema: Type.Boolean() }),
  is_deleted: field({
    from: ['is_deleted'],
    js: () => true as const,
    sql: () => sql`'true'`,
    only: 'deleted',
    schema: Type.Literal(true, { description: 'Present only for permanently deleted users.' }),
  }),
  bot_type: stored('bot_type', {
    only: 'bots',
    schema: Type.Integer({ description: 'Bots only: 1 generic, 2 incoming webhook, 3 outgoing webhook, 4 embedded.' }),
  }),
  bot_owner_id: stored('bot_owner_id', { only: 'bots', schema: Type.Union([Type.Integer(), Type.Null()], { description: 'Bots only.' }) }),
  profile_data: field({
    from: [],
    js: (user) => buildProfileData(user.profileValues ?? []),
    sql: profileDataSql,
    only: 'humans',
    shown: (options: UserObjectOptions) => options.includeCustomProfileFields,
    unknown: () => ({}),
    schema: Type.Record(
      Type.String(),
      Type.Object({
        value: Type.String(),
        rendered_value: Type.Optional(Type.String({ description: 'HTML, for Markdown field types.' })),
      }),
      { description: 'Humans only, when include_custom_profile_fields is true: custom profile field id → value.' },
    ),
  }),
};

type Fields = typeof USER_FIELDS;
type OptionalKey = { [K in keyof Fields]: Fields[K] extends { only: string } | { shown: object } ? K : never }[keyof Fields];
/** The users columns the user object reads. */
export type UserColumn = Fields[keyof Fields]['from'][number];

/** A user as the statements load it (users.repository.ts): the columns USER_FIELDS reads. */
export type UserRecord = Pick<StoredUser, Camel<UserColumn>> & Loaded;

/** The user object of docs/api.md §2.11. */
export type ApiUser = { [K in Exclude<keyof Fields, OptionalKey>]: ReturnType<Fields[K]['js']> } & {
  [K in OptionalKey]?: ReturnType<Fields[K]['js']>;
};

const FIELD_LIST = Object.entries(USER_FIELDS) as [keyof Fields, Field<UserColumn, unknown>][];

/** The columns USER_FIELDS reads, each once, with the record's name of each. */
export const USER_COLUMNS: readonly UserColumn[] = [...new Set(FIELD_LIST.flatMap(([, declaration]) => declaration.from))];
const RECORD_KEYS = USER_COLUMNS.map((column) => [column, recordKey(column)] as const);

/** The record of a row of USER_COLUMNS (and what the load added), in the row's column names. */
export function userRecordOf(row: { [C in UserColumn]: Selectable<Users>[C] }, loaded: Loaded = {}): UserRecord {
  const record: Record<string, unknown> = {};
  for (const [column, key] of RECORD_KEYS) record[key] = row[column];
  return Object.assign(record as unknown as UserRecord, loaded);
}

/** The user object's keys as documented, in the order they are sent (users.schemas.ts). */
export const USER_OBJECT_PROPERTIES = Object.fromEntries(
  FIELD_LIST.map(([key, { only, shown, schema }]) => [key, only === undefined && shown === undefined ? schema : Type.Optional(schema)]),
);

/** The keys sent with these options, in order (one list per combination of the options). */
const shownFields = (() => {
  const lists: (typeof FIELD_LIST)[] = [];
  return (options: UserObjectOptions) => {
    const index = (options.clientGravatar ? 1 : 0) + (options.includeCustomProfileFields ? 2 : 0) + (options.omitIsActive ? 4 : 0);
    return (lists[index] ??= FIELD_LIST.filter(([, declaration]) => declaration.shown?.(options) ?? true));
  };
})();

const contextOf = (viewer: UserViewer, options: UserObjectOptions, config: UserObjectConfig) => {
  return { viewer, options, config, fakeDomain: fakeEmailDomain(viewer.realmSubdomain, config) };
};

/** The user object of docs/api.md §2.11 for this viewer, keys in the required order. */
export function buildUserObject(viewer: UserViewer, target: UserRecord, options: UserObjectOptions, config: UserObjectConfig): ApiUser {
  const context = contextOf(viewer, options, config);
  const user: Record<string, unknown> = {};
  for (const [key, declaration] of shownFields(options)) {
    if (declaration.only === undefined || ROW_CONDITIONS[declaration.only].js(target)) user[key] = declaration.js(target, context);
  }
  return user as ApiUser;
}

/** Stand-in for a user the viewer may not access (docs/api.md §2.11), keys in the required order. */
export function buildInaccessibleUserPlaceholder(
  viewer: UserViewer,
  userId: number,
  config: UserObjectConfig,
  options: Pick<UserObjectOptions, 'omitIsActive'> = {},
): ApiUser {
  const shown = { clientGravatar: false, includeCustomProfileFields: true, ...options };
  const context = contextOf(viewer, shown, config);
  const user: Record<string, unknown> = {};
  for (const [key, declaration] of shownFields(shown)) if (declaration.unknown) user[key] = declaration.unknown(userId, context);
  return user as ApiUser;
}

/** buildUserObject's JSON text, over the row `users`; NULL for a user only buildUserObject can build. */
export function userJsonSql(viewer: UserViewer, options: UserObjectOptions, config: UserObjectConfig): RawBuilder<string | null> {
  const context = contextOf(viewer, options, config);
  // Adjacent keys sent for the same users share one CASE WHEN; adjacent constants of one caseOf, one CASE.
  const pieces: { only?: keyof typeof ROW_CONDITIONS; texts: RawBuilder<unknown>[]; cases?: Cases }[] = [];
  for (const [index, [key, declaration]] of shownFields(options).entries()) {
    const prefix = `${index === 0 ? '{' : ','}"${key}":`;
    const value = declaration.sql(context);
    const last = pieces.at(-1);
    if ('caseOf' in value) {
      const merged = last?.cases?.caseOf === value.caseOf;
      const texts = value.texts.map(([when, text], i) => [when, `${merged ? last.cases!.texts[i]![1] : ''}${prefix}${text}`] as const);
      if (merged) last.cases = { caseOf: value.caseOf, texts };
      else pieces.push({ texts: [], cases: { caseOf: value.caseOf, texts } });
    } else if (last && !last.cases && last.only === declaration.only) last.texts.push(sql`${sql.lit(prefix)} || ${value}`);
    else pieces.push({ only: declaration.only, texts: [sql`${sql.lit(prefix)} || ${value}`] });
  }
  if (pieces[0]!.only) throw new Error('the first key of the user object must always be sent');
  const pieceSql = ({ only, texts, cases }: (typeof pieces)[number]) => {
    const text = cases ? casesSql(cases) : sql.join(texts, sql` || `);
    return only ? sql`CASE WHEN ${ROW_CONDITIONS[only].sql} THEN ${text} ELSE '' END` : text;
  };
  // Any NULL makes the whole text NULL.
  return sql<string | null>`${sql.join(pieces.map(pieceSql), sql` || `)} || '}'`;
}

/** The default avatar (a gravatar, or the server's default image). */
export const GRAVATAR_SOURCE = 'G';
const UPLOADED_SOURCE = 'U';
const UNKNOWN_USER_AVATAR = '/static/images/unknown-user-avatar.png';

/** `2024-01-02T03:04+00:00`: UTC, truncated to minutes (docs/api.md §2.11). */
export function formatDateJoined(date: Date): string {
  // Built from the UTC fields: toISOString was a measurable part of GET /users/{id} (bench/).
  const month = twoDigits(date.getUTCMonth() + 1);
  const day = twoDigits(date.getUTCDate());
  const time = `${twoDigits(date.getUTCHours())}:${twoDigits(date.getUTCMinutes())}`;
  return `${String(date.getUTCFullYear()).padStart(4, '0')}-${month}-${day}T${time}+00:00`;
}

const twoDigits = (value: number): string => (value < 10 ? `0${value}` : String(value));

/** First 40 hex digits of SHA-256 of "<user_id>:<avatar_version>:<salt>" (docs/api.md §2.5 row 2). */
export function uploadedAvatarHash(userId: number, avatarVersion: number, salt: string): string {
  return createHash('sha256').update(`${userId}:${avatarVersion}:${salt}`, 'utf8').digest('hex').slice(0, 40);
}

/**
 * docs/api.md §2.5, rows in order. `deliveryEmailVisible` is whether the viewer may see the address.
 * `medium`: Zulip's medium size (avatar_url_medium): `&s=500` for a gravatar, `-medium.png` uploaded.
 */
export function avatarUrl(
  target: Pick<StoredUser, 'id' | 'realmId' | 'deliveryEmail' | 'avatarSource' | 'avatarVersion'>,
  clientGravatar: boolean,
  deliveryEmailVisible: boolean,
  config: Pick<Config, 'enableGravatar' | 'defaultAvatarUri' | 'avatarSalt'>,
  medium = false,
): string | null {
  if (clientGravatar && deliveryEmailVisible && config.enableGravatar && target.avatarSource === GRAVATAR_SOURCE) return null;
  if (target.avatarSource === UPLOADED_SOURCE) {
    const hash = uploadedAvatarHash(target.id, target.avatarVersion, config.avatarSalt);
    return `/user_avatars/${target.realmId}/${hash}${medium ? '-medium' : ''}.png`;
  }
  if (config.enableGravatar) {
    const hash = createHash('md5').update(target.deliveryEmail.toLowerCase(), 'utf8').digest('hex');
    return `https://secure.gravatar.com/avatar/${hash}?d=identicon${medium ? '&s=500' : ''}&version=${target.avatarVersion}`;
  }
  const separator = config.defaultAvatarUri.includes('?') ? '&' : '?';
  return `${config.defaultAvatarUri}${separator}version=${target.avatarVersion}`;
}

/** avatarUrl (not medium) row by row; NULL for a Gravatar of a non-ASCII address (JavaScript lowercases it by Unicode's rules). */
function avatarUrlSql({ viewer, options, config }: Context) {
  const separator = config.defaultAvatarUri.includes('?') ? '&' : '?';
  return sql`CASE
    WHEN ${sql`${options.clientGravatar && config.enableGravatar}::boolean`} AND ${emailVisibleSql(viewer)} AND users.avatar_source = ${sql.lit(GRAVATAR_SOURCE)} THEN 'null'
    WHEN users.avatar_source = ${sql.lit(UPLOADED_SOURCE)} THEN '"/user_avatars/' || users.realm_id || '/'
      || left(encode(sha256(convert_to(users.id || ':' || users.avatar_version || ':' || ${text(config.avatarSalt)}, 'UTF8')), 'hex'), 40) || '.png"'
    WHEN ${sql`${config.enableGravatar}::boolean`} THEN CASE WHEN octet_length(users.delivery_email) = length(users.delivery_email)
      THEN '"https://secure.gravatar.com/avatar/' || md5(lower(users.delivery_email COLLATE "C"))
        || '?d=identicon&version=' || users.avatar_version || '"' END
    ELSE to_json(${text(`${config.defaultAvatarUri}${separator}version=`)} || users.avatar_version)::text
  END`;
}

/** profile_data: keyed by field id as a string; rendered_value only for the Markdown types. */
export function buildProfileData(values: readonly ProfileFieldValue[]) {
  const data: Record<string, { value: string; rendered_value?: string }> = {};
  for (const field of values) {
    data[String(field.fieldId)] = MARKDOWN_PROFILE_FIELD_TYPES.has(field.fieldType)
      ? { value: field.value, rendered_value: field.renderedValue ?? renderMarkdown(field.value) }
      : { value: field.value };
  }
  return data;
}

/**
 * buildProfileData row by row: keys ascending, as JavaScript orders integer keys. A Markdown value
 * stored without its HTML gives NULL (renderMarkdown renders it).
 */
function profileDataSql() {
  const markdown = sql`f.field_type = ANY(${[...MARKDOWN_PROFILE_FIELD_TYPES]}::smallint[])`;
  return sql`(SELECT CASE
      WHEN count(*) = 0 THEN '{}'
      WHEN bool_or(${markdown} AND v.rendered_value IS NULL) THEN NULL
      ELSE '{' || string_agg('"' || v.field_id || '":{"value":' || to_json(v.value)::text
        || CASE WHEN ${markdown} THEN ',"rendered_value":' || to_json(v.rendered_value)::text ELSE '' END
        || '}', ',' ORDER BY v.field_id) || '}'
    END
    FROM custom_profile_field_values v JOIN custom_profile_fields f ON f.id = v.field_id
    WHERE v.user_id = users.id AND v.realm_id = users.realm_id)`;
}
