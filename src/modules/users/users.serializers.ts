import { createHash } from 'node:crypto';
import type { Config } from '../../config.js';
import { fakeEmailDomain } from '../../lib/hosts.js';
import { renderMarkdown } from '../../lib/markdown.js';
import { EMAIL_ADDRESS_VISIBILITY, MARKDOWN_PROFILE_FIELD_TYPES, ROLES } from '../../zulip.js';
import { canSeeDeliveryEmail, effectiveVisibility, type UserViewer, type VisibilityTarget } from './users.access.js';

/** The user object of docs/api.md §2.11 and the inaccessible-user placeholder, built without I/O. */

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

/** A user as loaded from the database (see users.repository.ts). */
export interface UserRecord extends VisibilityTarget {
  realmId: number;
  deliveryEmail: string;
  fullName: string;
  dateJoined: Date;
  role: number;
  botOwnerId: number | null;
  timezone: string;
  avatarSource: string;
  avatarVersion: number;
  isImportedStub: boolean;
  isDeleted: boolean;
  /** Loaded only when profile data was requested. */
  profileValues?: ProfileFieldValue[];
  /** Loaded only for restricted viewers (docs/api.md §2.4). */
  sharesActiveChannelWithViewer?: boolean;
}

export interface UserObjectOptions {
  clientGravatar: boolean;
  includeCustomProfileFields: boolean;
  /** register's realm_users / realm_non_active_users leave is_active out (docs/api.md §3.12). */
  omitIsActive?: boolean;
}

export interface ApiProfileValue {
  value: string;
  rendered_value?: string;
}

export interface ApiUser {
  email: string;
  user_id: number;
  avatar_version: number;
  is_admin: boolean;
  is_owner: boolean;
  is_guest: boolean;
  role: number;
  is_bot: boolean;
  full_name: string;
  timezone: string;
  is_active?: boolean;
  date_joined: string;
  delivery_email: string | null;
  avatar_url: string | null;
  is_imported_stub: boolean;
  is_deleted?: true;
  bot_type?: number;
  bot_owner_id?: number | null;
  profile_data?: Record<string, ApiProfileValue>;
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

const dummyEmail = (userId: number, fakeDomain: string): string => `user${userId}@${fakeDomain}`;

/** The API email: real only when the address is public, for every viewer (docs/api.md §2.3). */
function apiEmail(target: UserRecord, fakeDomain: string): string {
  return effectiveVisibility(target) === EMAIL_ADDRESS_VISIBILITY.everyone ? target.deliveryEmail : dummyEmail(target.id, fakeDomain);
}

/** First 40 hex digits of SHA-256 of "<user_id>:<avatar_version>:<salt>" (docs/api.md §2.5 row 2). */
export function uploadedAvatarHash(userId: number, avatarVersion: number, salt: string): string {
  return createHash('sha256').update(`${userId}:${avatarVersion}:${salt}`, 'utf8').digest('hex').slice(0, 40);
}

/**
 * docs/api.md §2.5, rows in order. `deliveryEmailVisible` is whether the viewer may see the address.
 * `medium`: Zulip's medium size (avatar_url_medium): `&s=500` for a gravatar, `-medium.png` uploaded.
 */
export function avatarUrl(
  target: Pick<UserRecord, 'id' | 'realmId' | 'deliveryEmail' | 'avatarSource' | 'avatarVersion'>,
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

/** profile_data: keyed by field id as a string; rendered_value only for the Markdown types. */
export function buildProfileData(values: readonly ProfileFieldValue[]): Record<string, ApiProfileValue> {
  const data: Record<string, ApiProfileValue> = {};
  for (const field of values) {
    data[String(field.fieldId)] = MARKDOWN_PROFILE_FIELD_TYPES.has(field.fieldType)
      ? { value: field.value, rendered_value: field.renderedValue ?? renderMarkdown(field.value) }
      : { value: field.value };
  }
  return data;
}

/** The user object of docs/api.md §2.11 for this viewer, keys in the required order. */
export function buildUserObject(viewer: UserViewer, target: UserRecord, options: UserObjectOptions, config: UserObjectConfig): ApiUser {
  const emailVisible = canSeeDeliveryEmail(viewer, target);
  const isBot = target.botType !== null;
  return {
    email: apiEmail(target, fakeEmailDomain(viewer.realmSubdomain, config)),
    user_id: target.id,
    avatar_version: target.avatarVersion,
    is_admin: target.role === ROLES.owner || target.role === ROLES.admin,
    is_owner: target.role === ROLES.owner,
    is_guest: target.role === ROLES.guest,
    role: target.role,
    is_bot: isBot,
    full_name: target.fullName,
    timezone: target.timezone,
    ...(options.omitIsActive ? {} : { is_active: target.isActive }),
    date_joined: formatDateJoined(target.dateJoined),
    delivery_email: emailVisible ? target.deliveryEmail : null,
    avatar_url: avatarUrl(target, options.clientGravatar, emailVisible, config),
    is_imported_stub: target.isImportedStub,
    ...(target.isDeleted ? { is_deleted: true as const } : {}),
    ...(isBot
      ? { bot_type: target.botType!, bot_owner_id: target.botOwnerId }
      : options.includeCustomProfileFields
        ? { profile_data: buildProfileData(target.profileValues ?? []) }
        : {}),
  };
}

/** Stand-in for a user the viewer may not access (docs/api.md §2.11), keys in the required order. */
export function buildInaccessibleUserPlaceholder(
  viewer: UserViewer,
  userId: number,
  config: UserObjectConfig,
  options: Pick<UserObjectOptions, 'omitIsActive'> = {},
): ApiUser {
  return {
    email: dummyEmail(userId, fakeEmailDomain(viewer.realmSubdomain, config)),
    user_id: userId,
    avatar_version: 1,
    is_admin: false,
    is_owner: false,
    is_guest: false,
    role: ROLES.member,
    is_bot: false,
    full_name: 'Unknown user',
    timezone: '',
    ...(options.omitIsActive ? {} : { is_active: true }),
    date_joined: '1970-01-01T00:00:00+00:00',
    delivery_email: null,
    avatar_url: UNKNOWN_USER_AVATAR,
    is_imported_stub: false,
    profile_data: {},
  };
}
