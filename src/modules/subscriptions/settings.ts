import Type, { type TSchema } from 'typebox';
import type { Subscriptions } from '../../db/types.js';

/**
 * The subscription settings clients may change (docs/api.md §2.8), declared once: the decoder, the
 * columns and statements, the events and the subscription object's keys and documentation are all
 * derived from this table, so a property added here reaches all of them.
 */

/** How a property's value is checked and stored: a hex colour (text) or a boolean. */
type ValueRule = 'color' | 'boolean';

interface SettingDeclaration {
  /** The subscriptions column that stores it. */
  column: keyof Subscriptions;
  rule: ValueRule;
  /** Stored as the opposite of the value sent (in_home_view is `NOT is_muted`). */
  inverted?: true;
  /** The column may hold null, sent as null: the user's default applies (a new subscription's value). */
  nullable?: true;
}

/** Property → how it is stored, in documentation order (the subscription object sorts them: SUBSCRIPTION_KEYS). */
const SETTINGS = {
  color: { column: 'color', rule: 'color' },
  is_muted: { column: 'is_muted', rule: 'boolean' },
  in_home_view: { column: 'is_muted', rule: 'boolean', inverted: true },
  pin_to_top: { column: 'pin_to_top', rule: 'boolean' },
  desktop_notifications: { column: 'desktop_notifications', rule: 'boolean', nullable: true },
  audible_notifications: { column: 'audible_notifications', rule: 'boolean', nullable: true },
  push_notifications: { column: 'push_notifications', rule: 'boolean', nullable: true },
  email_notifications: { column: 'email_notifications', rule: 'boolean', nullable: true },
  wildcard_mentions_notify: { column: 'wildcard_mentions_notify', rule: 'boolean', nullable: true },
} as const satisfies Record<string, SettingDeclaration>;

type Settings = typeof SETTINGS;

/** Property names clients may send. */
export type SettingProperty = keyof Settings;

/** Subscription columns the API can change. */
export type SettingColumn = Settings[SettingProperty]['column'];

type Setting = Settings[SettingProperty];

type RuleValue<R extends ValueRule> = R extends 'color' ? string : boolean;

/** Final values for one subscription; undefined columns stay as they are. */
export type SettingValues = { [P in SettingProperty as Settings[P]['column']]?: RuleValue<Settings[P]['rule']> };

/** A stored value as the reads return it and the subscription object sends it. */
type StoredValue<S extends Setting> = RuleValue<S['rule']> | (S extends { nullable: true } ? null : never);

/** The settings columns of a subscription row, as the reads select them (SETTING_COLUMNS). */
export type StoredSettings = { [P in SettingProperty as Settings[P]['column']]: StoredValue<Settings[P]> };

/** The settings as the subscription object sends them (docs/api.md §2.12). */
export type SentSettings = { [P in SettingProperty]: StoredValue<Settings[P]> };

export const SETTING_PROPERTIES = Object.keys(SETTINGS) as SettingProperty[];

/** The properties whose values are booleans. */
export const BOOLEAN_PROPERTIES = SETTING_PROPERTIES.filter((property) => SETTINGS[property].rule === 'boolean');

/** The property's declaration, or undefined for a name that is none (an own key: not `constructor`). */
export const settingOf = (property: string): Setting | undefined =>
  Object.hasOwn(SETTINGS, property) ? SETTINGS[property as SettingProperty] : undefined;

/** The columns, each once, in table order: the column lists of the statements. */
export const SETTING_COLUMNS: readonly SettingColumn[] = [...new Set(SETTING_PROPERTIES.map((property) => SETTINGS[property].column))];

/** The declaration of the property (the first, when two share it) stored in a column. */
const storedIn = (column: SettingColumn): Setting => SETTINGS[SETTING_PROPERTIES.find((property) => SETTINGS[property].column === column)!];

const SQL_TYPES = { color: 'text', boolean: 'boolean' } as const satisfies Record<ValueRule, string>;

/** The PostgreSQL type of each column (a json_to_recordset column list). */
export const settingSqlType = (column: SettingColumn): string => SQL_TYPES[storedIn(column).rule];

/**
 * A new subscription's stored settings but its colour, which is chosen: the columns' defaults in
 * the migrations, null for a nullable column, false for a boolean one (its subscription/add event).
 */
export const NEW_SUBSCRIPTION_SETTINGS = Object.fromEntries(
  SETTING_COLUMNS.filter((column) => column !== 'color').map((column) => [column, 'nullable' in storedIn(column) ? null : false]),
) as Omit<StoredSettings, 'color'>;

/** Reads the value the subscription object sends for a property from the stored row. */
export function sentValueReader<P extends SettingProperty>(property: P): (row: StoredSettings) => SentSettings[P] {
  const setting: Setting = SETTINGS[property];
  const { column } = setting;
  return 'inverted' in setting ? (row) => !row[column] as SentSettings[P] : (row) => row[column] as SentSettings[P];
}

/** What a value of each rule is documented as (a bulk entry's `value`). */
const VALUE_SCHEMAS: Record<ValueRule, () => TSchema> = {
  color: () => Type.String({ description: 'A hex colour, e.g. #76ce90.' }),
  boolean: () => Type.Boolean(),
};

/** A value of any property, as documented. */
export const settingValueSchema = (description: string): TSchema =>
  Type.Union(
    [...new Set(SETTING_PROPERTIES.map((property) => SETTINGS[property].rule))].map((rule) => VALUE_SCHEMAS[rule]()),
    { description },
  );

/** A stored column's update events, in order: those of the properties stored inverted in it first (in_home_view, then is_muted). */
export const COLUMN_EVENTS: ReadonlyMap<SettingColumn, readonly { property: SettingProperty; inverted: boolean }[]> = new Map(
  SETTING_COLUMNS.map((column) => {
    const properties = SETTING_PROPERTIES.filter((property) => SETTINGS[property].column === column);
    const isInverted = (property: SettingProperty) => 'inverted' in SETTINGS[property];
    return [
      column,
      [...properties.filter(isInverted), ...properties.filter((property) => !isInverted(property))].map((property) => ({
        property,
        inverted: isInverted(property),
      })),
    ];
  }),
);

/** How the subscription object documents each rule's value (as sent, not as written). */
const SENT_SCHEMAS: Record<ValueRule, (description?: string) => TSchema> = {
  color: () => Type.String({ description: 'Hex colour, e.g. #76ce90.' }),
  boolean: (description) => Type.Boolean(description === undefined ? {} : { description }),
};

/** A property's value in the subscription object, as documented (subscriptions.schemas.ts). */
export function sentValueSchema(property: SettingProperty): TSchema {
  const setting: Setting = SETTINGS[property];
  if ('nullable' in setting)
    return Type.Union([SENT_SCHEMAS[setting.rule](), Type.Null()], { description: 'null: the user default applies.' });
  return SENT_SCHEMAS[setting.rule]('inverted' in setting ? `Legacy: the opposite of ${setting.column}.` : undefined);
}
