import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ApiError } from '../src/http/errors.js';
import Type from 'typebox';
import {
  checkBoolean,
  checkDict,
  checkInteger,
  checkList,
  checkString,
  decodeParameters,
  formParameters,
  jsonBoolean,
  jsonInteger,
  jsonList,
  jsonStringList,
  keyPath,
  optional,
  parseJson,
  requireKey,
  required,
  text,
  trimmedText,
} from '../src/http/params.js';
import { checkBulkEntries, checkSettingChange, parseSingleValue } from '../src/modules/subscriptions/subscriptions.validation.js';
import { BOOLEAN_PROPERTIES, SETTING_PROPERTIES } from '../src/modules/subscriptions/settings.js';

/**
 * Property-based tests of the parameter layer (docs/api.md §1.6): for arbitrary input every parser either
 * returns a value of its type or throws a 400 ApiError whose message is one of the docs/api.md §1.6 templates
 * for the <var> it was given. Anything else (a TypeError, a RangeError, a 500) is a bug.
 */

const RUNS = 400;

// --- Arbitrary raw parameter text: what a client can put in a form field or query value. ---

const SPECIAL_TEXTS = [
  '',
  ' ',
  '\t\n',
  'true',
  'false',
  ' true ',
  'True',
  'null',
  'NaN',
  'Infinity',
  '-Infinity',
  '1e400',
  '-1e400',
  '5',
  '5.0',
  '-0',
  '1.5',
  '"5"',
  '"true"',
  '9007199254740993',
  '-9007199254740993',
  '1e21',
  '99999999999999999999999',
  '[]',
  '{}',
  '[1,"a"]',
  '["a","b"]',
  '{"a":true}',
  '{"__proto__":true}',
  '{"constructor":1}',
  '[{"stream_id":100}]',
  '\u0000',
  'a\u0000b',
  '"\\u0000"',
  '["\\u0000"]',
  '\ud800',
  '"\\ud800"',
  '😀',
  '\u202e',
  '\ufeff',
  '[',
  '{"a":',
  '"',
  "' OR 1=1 --",
  '$1',
  '%',
  '_',
  '\\',
  ';',
  '--',
  '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]',
];

/** Code points across the whole range, lone surrogates and NUL included. */
const anyUnit = fc.oneof(
  fc.integer({ min: 0, max: 0x7f }).map((code) => String.fromCharCode(code)),
  fc.integer({ min: 0, max: 0xffff }).map((code) => String.fromCharCode(code)),
  fc.integer({ min: 0x10000, max: 0x10ffff }).map((code) => String.fromCodePoint(code)),
);

const rawText: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.constantFrom(...SPECIAL_TEXTS), weight: 3 },
  { arbitrary: fc.string({ unit: anyUnit, maxLength: 40 }), weight: 3 },
  { arbitrary: fc.string({ unit: 'grapheme', maxLength: 40 }), weight: 2 },
  { arbitrary: fc.json({ maxDepth: 3 }), weight: 4 },
  // JSON with surrounding whitespace, and truncated JSON.
  {
    arbitrary: fc.tuple(fc.constantFrom(' ', '\n', '\t', ''), fc.json({ maxDepth: 2 })).map(([space, json]) => `${space}${json}${space}`),
    weight: 1,
  },
  { arbitrary: fc.json({ maxDepth: 3 }).chain((json) => fc.nat(json.length).map((cut) => json.slice(0, cut))), weight: 1 },
  { arbitrary: fc.oneof(fc.integer(), fc.double(), fc.bigInt()).map(String), weight: 2 },
  { arbitrary: fc.array(fc.string({ maxLength: 5 }), { maxLength: 4 }).map((items) => JSON.stringify(items)), weight: 1 },
  // Long inputs: past the 500-character limits, and deep nesting.
  {
    arbitrary: fc.tuple(fc.constantFrom('a', ' ', '😀', 'é'), fc.integer({ min: 480, max: 2000 })).map(([unit, n]) => unit.repeat(n)),
    weight: 1,
  },
  { arbitrary: fc.integer({ min: 1, max: 5000 }).map((depth) => `${'['.repeat(depth)}${']'.repeat(depth)}`), weight: 1 },
);

const paramName = fc.oneof(fc.constantFrom('flag', 'subscription_data', 'event_types', 'x'), fc.string({ unit: anyUnit, maxLength: 12 }));

// --- The outcome of a parser: a value, a template error, or anything else (a failure). ---

type Outcome = { value: unknown } | { error: { status: number; code: string | null; msg: string; extra: Record<string, unknown> } };

/** Structural equality without recursion: parsed values may be nested thousands deep. */
function sameValue(left: unknown, right: unknown): boolean {
  const pending: [unknown, unknown][] = [[left, right]];
  while (pending.length > 0) {
    const [a, b] = pending.pop()!;
    if (Object.is(a, b)) continue;
    if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
    if (Array.isArray(a) !== Array.isArray(b)) return false;
    const keys = Object.keys(a);
    if (keys.length !== Object.keys(b).length) return false;
    for (const key of keys) {
      if (!Object.hasOwn(b, key)) return false;
      pending.push([(a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key]]);
    }
  }
  return true;
}

function expectOutcome(run: () => unknown, expected: Outcome): void {
  const actual = outcomeOf(run);
  if ('value' in expected && 'value' in actual) {
    expect(sameValue(actual.value, expected.value), 'parsed value').toBe(true);
  } else {
    expect(actual).toEqual(expected);
  }
}

function outcomeOf(run: () => unknown): Outcome {
  try {
    return { value: run() };
  } catch (error) {
    if (!(error instanceof ApiError)) throw new Error(`not an ApiError: ${String(error)}`, { cause: error });
    return { error: { status: error.statusCode, code: error.code, msg: error.message, extra: error.extra } };
  }
}

const bad = (msg: string): Outcome => ({ error: { status: 400, code: 'BAD_REQUEST', msg, extra: {} } });

/** The reference parse: JSON per RFC 8259 as docs/api.md says, or undefined when not JSON. */
function referenceJson(raw: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(raw) };
  } catch {
    return { ok: false };
  }
}

function expectedTyped(raw: string, name: string, kind: 'boolean' | 'integer' | 'list' | 'dict'): Outcome {
  const parsed = referenceJson(raw);
  if (!parsed.ok) return bad(`${name} is not valid JSON`);
  const value = parsed.value;
  const fits = {
    boolean: typeof value === 'boolean',
    integer: typeof value === 'number' && Number.isInteger(value),
    list: Array.isArray(value),
    dict: typeof value === 'object' && value !== null && !Array.isArray(value),
  }[kind];
  return fits ? { value } : bad(`${name} is not ${kind === 'integer' ? 'an' : 'a'} ${kind}`);
}

describe('fuzz: Zulip parameter parsers (docs/api.md §1.6)', () => {
  it('parseJson and the JSON-typed parsers return their type or a template error', () => {
    fc.assert(
      fc.property(rawText, paramName, (raw, name) => {
        const parsed = referenceJson(raw);
        expectOutcome(() => parseJson(raw, name), parsed.ok ? { value: parsed.value } : bad(`${name} is not valid JSON`));
        expectOutcome(() => jsonBoolean.decode(raw, name), expectedTyped(raw, name, 'boolean'));
        expectOutcome(() => jsonInteger.decode(raw, name), expectedTyped(raw, name, 'integer'));
        expectOutcome(() => jsonList(Type.Unknown(), Number.MAX_SAFE_INTEGER).decode(raw, name), expectedTyped(raw, name, 'list'));
        expectOutcome(() => checkDict(parseJson(raw, name), name), expectedTyped(raw, name, 'dict'));
      }),
      { numRuns: RUNS },
    );
  });

  it('jsonStringList(limit): a list of strings, or the error of the list, of its length, or of its first non-string item', () => {
    fc.assert(
      fc.property(rawText, paramName, fc.integer({ min: 0, max: 4 }), (raw, name, limit) => {
        const list = expectedTyped(raw, name, 'list');
        let expected = list;
        if ('value' in list) {
          const items = list.value as unknown[];
          const firstBad = items.findIndex((item) => typeof item !== 'string');
          if (items.length > limit) expected = bad(`${name} is too long (limit: ${limit} items)`);
          else if (firstBad >= 0) expected = bad(`${name}[${firstBad}] is not a string`);
        }
        expectOutcome(() => jsonStringList(limit).decode(raw, name), expected);
      }),
      { numRuns: RUNS },
    );
  });

  it('trimmedText(limit): the trimmed text within the limit, or blank / too long', () => {
    fc.assert(
      fc.property(rawText, paramName, fc.integer({ min: 1, max: 600 }), (raw, name, limit) => {
        const trimmed = raw.trim();
        const expected: Outcome =
          trimmed === ''
            ? bad(`${name} cannot be blank`)
            : [...trimmed].length > limit
              ? bad(`${name} is too long (limit: ${limit} characters)`)
              : { value: trimmed };
        expect(outcomeOf(() => trimmedText(limit).decode(raw, name))).toEqual(expected);
      }),
      { numRuns: RUNS },
    );
  });

  it('text returns the raw text unchanged', () => {
    fc.assert(
      fc.property(rawText, paramName, (raw, name) => text.decode(raw, name) === raw),
      { numRuns: RUNS },
    );
  });

  it('the check* functions accept exactly their type for any JSON value', () => {
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.anything({ maxDepth: 1 })), paramName, (value, name) => {
        const check = (run: () => unknown, fits: boolean, kind: string) =>
          expect(outcomeOf(run)).toEqual(fits ? { value } : bad(`${name} is not ${kind === 'integer' ? 'an' : 'a'} ${kind}`));
        check(() => checkBoolean(value, name), typeof value === 'boolean', 'boolean');
        check(() => checkInteger(value, name), typeof value === 'number' && Number.isInteger(value), 'integer');
        check(() => checkString(value, name), typeof value === 'string', 'string');
        check(() => checkList(value, name), Array.isArray(value), 'list');
        check(() => checkDict(value, name), typeof value === 'object' && value !== null && !Array.isArray(value), 'dict');
      }),
      { numRuns: RUNS },
    );
  });

  it('requireKey: own keys only (no prototype keys such as __proto__ or constructor)', () => {
    const key = fc.oneof(
      fc.constantFrom('__proto__', 'constructor', 'toString', 'hasOwnProperty', 'stream_id'),
      fc.string({ unit: anyUnit, maxLength: 8 }),
    );
    fc.assert(
      fc.property(fc.dictionary(key, fc.jsonValue({ maxDepth: 1 }), { maxKeys: 4 }), key, paramName, (object, wanted, parent) => {
        const own = Object.hasOwn(object, wanted);
        expect(outcomeOf(() => requireKey(object, wanted, parent))).toEqual(
          own ? { value: object[wanted] } : bad(`${parent}[${JSON.stringify(wanted)}] field is missing: Field required`),
        );
        expect(keyPath(parent, wanted)).toBe(`${parent}[${JSON.stringify(wanted)}]`);
      }),
      { numRuns: RUNS },
    );
  });

  it('decodeParameters: body before query, missing → REQUEST_VARIABLE_MISSING, defaults, ignored names sorted and undeclared', () => {
    const fields = fc.array(fc.tuple(paramName, rawText), { maxLength: 6 }).map((pairs) => new Map(pairs));
    // Declared names: a declaration is an object literal, whose integer-like keys JavaScript would
    // enumerate first; no parameter is named like that.
    const declared = fc.uniqueArray(
      paramName.filter((name) => !/^(0|[1-9]\d*)$/.test(name)),
      { maxLength: 4 },
    );
    fc.assert(
      fc.property(fields, fields, declared, (body, query, read) => {
        const raw = (name: string) => body.get(name) ?? query.get(name);
        const requiredOnes = formParameters(Object.fromEntries(read.map((name) => [name, required(text, '')])));
        const firstMissing = read.find((name) => raw(name) === undefined);
        expect(outcomeOf(() => decodeParameters(requiredOnes, { body, query }).values)).toEqual(
          firstMissing !== undefined
            ? {
                error: {
                  status: 400,
                  code: 'REQUEST_VARIABLE_MISSING',
                  msg: `Missing '${firstMissing}' argument`,
                  extra: { var_name: firstMissing },
                },
              }
            : { value: Object.fromEntries(read.map((name) => [name, raw(name)])) },
        );
        const optionalOnes = formParameters(Object.fromEntries(read.map((name) => [name, optional(text, '', 'fallback')])));
        const decoded = decodeParameters(optionalOnes, { body, query });
        expect(decoded.values).toEqual(Object.fromEntries(read.map((name) => [name, raw(name) ?? 'fallback'])));
        const ignored = decoded.ignored;
        const received = new Set([...body.keys(), ...query.keys()]);
        const expected = [...received].filter((name) => name !== 'client' && !read.includes(name));
        expect(new Set(ignored)).toEqual(new Set(expected));
        expect(ignored.length).toBe(expected.length);
        // Sorted by code point (not by UTF-16 unit).
        const byCodePoint = [...ignored].sort((a, b) => {
          const left = [...a].map((c) => c.codePointAt(0)!);
          const right = [...b].map((c) => c.codePointAt(0)!);
          for (let i = 0; i < Math.min(left.length, right.length); i++) if (left[i] !== right[i]) return left[i]! - right[i]!;
          return left.length - right.length;
        });
        expect(ignored).toEqual(byCodePoint);
      }),
      { numRuns: RUNS },
    );
  });
});

// --- The subscription-setting parsers built on them (docs/api.md §2.8, docs/api.md §3.2, docs/api.md §3.3). ---

const entry = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.record(
    {
      stream_id: fc.oneof(fc.integer(), fc.constantFrom(1.5, '100', true, null, 1e300, -0)),
      property: fc.oneof(
        fc.constantFrom(...SETTING_PROPERTIES),
        fc.string({ unit: anyUnit, maxLength: 10 }),
        fc.jsonValue({ maxDepth: 0 }),
      ),
      value: fc.oneof(fc.boolean(), fc.stringMatching(/^#[0-9a-fA-F]{3,7}\n?$/), fc.jsonValue({ maxDepth: 1 })),
      extra: fc.jsonValue({ maxDepth: 0 }),
    },
    { requiredKeys: [] },
  ),
);

/** docs/api.md's messages for one bulk entry at index i (checks a–e). */
function bulkEntryMessages(i: number): RegExp[] {
  const name = `subscription_data\\[${i}\\]`;
  return [
    new RegExp(`^${name} is not a dict$`),
    new RegExp(`^${name}\\["(stream_id|property|value)"\\] field is missing: Field required$`),
    new RegExp(`^${name}\\["stream_id"\\] is not an integer$`),
    new RegExp(`^${name}\\["property"\\] is not a string$`),
    new RegExp(`^Invalid ${name}: Value error, color is not a valid hex color code$`),
    new RegExp(`^(${BOOLEAN_PROPERTIES.join('|')}) is not a boolean$`),
    /^Unknown subscription property: [\s\S]*$/,
  ];
}

describe('fuzz: subscription-setting parsers', () => {
  it('checkBulkEntries: valid changes up to the first failing entry, whose error is a spec message', () => {
    fc.assert(
      fc.property(fc.array(entry, { maxLength: 6 }), (entries) => {
        const { changes, shapeError } = checkBulkEntries(entries);
        expect(changes.length).toBeLessThanOrEqual(entries.length);
        for (const change of changes) {
          expect(SETTING_PROPERTIES).toContain(change.property);
          expect(Number.isInteger(change.streamId)).toBe(true);
          if (change.property === 'color') expect(change.value).toMatch(/^#[0-9a-fA-F]{3,6}$/);
          else expect(typeof change.value).toBe('boolean');
        }
        if (shapeError === undefined) {
          expect(changes.length).toBe(entries.length);
        } else {
          expect(shapeError).toBeInstanceOf(ApiError);
          expect(shapeError.statusCode).toBe(400);
          expect(shapeError.code).toBe('BAD_REQUEST');
          expect(
            bulkEntryMessages(changes.length).some((pattern) => pattern.test(shapeError.message)),
            shapeError.message,
          ).toBe(true);
        }
      }),
      { numRuns: RUNS },
    );
  });

  it('single-channel value and property: a change or a docs/api.md §3.3 message, never another exception', () => {
    fc.assert(
      fc.property(fc.oneof(fc.constantFrom(...SETTING_PROPERTIES), rawText), rawText, (property, raw) => {
        const value = parseSingleValue(raw);
        expect(['string', 'boolean']).toContain(typeof value);
        if (typeof value === 'string') expect(value).toBe(raw);
        const outcome = outcomeOf(() => checkSettingChange(100, property, value));
        if ('error' in outcome) {
          expect(outcome.error.status).toBe(400);
          const allowed = [
            `Unknown subscription property: ${property}`,
            `${property} is not a boolean`,
            'color is not a valid hex color code',
          ];
          expect(allowed).toContain(outcome.error.msg);
        }
      }),
      { numRuns: RUNS },
    );
  });
});
