import Type, { type TSchema } from 'typebox';
import type { Subscriptions } from '../../db/types.js';

/**
 * The subscription settings clients may change (spec §2.8), declared once. Everything else is
 * derived from this table when the modules load: the documented property list, the value rules of
 * the decoder, the columns, their SQL types and the column lists of the statements that read and
 * write them, and the events of a change. A property added here reaches all of them.
 */

/** How a property's value is checked and stored: a hex colour (text) or a boolean. */
type ValueRule = 'color' | 'boolean';

interface SettingDeclaration {
  /** The subscriptions column that stores it. */
  column: keyof Subscriptions;
  rule: ValueRule;
  /** Stored as the opposite of the value sent (in_home_view is `NOT is_muted`). */
  inverted?: true;
}

/** Property → how it is stored, in the order the documentation lists them. */
const SETTINGS = {
  color: { column: 'color', rule: 'color' },
  is_muted: { column: 'is_muted', rule: 'boolean' },
  in_home_view: { column: 'is_muted', rule: 'boolean', inverted: true },
  pin_to_top: { column: 'pin_to_top', rule: 'boolean' },
  desktop_notifications: { column: 'desktop_notifications', rule: 'boolean' },
  audible_notifications: { column: 'audible_notifications', rule: 'boolean' },
  push_notifications: { column: 'push_notifications', rule: 'boolean' },
  email_notifications: { column: 'email_notifications', rule: 'boolean' },
  wildcard_mentions_notify: { column: 'wildcard_mentions_notify', rule: 'boolean' },
} as const satisfies Record<string, SettingDeclaration>;

type Settings = typeof SETTINGS;

/** Property names clients may send. */
export type SettingProperty = keyof Settings;

/** Subscription columns the API can change. */
export type SettingColumn = Settings[SettingProperty]['column'];

/** A property's declaration. */
export type Setting = Settings[SettingProperty];

type RuleValue<R extends ValueRule> = R extends 'color' ? string : boolean;

/** Final values for one subscription; undefined columns stay as they are. */
export type SettingValues = { [P in SettingProperty as Settings[P]['column']]?: RuleValue<Settings[P]['rule']> };

export const SETTING_PROPERTIES = Object.keys(SETTINGS) as SettingProperty[];

/** The properties whose values are booleans. */
export const BOOLEAN_PROPERTIES = SETTING_PROPERTIES.filter((property) => SETTINGS[property].rule === 'boolean');

/** The property's declaration, or undefined for a name that is none (an own key: not `constructor`). */
export const settingOf = (property: string): Setting | undefined =>
  Object.hasOwn(SETTINGS, property) ? SETTINGS[property as SettingProperty] : undefined;

/** The columns, each once, in table order: the column lists of the statements. */
export const SETTING_COLUMNS: readonly SettingColumn[] = [...new Set(SETTING_PROPERTIES.map((property) => SETTINGS[property].column))];

const SQL_TYPES = { color: 'text', boolean: 'boolean' } as const satisfies Record<ValueRule, string>;

/** The PostgreSQL type of each column (a json_to_recordset column list). */
export const settingSqlType = (column: SettingColumn): string =>
  SQL_TYPES[SETTINGS[SETTING_PROPERTIES.find((property) => SETTINGS[property].column === column)!].rule];

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
