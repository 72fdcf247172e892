import { describe, expect, it } from 'vitest';
import { ApiError } from '../src/http/errors.js';
import Type from 'typebox';
import {
  checkDict,
  compareCodePoints,
  decodeParameters,
  formParameters,
  jsonBoolean,
  jsonInteger,
  jsonList,
  jsonStringList,
  optional,
  parseJson,
  queryParameters,
  required,
  requiredLast,
  text,
  trimmedText,
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

const sources = (body: Record<string, string>, query: Record<string, string> = {}) => ({
  body: new Map(Object.entries(body)),
  query: new Map(Object.entries(query)),
});

const anyList = jsonList(Type.Unknown(), Number.MAX_SAFE_INTEGER).decode;
const listOfAtMost = (limit: number) => jsonList(Type.Unknown(), limit).decode;
const jsonDict = (raw: string, name: string) => checkDict(parseJson(raw, name), name);

describe('Zulip parameter parsing (docs/api.md §1.6)', () => {
  it('JSON booleans', () => {
    expect(jsonBoolean.decode('true', 'b')).toBe(true);
    expect(jsonBoolean.decode(' false ', 'b')).toBe(false);
    for (const raw of ['True', 'yes', '', 'tru'])
      expect(errorOf(() => jsonBoolean.decode(raw, 'flag'))).toEqual(bad('flag is not valid JSON'));
    for (const raw of ['1', '"true"', 'null', '[]'])
      expect(errorOf(() => jsonBoolean.decode(raw, 'flag'))).toEqual(bad('flag is not a boolean'));
  });

  it('JSON integers', () => {
    expect(jsonInteger.decode('5', 'n')).toBe(5);
    expect(jsonInteger.decode('-1', 'n')).toBe(-1);
    expect(jsonInteger.decode('5.0', 'n')).toBe(5);
    for (const raw of ['"5"', 'true', '1.5']) expect(errorOf(() => jsonInteger.decode(raw, 'n'))).toEqual(bad('n is not an integer'));
    expect(errorOf(() => jsonInteger.decode('NaN', 'n'))).toEqual(bad('n is not valid JSON'));
  });

  it('JSON lists and dicts, with nested <var> names', () => {
    expect(anyList('[1]', 'l')).toEqual([1]);
    expect(errorOf(() => anyList('{}', 'l'))).toEqual(bad('l is not a list'));
    expect(jsonDict('{"a":true}', 'd')).toEqual({ a: true });
    for (const raw of ['[]', 'null', '5']) expect(errorOf(() => jsonDict(raw, 'd'))).toEqual(bad('d is not a dict'));
    expect(jsonStringList(2).decode('["a","b"]', 'event_types')).toEqual(['a', 'b']);
    expect(errorOf(() => jsonStringList(2).decode('["a",1]', 'event_types'))).toEqual(bad('event_types[1] is not a string'));
    // The length is checked before the items.
    expect(errorOf(() => jsonStringList(2).decode('["a",1,2]', 'event_types'))).toEqual(bad('event_types is too long (limit: 2 items)'));
    expect(listOfAtMost(1)('[{}]', 'l')).toEqual([{}]);
    expect(errorOf(() => listOfAtMost(1)('[1,2]', 'l'))).toEqual(bad('l is too long (limit: 1 items)'));
    expect(errorOf(() => listOfAtMost(1)('{}', 'l'))).toEqual(bad('l is not a list'));
  });

  it('trimmed strings: blank and length in code points', () => {
    const parse = trimmedText(3).decode;
    expect(parse('  ab ', 'name')).toBe('ab');
    expect(parse('😀😀😀', 'name')).toBe('😀😀😀');
    expect(errorOf(() => parse('   ', 'name'))).toEqual(bad('name cannot be blank'));
    expect(errorOf(() => parse('abcd', 'name'))).toEqual(bad('name is too long (limit: 3 characters)'));
  });

  it('missing required parameters name themselves, at their turn', () => {
    const schema = formParameters({ x: required(jsonBoolean, ''), y: required(jsonBoolean, '') });
    expect(errorOf(() => decodeParameters(schema, sources({ y: 'nope' })))).toEqual({
      status: 400,
      body: { result: 'error', msg: "Missing 'x' argument", var_name: 'x', code: 'REQUEST_VARIABLE_MISSING' },
    });
    // A type error of an earlier parameter comes first.
    const earlier = formParameters({ y: required(jsonBoolean, ''), x: required(jsonBoolean, '') });
    expect(errorOf(() => decodeParameters(earlier, sources({ y: 'nope' })))).toEqual(bad('y is not valid JSON'));
  });

  it('late parameters are reported missing after every other failure, lowest rank first, without var_name', () => {
    const schema = queryParameters({
      n: requiredLast(jsonInteger, '', 3),
      q: requiredLast(text, '', 2),
      b: optional(jsonBoolean, '', false),
    });
    expect(errorOf(() => decodeParameters(schema, sources({}, { b: '1' })))).toEqual(bad('b is not a boolean'));
    expect(errorOf(() => decodeParameters(schema, sources({}, {})))).toEqual(bad("Missing 'q' argument"));
    expect(errorOf(() => decodeParameters(schema, sources({}, { q: 'x' })))).toEqual(bad("Missing 'n' argument"));
    expect(errorOf(() => decodeParameters(schema, sources({}, { n: '1.5' })))).toEqual(bad('n is not an integer'));
    expect(decodeParameters(schema, sources({}, { q: 'x', n: '-1' })).values).toEqual({ n: -1, q: 'x', b: false });
  });

  it('reads the body before the query string; present-but-empty counts as present; defaults fill the rest', () => {
    const schema = formParameters({
      a: required(text, ''),
      b: required(text, ''),
      e: optional(text, '', 'default'),
      c: optional(text, '', 'default'),
      d: optional(text, ''),
    });
    const { values } = decodeParameters(schema, sources({ a: 'body', e: '' }, { a: 'query', b: 'query' }));
    expect(values).toEqual({ a: 'body', b: 'query', e: '', c: 'default', d: undefined });
    expect(Object.keys(values)).toEqual(['a', 'b', 'e', 'c', 'd']);
  });

  it('reports undeclared names, sorted by code point, without client; a route without parameters ignores all', () => {
    const received = sources({ z: '1', client: 'x', é: '1', B: '1' }, { a: '1', z: '2', declared: '1' });
    const schema = queryParameters({ declared: optional(text, ''), never_sent: optional(text, '') });
    expect(decodeParameters(schema, received).ignored).toEqual(['B', 'a', 'z', 'é']);
    expect(decodeParameters(undefined, received).ignored).toEqual(['B', 'a', 'declared', 'z', 'é']);
    expect(compareCodePoints('\u{1F600}', '\uFFFF')).toBeGreaterThan(0);
  });
});
