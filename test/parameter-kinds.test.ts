import { readdirSync } from 'node:fs';
import fc from 'fast-check';
import type { TSchema } from 'typebox';
import Value from 'typebox/value';
import { describe, expect, it } from 'vitest';
import { declaredParameters, type Kind } from '../src/http/params.js';
import type { CheckedBulkEntries } from '../src/modules/subscriptions/subscriptions.validation.js';

/**
 * Every parameter kind of every route describes what it decodes (src/http/params.ts): for arbitrary
 * text, whenever a kind's decoder accepts it,
 * - the documented schema admits the text as sent: as the string itself, or as its JSON value
 *   (the document's convention: booleans, integers, lists and objects are JSON text);
 * - the decoded value the handler gets passes the documented schema, except for the kinds that
 *   turn the documented value into another shape (below).
 * The kinds are read from the route schemas themselves, so a new route or kind is covered.
 */

const RUNS = 300;

/** Decoded into another shape than the documented value: only the first property applies. */
const RESHAPING = new Set([
  // { changes, shapeError }: the entries checked up to the first invalid one.
  'subscription_data',
  // { ids } or { emails }.
  'principals',
]);

interface DeclaredKind {
  where: string;
  name: string;
  kind: Kind<unknown>;
}

const MODULES = new URL('../src/modules/', import.meta.url);

async function declaredKinds(): Promise<DeclaredKind[]> {
  const kinds = new Map<Kind<unknown>, DeclaredKind>();
  for (const folder of readdirSync(MODULES)) {
    for (const file of readdirSync(new URL(`${folder}/`, MODULES)).filter((name) => name.endsWith('.schemas.ts'))) {
      const exports = (await import(new URL(`${folder}/${file}`, MODULES).href)) as Record<string, unknown>;
      for (const [exported, schema] of Object.entries(exports)) {
        if (typeof schema !== 'object' || schema === null) continue;
        for (const [name, param] of Object.entries(declaredParameters(schema))) {
          if (!kinds.has(param.kind)) kinds.set(param.kind, { where: `${file} ${exported}`, name, kind: param.kind });
        }
      }
    }
  }
  return [...kinds.values()];
}

const kinds = await declaredKinds();

// --- Values shaped by a documented schema, and arbitrary JSON, encoded as a client sends them. ---

function valuesOf(schema: TSchema): fc.Arbitrary<unknown> {
  const s = schema as Record<string, unknown>;
  if (Array.isArray(s.enum)) return fc.constantFrom(...(s.enum as unknown[]));
  if (s.const !== undefined) return fc.constant(s.const);
  if (Array.isArray(s.anyOf)) return fc.oneof(...(s.anyOf as TSchema[]).map(valuesOf));
  switch (s.type) {
    case 'boolean':
      return fc.boolean();
    case 'integer':
      return fc.oneof(fc.integer({ min: -3, max: 10 }), fc.integer());
    case 'null':
      return fc.constant(null);
    case 'string':
      return fc.oneof(
        fc.string({ maxLength: 8 }),
        fc.constantFrom('#76ce90', '#fff', 'inbox', 'narrow/x', '12', ' padded ', 'me'),
        fc.string({ unit: 'grapheme', maxLength: 8 }),
      );
    case 'array':
      return fc.array(valuesOf(s.items as TSchema), { maxLength: 4 });
    case 'object': {
      if (s.properties === undefined)
        return fc.dictionary(fc.string({ maxLength: 5 }), valuesOf(Object.values(s.patternProperties as object)[0] as TSchema));
      const required = new Set((s.required as string[] | undefined) ?? []);
      const properties = s.properties as Record<string, TSchema>;
      const record = fc.record(
        Object.fromEntries(
          Object.entries(properties).map(([key, property]) => [
            key,
            // An optional key: absent, null (which clients send for "absent"), or a value.
            required.has(key) ? valuesOf(property) : fc.oneof(fc.constant(undefined), fc.constant(null), valuesOf(property)),
          ]),
        ),
      );
      return record.map((value) =>
        Object.fromEntries(Object.entries(value).filter(([key, item]) => item !== undefined || !required.has(key))),
      );
    }
    default:
      return fc.jsonValue({ maxDepth: 2 });
  }
}

/** The texts a client may send for a value: JSON, and a string as it is. */
const encodings = (value: unknown): string[] => (typeof value === 'string' ? [value, JSON.stringify(value)] : [JSON.stringify(value)]);

const rawTexts = (schema: TSchema): fc.Arbitrary<string[]> =>
  fc.oneof(
    { arbitrary: valuesOf(schema).map(encodings), weight: 4 },
    { arbitrary: fc.jsonValue({ maxDepth: 2 }).map(encodings), weight: 2 },
    {
      arbitrary: fc.constantFrom('partial', 'mobile', 'true', 'false', 'null', '', ' ', '1', '1.0', '-1', '[]', '{}').map((text) => [text]),
      weight: 1,
    },
  );

function parsedJson(text: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch {
    return undefined;
  }
}

/** Whether the documented schema admits the text: as a string, or as the JSON it encodes. */
function admitsText(schema: TSchema, text: string): boolean {
  if (Value.Check(schema, text)) return true;
  const json = parsedJson(text);
  return json !== undefined && Value.Check(schema, json.value);
}

/** The decoded value, or undefined when the decoder refuses the text (or defers its refusal). */
function accepted(declared: DeclaredKind, text: string): { value: unknown } | undefined {
  let value: unknown;
  try {
    value = declared.kind.decode(text, declared.name);
  } catch {
    return undefined;
  }
  // A bulk update keeps an entry's shape error for later: the list is refused all the same.
  if (declared.name === 'subscription_data' && (value as CheckedBulkEntries).shapeError !== undefined) return undefined;
  return { value };
}

describe('every parameter kind decodes what it documents', () => {
  it('reads the kinds from the route schemas', () => {
    const names = kinds.map((declared) => declared.name);
    expect(names).toEqual(expect.arrayContaining(['include_subscribers', 'subscription_data', 'value', 'principals', 'profile_data']));
    expect(kinds.length).toBeGreaterThanOrEqual(15);
  });

  for (const declared of kinds) {
    it(`${declared.name} (${declared.where})`, () => {
      let acceptedCount = 0;
      fc.assert(
        fc.property(rawTexts(declared.kind.schema), (texts) => {
          for (const text of texts) {
            const result = accepted(declared, text);
            if (!result) continue;
            acceptedCount++;
            expect(admitsText(declared.kind.schema, text), `accepted ${JSON.stringify(text)}, which the documentation does not admit`).toBe(
              true,
            );
            if (RESHAPING.has(declared.name)) continue;
            expect(
              Value.Check(declared.kind.schema, result.value),
              `decoded ${JSON.stringify(text)} as ${JSON.stringify(result.value)}`,
            ).toBe(true);
          }
        }),
        { numRuns: RUNS, seed: 26 },
      );
      // The property is not vacuous: the generated texts reach the decoder's accepting paths.
      expect(acceptedCount).toBeGreaterThan(0);
    });
  }
});
