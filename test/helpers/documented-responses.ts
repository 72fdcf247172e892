import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import type { OpenAPIV3 } from 'openapi-types';
import type { TSchema } from 'typebox';
import Value from 'typebox/value';

/**
 * Every 200 JSON body the tests receive through `api()` is checked against the response its route
 * documents in the app's OpenAPI document (GET /api/openapi.json): the same schema, with no key the
 * documentation leaves out. A mismatch fails the test that made the request.
 */

type Operations = Map<string, { path: string; schema: TSchema | undefined }[]>;

const documents = new WeakMap<FastifyInstance, Operations>();

/**
 * OpenAPI 3.0 → JSON Schema, as TypeBox checks it: `nullable` becomes a union with null, and an
 * object schema with properties admits no other key (an undocumented field is a mismatch).
 */
function strictJsonSchema(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(strictJsonSchema);
  if (typeof schema !== 'object' || schema === null) return schema;
  const { nullable, ...rest } = schema as Record<string, unknown>;
  const converted = Object.fromEntries(Object.entries(rest).map(([key, value]) => [key, strictJsonSchema(value)]));
  if (converted.type === 'object' && converted.properties && converted.additionalProperties === undefined) {
    converted.additionalProperties = false;
  }
  if (nullable !== true) return converted;
  // `enum: [null]` with nullable is how the document writes a field that is always null.
  const { description, ...nonNull } = converted;
  return { ...(description !== undefined && { description }), anyOf: [nonNull, { type: 'null' }] };
}

/** Per method, the document's paths and their 200 JSON schemas (read once per app). */
function operationsOf(app: FastifyInstance): Operations {
  let operations = documents.get(app);
  if (operations) return operations;
  const document = app.swagger() as OpenAPIV3.Document;
  operations = new Map();
  for (const [path, item] of Object.entries(document.paths)) {
    for (const [method, operation] of Object.entries(item ?? {}) as [string, OpenAPIV3.OperationObject][]) {
      const ok = operation.responses?.['200'] as OpenAPIV3.ResponseObject | undefined;
      const schema = ok?.content?.['application/json']?.schema;
      const list = operations.get(method.toUpperCase()) ?? [];
      list.push({ path, schema: schema && (strictJsonSchema(schema) as TSchema) });
      operations.set(method.toUpperCase(), list);
    }
  }
  documents.set(app, operations);
  return operations;
}

function decodedPath(url: string): string {
  const path = url.split('?')[0] ?? url;
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

/** Throws when a 200 JSON answer of a documented route does not match the response the route documents. */
export function checkDocumentedResponse(
  app: FastifyInstance,
  method: string,
  url: string,
  response: Pick<LightMyRequestResponse, 'statusCode' | 'headers' | 'body'>,
): void {
  if (response.statusCode !== 200 || method === 'HEAD' || response.headers['content-encoding'] !== undefined) return;
  if (!String(response.headers['content-type'] ?? '').startsWith('application/json') || response.body === '') return;
  const path = url.split('?')[0] ?? url;
  const route = app.findRoute({ method, url: path });
  if (!route) return;
  const params = route.params as Record<string, string>;
  // The document's path that the router's parameters turn into this request's path.
  const candidates = [path, decodedPath(url)];
  const operation = operationsOf(app)
    .get(method)
    ?.find((documented) =>
      candidates.includes(documented.path.replace(/\{(\w+)\}/g, (_, name: string) => params[name] ?? params['*'] ?? '')),
    );
  // Not documented: the document itself (hidden); that every other route is documented is test/openapi.test.ts's.
  if (!operation) return;
  if (!operation.schema) throw new Error(`${method} ${operation.path} answered a JSON 200 that its documentation does not describe`);
  const body = JSON.parse(response.body) as unknown;
  if (Value.Check(operation.schema, body)) return;
  const errors = [...Value.Errors(operation.schema, body)].slice(0, 5).map((error) => `${error.instancePath || '/'}: ${error.message}`);
  throw new Error(`${method} ${url}: the 200 body does not match the documented response of ${operation.path}:\n${errors.join('\n')}`);
}
