import { domainToASCII } from 'node:url';
import { badRequest } from '../../http/errors.js';

/** Zulip's checks of a user's name, address and password (check_full_name, CreateUserForm, check_password_strength). */

const MAX_NAME_LENGTH = 100;
const MAX_EMAIL_LENGTH = 254;
/** Zulip's production PASSWORD_MIN_LENGTH (its zxcvbn guess count is not reproduced). */
export const PASSWORD_MIN_LENGTH = 6;

// UserProfile.NAME_INVALID_CHARS.
const NAME_INVALID_CHARS = new Set(['*', '`', '\\', '>', '"', '@']);

/** Control (Cc) and surrogate (Cs) code points, and Unicode non-characters. */
function isInvalidNameCodePoint(char: string): boolean {
  if (NAME_INVALID_CHARS.has(char)) return true;
  const code = char.codePointAt(0)!;
  if (/\p{Cc}|\p{Cs}/u.test(char)) return true;
  return (code >= 0xfdd0 && code <= 0xfdef) || (code & 0xfffe) === 0xfffe;
}

/** check_full_name: the stripped name, or Zulip's error (docs/management-api.md U.3 row 4). */
export function checkFullName(raw: string): string {
  const name = raw.trim();
  if ([...name].length > MAX_NAME_LENGTH) throw badRequest('Name too long!');
  if (name === '') throw badRequest('Name must not be empty!');
  if ([...name].some(isInvalidNameCodePoint)) throw badRequest('Invalid characters in name!');
  if (/\|\d+$/.test(raw)) throw badRequest('Invalid format!');
  return name;
}

// Django's EmailValidator: a dot-atom or quoted local part; a domain of labels with a TLD.
const USER_PART =
  // eslint-disable-next-line no-control-regex -- Django's quoted-string rule names control characters.
  /^([-!#$%&'*+/=?^_`{}|~0-9A-Z]+(\.[-!#$%&'*+/=?^_`{}|~0-9A-Z]+)*|"([\x01-\x08\x0b\x0c\x0e-\x1f!#-[\]-\x7f]|\\[\x01-\x09\x0b\x0c\x0d-\x7f])*")$/i;
const DOMAIN_PART = /^((?:[A-Z0-9](?:[A-Z0-9-]{0,61}[A-Z0-9])?\.)+)(?:[A-Z0-9-]{2,63}(?<!-))$/i;

/** Whether Django's EmailField (CreateUserForm) accepts the address. */
export function isValidEmail(email: string): boolean {
  if (email.length > MAX_EMAIL_LENGTH || !email.includes('@')) return false;
  const at = email.lastIndexOf('@');
  const user = email.slice(0, at);
  const domain = email.slice(at + 1);
  if (!USER_PART.test(user)) return false;
  if (domain === 'localhost') return true;
  // An internationalized domain is checked in its ASCII form, as Django does ('' when it has none).
  return DOMAIN_PART.test(domainToASCII(domain));
}

/** normalize_email: the domain lower-cased, the local part as given. */
export function normalizeEmail(email: string): string {
  const at = email.lastIndexOf('@');
  return `${email.slice(0, at)}@${email.slice(at + 1).toLowerCase()}`;
}

/** check_password_strength's length part: empty or shorter than PASSWORD_MIN_LENGTH. */
export const isPasswordTooWeak = (password: string): boolean => [...password].length < PASSWORD_MIN_LENGTH;
