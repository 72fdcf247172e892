/**
 * Facts of the Zulip API this server reproduces, each declared once: the numbers clients and the
 * database share, which Zulip fixes and this server must not choose differently in two places.
 */

/** The Zulip API feature level served (docs/api.md §3.1): clients decide which features to use by it. */
export const ZULIP_FEATURE_LEVEL = 490;

/** The Zulip version served when ZULIP_VERSION is not set: the release of that feature level. */
export const DEFAULT_ZULIP_VERSION = '12.0-dev';

/** Zulip's role numbers (users.role): lower is more privileged, as Zulip compares them. */
export const ROLES = { owner: 100, admin: 200, moderator: 300, member: 400, guest: 600 } as const;

/** Zulip's email_address_visibility values: who may see a user's real address (docs/api.md §2.3). */
export const EMAIL_ADDRESS_VISIBILITY = { everyone: 1, members: 2, admins: 3, nobody: 4, moderators: 5 } as const;

/** Zulip's custom profile field types (custom_profile_fields.field_type). */
export const PROFILE_FIELD_TYPES = {
  short_text: 1,
  long_text: 2,
  select: 3,
  date: 4,
  url: 5,
  user: 6,
  external_account: 7,
  pronouns: 8,
} as const;

/** The field types whose values are Markdown and carry a rendered_value, as in Zulip. */
export const MARKDOWN_PROFILE_FIELD_TYPES: ReadonlySet<number> = new Set([PROFILE_FIELD_TYPES.short_text, PROFILE_FIELD_TYPES.long_text]);

/** The largest id: ids are PostgreSQL `integer`s, and a larger one bound to a statement would fail it. */
const MAX_ID = 2_147_483_647;

/** Whether `id` can name a row: a positive integer within PostgreSQL's `integer` range. */
export const isIdInRange = (id: number): boolean => Number.isSafeInteger(id) && id >= 1 && id <= MAX_ID;
