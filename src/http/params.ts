import type { FastifyRequest } from 'fastify';
import { badRequest, missingArgument } from './errors.js';

/**
 * Zulip's parameter layer. Each endpoint reads its declared parameters in table order through a
 * ParamReader; the reader remembers every declared name, so the success envelope can report the
 * rest as ignored_parameters_unsupported (spec §1.6, §1.7).
 */

/** Raw parameter values as received: the body's form fields, then the query string. */
export interface ParamSources {
  body: Map<string, string>;
  query: Map<string, string>;
}

export type Parser<T> = (raw: string, name: string) => T;

export class ParamReader {
  readonly declared = new Set<string>(['client']);

  constructor(private readonly sources: ParamSources) {}

  /** The raw text of a parameter, body first; undefined when absent. Declares the name. */
  raw(name: string): string | undefined {
    this.declared.add(name);
    return this.peek(name);
  }

  /** The raw text without declaring the name: for hooks that run before the handler reads it. */
  peek(name: string): string | undefined {
    return this.sources.body.get(name) ?? this.sources.query.get(name);
  }

  required<T>(name: string, parse: Parser<T>): T {
    const raw = this.raw(name);
    if (raw === undefined) throw missingArgument(name);
    return parse(raw, name);
  }

  optional<T>(name: string, parse: Parser<T>): T | undefined;
  optional<T>(name: string, parse: Parser<T>, fallback: T): T;
  optional<T>(name: string, parse: Parser<T>, fallback?: T): T | undefined {
    const raw = this.raw(name);
    return raw === undefined ? fallback : parse(raw, name);
  }

  /** Names received but not declared: sorted by code point, deduplicated. */
  ignored(): string[] {
    const names = new Set<string>();
    for (const source of [this.sources.body, this.sources.query]) {
      for (const name of source.keys()) if (!this.declared.has(name)) names.add(name);
    }
    return [...names].sort(compareCodePoints);
  }
}

export function compareCodePoints(a: string, b: string): number {
  // String comparison in JavaScript is by UTF-16 unit; compare by code point as the spec says.
  const left = [...a];
  const right = [...b];
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    const diff = (left[i]!.codePointAt(0) ?? 0) - (right[i]!.codePointAt(0) ?? 0);
    if (diff !== 0) return diff;
  }
  return left.length - right.length;
}

// --- Parsers. `name` is the <var> of the messages: a parameter name or a nested path. ---

export function parseJson(raw: string, name: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    throw badRequest(`${name} is not valid JSON`);
  }
}

export const asString: Parser<string> = (raw) => raw;

export const jsonBoolean: Parser<boolean> = (raw, name) => checkBoolean(parseJson(raw, name), name);

export const jsonInteger: Parser<number> = (raw, name) => checkInteger(parseJson(raw, name), name);

export const jsonList: Parser<unknown[]> = (raw, name) => checkList(parseJson(raw, name), name);

export const jsonDict: Parser<Record<string, unknown>> = (raw, name) => checkDict(parseJson(raw, name), name);

/** A JSON list of at most `limit` items; the length is checked before any item (spec §1.6). */
export function jsonListOfAtMost(limit: number): Parser<unknown[]> {
  return (raw, name) => {
    const list = jsonList(raw, name);
    if (list.length > limit) throw badRequest(`${name} is too long (limit: ${limit} items)`);
    return list;
  };
}

/** A JSON list of at most `limit` integers (`user_ids[2] is not an integer`). */
export function jsonIntegerListOfAtMost(limit: number): Parser<number[]> {
  const list = jsonListOfAtMost(limit);
  return (raw, name) => list(raw, name).map((item, index) => checkInteger(item, `${name}[${index}]`));
}

/** A JSON list of at most `limit` strings. */
export function jsonStringListOfAtMost(limit: number): Parser<string[]> {
  const list = jsonListOfAtMost(limit);
  return (raw, name) => list(raw, name).map((item, index) => checkString(item, `${name}[${index}]`));
}

/** A string parameter that is trimmed, must not be blank, and has a length limit in code points. */
export function trimmedString(limit: number): Parser<string> {
  return (raw, name) => {
    const value = raw.trim();
    if (value === '') throw badRequest(`${name} cannot be blank`);
    if ([...value].length > limit) throw badRequest(`${name} is too long (limit: ${limit} characters)`);
    return value;
  };
}

export function checkBoolean(value: unknown, name: string): boolean {
  if (typeof value !== 'boolean') throw badRequest(`${name} is not a boolean`);
  return value;
}

export function checkInteger(value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw badRequest(`${name} is not an integer`);
  return value;
}

export function checkString(value: unknown, name: string): string {
  if (typeof value !== 'string') throw badRequest(`${name} is not a string`);
  return value;
}

export function checkList(value: unknown, name: string): unknown[] {
  if (!Array.isArray(value)) throw badRequest(`${name} is not a list`);
  return value;
}

export function checkDict(value: unknown, name: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw badRequest(`${name} is not a dict`);
  return value as Record<string, unknown>;
}

/** `<var>` of a key inside an object: the key JSON-encoded in brackets. */
export const keyPath = (parent: string, key: string): string => `${parent}[${JSON.stringify(key)}]`;

export function requireKey(object: Record<string, unknown>, key: string, parent: string): unknown {
  if (!Object.hasOwn(object, key)) throw badRequest(`${keyPath(parent, key)} field is missing: Field required`);
  return object[key];
}

declare module 'fastify' {
  interface FastifyRequest {
    zulipParams: ParamReader;
  }
}

export const paramsOf = (request: FastifyRequest): ParamReader => request.zulipParams;
