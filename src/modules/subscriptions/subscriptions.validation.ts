import { type ApiError, badRequest } from '../../http/errors.js';
import { checkDict, checkInteger, checkString, keyPath, requireKey } from '../../http/params.js';
import { type SettingColumn, type SettingProperty, settingOf } from './settings.js';

/**
 * The property/value rules of the subscription-setting endpoints (docs/api.md §2.8), shared by the bulk
 * endpoint (docs/api.md §3.2 checks a–e) and the single-channel endpoint (docs/api.md §3.3). Pure: no database.
 */

// JavaScript's `$` (without the m flag) does not match before a trailing newline, unlike Python's.
export const HEX_COLOR = /^#[0-9a-fA-F]{3,6}$/;

/** One requested change, checked against the property rules. */
export interface SettingChange {
  streamId: number;
  property: SettingProperty;
  /** The value as requested (what the events carry for `property`). */
  value: string | boolean;
  /** The stored column and value (an inverted property, in_home_view, is stored as is_muted = !value). */
  column: SettingColumn;
  stored: string | boolean;
}

/**
 * Applies the value rule of `property` (docs/api.md §2.8). `colorErrorPrefix` is the bulk endpoint's
 * `Invalid subscription_data[i]: Value error, `; the single-channel endpoint has none.
 */
export function checkSettingChange(streamId: number, property: string, value: unknown, colorErrorPrefix = ''): SettingChange {
  const setting = settingOf(property);
  if (!setting) throw badRequest(`Unknown subscription property: ${property}`);
  const known = property as SettingProperty;
  if (setting.rule === 'color') {
    if (typeof value !== 'string' || !HEX_COLOR.test(value)) {
      throw badRequest(`${colorErrorPrefix}${property} is not a valid hex color code`);
    }
    return { streamId, property: known, value, column: setting.column, stored: value };
  }
  if (typeof value !== 'boolean') throw badRequest(`${property} is not a boolean`);
  return { streamId, property: known, value, column: setting.column, stored: 'inverted' in setting ? !value : value };
}

/** Checks a–e of one bulk entry (docs/api.md §3.2), in order; throws the entry's first failure. */
function checkBulkEntry(entry: unknown, index: number): SettingChange {
  const name = `subscription_data[${index}]`;
  const object = checkDict(entry, name);
  const streamId = checkInteger(requireKey(object, 'stream_id', name), keyPath(name, 'stream_id'));
  const property = checkString(requireKey(object, 'property', name), keyPath(name, 'property'));
  const value = requireKey(object, 'value', name);
  return checkSettingChange(streamId, property, value, `Invalid ${name}: Value error, `);
}

export interface CheckedBulkEntries {
  /** The entries before the first structurally invalid one, all of them when none is. */
  changes: SettingChange[];
  /** The error of entry `changes.length`, if that entry failed checks a–e. */
  shapeError?: ApiError;
}

/**
 * Runs checks a–e over the list up to the first failing entry. Entries before it may still fail
 * the channel checks f–g, which take precedence because their index is lower.
 */
export function checkBulkEntries(entries: unknown[]): CheckedBulkEntries {
  const changes: SettingChange[] = [];
  for (const [index, entry] of entries.entries()) {
    try {
      changes.push(checkBulkEntry(entry, index));
    } catch (error) {
      return { changes, shapeError: error as ApiError };
    }
  }
  return { changes };
}

/** Single-channel `value` (docs/api.md §3.3): JSON true/false is a boolean, anything else the raw text. */
export function parseSingleValue(raw: string): string | boolean {
  try {
    const parsed: unknown = JSON.parse(raw);
    if (typeof parsed === 'boolean') return parsed;
  } catch {
    // not JSON: a string value
  }
  return raw;
}
