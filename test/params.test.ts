import { describe, expect, it } from 'vitest';
import { ApiError } from '../src/http/errors.js';
import {
  compareCodePoints, jsonBoolean, jsonDict, jsonInteger, jsonList, jsonListOfAtMost, jsonStringListOfAtMost, ParamReader, trimmedString,
} from '../src/http/params.js';

function errorOf(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error instanceof ApiError ? { status: error.statusCode, body: error.toBody() } : error;
  }
  throw new Error('expected an error');
}

const bad = (msg: string) => ({ status: 400, body: { result: 'error', msg, code: 'BAD_REQUEST' } });

const reader = (body: Record<string, string>, query: Record<string, string> = {}) =>
  new ParamReader({ body: new Map(Object.entries(body)), query: new Map(Object.entries(query)) });

describe('Zulip parameter parsing (spec §1.6)', () => {
  it('JSON booleans', () => {
    expect(jsonBoolean('true', 'b')).toBe(true);
    expect(jsonBoolean(' false ', 'b')).toBe(false);
    for (const raw of ['True', 'yes', '', 'tru']) expect(errorOf(() => jsonBoolean(raw, 'flag'))).toEqual(bad('flag is not valid JSON'));
    for (const raw of ['1', '"true"', 'null', '[]']) expect(errorOf(() => jsonBoolean(raw, 'flag'))).toEqual(bad('flag is not a boolean'));
  });

  it('JSON integers', () => {
    expect(jsonInteger('5', 'n')).toBe(5);
    expect(jsonInteger('-1', 'n')).toBe(-1);
    expect(jsonInteger('5.0', 'n')).toBe(5);
    for (const raw of ['"5"', 'true', '1.5']) expect(errorOf(() => jsonInteger(raw, 'n'))).toEqual(bad('n is not an integer'));
    expect(errorOf(() => jsonInteger('NaN', 'n'))).toEqual(bad('n is not valid JSON'));
  });

  it('JSON lists and dicts, with nested <var> names', () => {
    expect(jsonList('[1]', 'l')).toEqual([1]);
    expect(errorOf(() => jsonList('{}', 'l'))).toEqual(bad('l is not a list'));
    expect(jsonDict('{"a":true}', 'd')).toEqual({ a: true });
    for (const raw of ['[]', 'null', '5']) expect(errorOf(() => jsonDict(raw, 'd'))).toEqual(bad('d is not a dict'));
    expect(jsonStringListOfAtMost(2)('["a","b"]', 'event_types')).toEqual(['a', 'b']);
    expect(errorOf(() => jsonStringListOfAtMost(2)('["a",1]', 'event_types'))).toEqual(bad('event_types[1] is not a string'));
    // The length is checked before the items.
    expect(errorOf(() => jsonStringListOfAtMost(2)('["a",1,2]', 'event_types'))).toEqual(bad('event_types is too long (limit: 2 items)'));
    expect(jsonListOfAtMost(1)('[{}]', 'l')).toEqual([{}]);
    expect(errorOf(() => jsonListOfAtMost(1)('[1,2]', 'l'))).toEqual(bad('l is too long (limit: 1 items)'));
    expect(errorOf(() => jsonListOfAtMost(1)('{}', 'l'))).toEqual(bad('l is not a list'));
  });

  it('trimmed strings: blank and length in code points', () => {
    const parse = trimmedString(3);
    expect(parse('  ab ', 'name')).toBe('ab');
    expect(parse('😀😀😀', 'name')).toBe('😀😀😀');
    expect(errorOf(() => parse('   ', 'name'))).toEqual(bad('name cannot be blank'));
    expect(errorOf(() => parse('abcd', 'name'))).toEqual(bad('name is too long (limit: 3 characters)'));
  });

  it('missing required parameters name themselves', () => {
    expect(errorOf(() => reader({}).required('x', jsonBoolean))).toEqual({
      status: 400,
      body: { result: 'error', msg: "Missing 'x' argument", var_name: 'x', code: 'REQUEST_VARIABLE_MISSING' },
    });
  });

  it('reads the body before the query string; present-but-empty counts as present', () => {
    const params = reader({ a: 'body', e: '' }, { a: 'query', b: 'query' });
    expect(params.required('a', (raw) => raw)).toBe('body');
    expect(params.required('b', (raw) => raw)).toBe('query');
    expect(params.optional('e', (raw) => raw, 'default')).toBe('');
    expect(params.optional('c', (raw) => raw, 'default')).toBe('default');
  });

  it('reports undeclared names, sorted by code point, without client', () => {
    const params = reader({ z: '1', client: 'x', é: '1', B: '1' }, { a: '1', z: '2', declared: '1' });
    params.optional('declared', (raw) => raw);
    params.optional('never_sent', (raw) => raw);
    expect(params.ignored()).toEqual(['B', 'a', 'z', 'é']);
    expect(compareCodePoints('\u{1F600}', '\uFFFF')).toBeGreaterThan(0);
  });
});
