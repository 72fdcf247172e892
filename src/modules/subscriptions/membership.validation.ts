import Type from 'typebox';
import { badRequest } from '../../http/errors.js';
import { isStorableInJson } from '../../lib/text.js';
import {
  checkDict,
  checkInteger,
  checkList,
  checkString,
  jsonTextKind,
  keyPath,
  type Kind,
  MESSAGES,
  parseJson,
  requireKey,
} from '../../http/params.js';
import { HEX_COLOR } from './subscriptions.validation.js';

/**
 * The parameters of subscribing and unsubscribing and Zulip's channel-name rules
 * (docs/management-api.md, "Subscriptions"). Pure: no database.
 */

/** Channels one request may name, and users it may name in `principals` (Zulip sets no bound). */
export const MAX_CHANNELS_PER_REQUEST = 1000;
export const MAX_PRINCIPALS = 1000;

/** Zulip's Stream.MAX_NAME_LENGTH and MAX_DESCRIPTION_LENGTH. */
const MAX_NAME_LENGTH = 60;
const MAX_DESCRIPTION_LENGTH = 1024;

/** One entry of POST's `subscriptions`. */
export interface ChannelRequest {
  name: string;
  description?: string;
  color?: string;
}

/** `principals`: user ids, or API emails (a mixed list is refused, as by Zulip's `list[str] | list[int]`). */
export type Principals = { ids: number[] } | { emails: string[] };

function listOfAtMost(raw: string, name: string, limit: number): unknown[] {
  const list = checkList(parseJson(raw, name), name);
  if (list.length > limit) throw badRequest(MESSAGES.tooManyItems(name, limit));
  return list;
}

/**
 * POST's `subscriptions`: objects with a string `name`, an optional `description` (at most 1,024
 * characters, null as absent) and an optional `color` (a hex colour); other keys are ignored.
 * Zulip's pydantic messages: a non-object entry is "Invalid subscriptions[0]: Input should be a
 * valid dictionary or instance of AddSubscriptionData".
 */
export const channelRequests: Kind<ChannelRequest[]> = jsonTextKind(
  Type.Array(
    Type.Object({
      name: Type.String(),
      // null is taken as absent.
      description: Type.Optional(Type.Union([Type.String({ maxLength: MAX_DESCRIPTION_LENGTH }), Type.Null()])),
      color: Type.Optional(Type.Union([Type.String(), Type.Null()])),
    }),
    { maxItems: MAX_CHANNELS_PER_REQUEST },
  ),
  (raw, name) =>
    listOfAtMost(raw, name, MAX_CHANNELS_PER_REQUEST).map((entry, index) => {
      const at = `${name}[${index}]`;
      if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) {
        throw badRequest(`Invalid ${at}: Input should be a valid dictionary or instance of AddSubscriptionData`);
      }
      const object = checkDict(entry, at);
      const request: ChannelRequest = { name: checkString(requireKey(object, 'name', at), keyPath(at, 'name')) };
      if (object.color !== undefined && object.color !== null) {
        const color = checkString(object.color, keyPath(at, 'color'));
        if (!HEX_COLOR.test(color)) throw badRequest(`Invalid ${at}: Value error, add.color is not a valid hex color code`);
        request.color = color;
      }
      if (object.description !== undefined && object.description !== null) {
        const description = checkString(object.description, keyPath(at, 'description'));
        if (!isStorableInJson(description)) throw badRequest(`Invalid characters in ${keyPath(at, 'description')}`);
        if ([...description].length > MAX_DESCRIPTION_LENGTH)
          throw badRequest(MESSAGES.tooManyCharacters(keyPath(at, 'description'), MAX_DESCRIPTION_LENGTH));
        request.description = description;
      }
      return request;
    }),
);

/** DELETE's `subscriptions`: channel names. */
export const channelNames: Kind<string[]> = jsonTextKind(Type.Array(Type.String(), { maxItems: MAX_CHANNELS_PER_REQUEST }), (raw, name) =>
  listOfAtMost(raw, name, MAX_CHANNELS_PER_REQUEST).map((item, index) => checkString(item, `${name}[${index}]`)),
);

/**
 * `principals`: all integers or all strings. Zulip names the failing branch by the first item:
 * `principals["list[str]"][0] is not a string` (an object first), `principals["list[int]"][1] is
 * not an integer` (an integer first).
 */
export const principals: Kind<Principals> = jsonTextKind(
  Type.Union([Type.Array(Type.Integer(), { maxItems: MAX_PRINCIPALS }), Type.Array(Type.String(), { maxItems: MAX_PRINCIPALS })]),
  (raw, name) => {
    const list = listOfAtMost(raw, name, MAX_PRINCIPALS);
    if (list.length > 0 && typeof list[0] === 'number') {
      return { ids: list.map((item, index) => checkInteger(item, `${name}["list[int]"][${index}]`)) };
    }
    return { emails: list.map((item, index) => checkString(item, `${name}["list[str]"][${index}]`)) };
  },
);

/** Zulip's check_string_is_printable: the 1-based position of the first control, surrogate or non-character, if any. */
function unprintablePosition(name: string): number | undefined {
  let position = 0;
  for (const char of name) {
    position++;
    const code = char.codePointAt(0)!;
    const nonCharacter = (code >= 0xfdd0 && code <= 0xfdef) || (code & 0xfffe) === 0xfffe;
    if (/\p{Cc}|\p{Cs}/u.test(char) || nonCharacter) return position;
  }
  return undefined;
}

/** Zulip's check_stream_name, on a name already stripped. */
export function checkChannelName(name: string): void {
  if (name.trim() === '') throw badRequest("Channel name can't be empty.");
  if ([...name].length > MAX_NAME_LENGTH) throw badRequest(`Channel name too long (limit: ${MAX_NAME_LENGTH} characters).`);
  const position = unprintablePosition(name);
  if (position !== undefined) throw badRequest(`Invalid character in channel name, at position ${position}.`);
}

/** Python's str.strip(): Unicode whitespace at both ends (JavaScript's trim() is close enough but misses a few). */
// eslint-disable-next-line no-control-regex -- Python counts the separators U+001C–U+001F as whitespace.
export const stripName = (name: string): string => name.replace(/^[\s\u001c-\u001f\u0085]+|[\s\u001c-\u001f\u0085]+$/gu, '');
