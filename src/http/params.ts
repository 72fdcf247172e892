import type { FastifyReply, FastifyRequest, FastifySchema, HookHandlerDoneFunction, RouteOptions } from 'fastify';
import Type, { type TSchema } from 'typebox';
import { ROLES } from '../zulip.js';
import { badRequest, missingArgument } from './errors.js';

/**
 * Zulip's parameter layer. Each route's schema file declares its parameters with `queryParameters`
 * / `formParameters`: one entry per parameter, naming its kind (how its text is decoded, with the
 * docs/api.md §1.6 messages) and whether it must be sent. That declaration is the route's TypeBox
 * schema (and so its OpenAPI document), what the one decoder walks (`decodeParameters`, after
 * authentication and the rate limit, docs/api.md §1.1), the handler's value types (`parametersOf`)
 * and the names not ignored (`ignored_parameters_unsupported`, docs/api.md §1.7).
 */

// --- The failure messages (docs/api.md §1.6), one template each; `name` is the <var>: a parameter name or a nested path. ---

export const MESSAGES = {
  notJson: (name: string) => `${name} is not valid JSON`,
  notBoolean: (name: string) => `${name} is not a boolean`,
  notInteger: (name: string) => `${name} is not an integer`,
  notString: (name: string) => `${name} is not a string`,
  notList: (name: string) => `${name} is not a list`,
  notDict: (name: string) => `${name} is not a dict`,
  blank: (name: string) => `${name} cannot be blank`,
  tooManyItems: (name: string, limit: number) => `${name} is too long (limit: ${limit} items)`,
  tooManyCharacters: (name: string, limit: number) => `${name} is too long (limit: ${limit} characters)`,
  fieldMissing: (name: string) => `${name} field is missing: Field required`,
  /** The missing parameters GET /events reports after every type error, without var_name (docs/api.md §3.13). */
  missingLate: (name: string) => `Missing '${name}' argument`,
  invalid: (name: string) => `Invalid ${name}`,
  tooSmall: (name: string) => `${name} is too small`,
} as const;

// --- Checks of decoded JSON values, shared by the kinds and by the checks of nested entries. ---

export type Parser<T> = (raw: string, name: string) => T;

export function parseJson(raw: string, name: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    throw badRequest(MESSAGES.notJson(name));
  }
}

export function checkBoolean(value: unknown, name: string): boolean {
  if (typeof value !== 'boolean') throw badRequest(MESSAGES.notBoolean(name));
  return value;
}

export function checkInteger(value: unknown, name: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw badRequest(MESSAGES.notInteger(name));
  return value;
}

export function checkString(value: unknown, name: string): string {
  if (typeof value !== 'string') throw badRequest(MESSAGES.notString(name));
  return value;
}

export function checkList(value: unknown, name: string): unknown[] {
  if (!Array.isArray(value)) throw badRequest(MESSAGES.notList(name));
  return value;
}

export function checkDict(value: unknown, name: string): Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw badRequest(MESSAGES.notDict(name));
  return value as Record<string, unknown>;
}

/** `<var>` of a key inside an object: the key JSON-encoded in brackets. */
export const keyPath = (parent: string, key: string): string => `${parent}[${JSON.stringify(key)}]`;

export function requireKey(object: Record<string, unknown>, key: string, parent: string): unknown {
  if (!Object.hasOwn(object, key)) throw badRequest(MESSAGES.fieldMissing(keyPath(parent, key)));
  return object[key];
}

// --- Kinds: how a parameter's text is documented and decoded. ---

/** Marks a parameter whose value is JSON text (a list or an object) in a query string or form field. */
export const JSON_ENCODED = { 'x-consume': 'application/json' } as const;

export interface Kind<T> {
  /** Its OpenAPI schema (JSON-text values carry JSON_ENCODED). */
  schema: TSchema;
  decode: Parser<T>;
}

export const kind = <T>(schema: TSchema, decode: Parser<T>): Kind<T> => ({ schema, decode });

/** A kind whose value is JSON text, documented as `schema` (a list, an object, a union). */
export const jsonTextKind = <T>(schema: TSchema, decode: Parser<T>): Kind<T> => kind({ ...schema, ...JSON_ENCODED }, decode);

/** The text as sent. */
export const text: Kind<string> = kind(Type.String(), (raw) => raw);

export const jsonBoolean: Kind<boolean> = kind(Type.Boolean(), (raw, name) => checkBoolean(parseJson(raw, name), name));

export const jsonInteger: Kind<number> = kind(Type.Integer(), (raw, name) => checkInteger(parseJson(raw, name), name));

/** A JSON list of at most `limit` items; the length is checked before any item (docs/api.md §1.6). */
function listOfAtMost(raw: string, name: string, limit: number): unknown[] {
  const list = checkList(parseJson(raw, name), name);
  if (list.length > limit) throw badRequest(MESSAGES.tooManyItems(name, limit));
  return list;
}

export const jsonList = (items: TSchema, limit: number): Kind<unknown[]> =>
  jsonTextKind(Type.Array(items, { maxItems: limit }), (raw, name) => listOfAtMost(raw, name, limit));

/** A JSON list of at most `limit` integers (`user_ids[2] is not an integer`). */
export const jsonIntegerList = (limit: number): Kind<number[]> =>
  jsonTextKind(Type.Array(Type.Integer(), { maxItems: limit }), (raw, name) =>
    listOfAtMost(raw, name, limit).map((item, index) => checkInteger(item, `${name}[${index}]`)),
  );

/** A JSON list of at most `limit` strings. */
export const jsonStringList = (limit: number): Kind<string[]> =>
  jsonTextKind(Type.Array(Type.String(), { maxItems: limit }), (raw, name) =>
    listOfAtMost(raw, name, limit).map((item, index) => checkString(item, `${name}[${index}]`)),
  );

/** Trimmed, not blank, at most `limit` characters (code points). */
export const trimmedText = (limit: number): Kind<string> =>
  kind(Type.String({ minLength: 1, maxLength: limit }), (raw, name) => {
    const value = raw.trim();
    if (value === '') throw badRequest(MESSAGES.blank(name));
    if ([...value].length > limit) throw badRequest(MESSAGES.tooManyCharacters(name, limit));
    return value;
  });

// --- Parameters: a kind, whether it must be sent, its default, its description. ---

/**
 * `required`: a missing one answers REQUEST_VARIABLE_MISSING at its turn. `late`: required, but
 * reported missing only after every other parameter decoded, without var_name (GET /events).
 */
type Presence = 'required' | 'optional' | 'late';

export interface Param<T> {
  kind: Kind<unknown>;
  presence: Presence;
  fallback?: T;
  description: string;
  /** `late` only: the lowest missing one is reported. */
  lateRank?: number;
  /** Only carries T for the declaration's type. */
  readonly type?: T;
}

export const required = <T>(kind: Kind<T>, description: string): Param<T> => ({ kind, presence: 'required', description });

/** Required, reported missing after the others decoded, the lowest `rank` first (see Presence). */
export const requiredLast = <T>(kind: Kind<T>, description: string, rank: number): Param<T> => ({
  kind,
  presence: 'late',
  description,
  lateRank: rank,
});

export function optional<T>(kind: Kind<T>, description: string): Param<T | undefined>;
export function optional<T>(kind: Kind<T>, description: string, fallback: T): Param<T>;
export function optional<T>(kind: Kind<T>, description: string, fallback?: T): Param<T | undefined> {
  return { kind, presence: 'optional', fallback, description };
}

/** A path parameter: the router's text under `routerName` (the route's `:name`, or `*`), decoded by `decode`. */
export interface PathParam<T> {
  routerName: string;
  decode: (segment: string) => T;
  schema: TSchema;
  readonly type?: T;
}

export const pathSegment = <T>(schema: TSchema, decode: (segment: string) => T, routerName = ''): PathParam<T> => ({
  routerName,
  decode,
  schema,
});

/** A path segment that is an id, digits only (the router matches nothing else): see routePath. */
export const idSegment = <T>(description: string, decode: (segment: string) => T): PathParam<T> =>
  pathSegment(Type.String({ pattern: '^\\d+$', description }), decode);

/**
 * The route's URL for the router: each `:name` whose path parameter is documented with a `pattern`
 * gets it as its regular expression (`:stream_id(^\d+$)`). The pattern is declared once, in the
 * schema, for both the router and the OpenAPI document.
 */
export function routePath(url: string, schema: DeclaredSchema<Params, PathParams>): string {
  const patterns = new Map<string, unknown>(
    Object.entries(schema[DECLARATION].path).map(([name, param]) => [
      param.routerName || name,
      (param.schema as { pattern?: unknown }).pattern,
    ]),
  );
  return url.replace(/:(\w+)/g, (segment, name: string) => {
    const pattern = patterns.get(name);
    return typeof pattern === 'string' ? `${segment}(${pattern})` : segment;
  });
}

/** A path parameter's value: the router's text under its name, decoded. */
const decodeSegment = <T>(param: PathParam<T>, name: string, pathValues: Record<string, string>): T =>
  param.decode(pathValues[param.routerName || name] ?? '');

type Params = Record<string, Param<unknown>>;
type PathParams = Record<string, PathParam<unknown>>;

type Declaration = DeclaredSchema<Params, PathParams>[typeof DECLARATION];

const DECLARATION = Symbol('zulip parameters');

/** A route schema fragment with its parameters' declaration (see queryParameters). */
export type DeclaredSchema<P extends Params, Path extends PathParams> = Pick<
  FastifySchema,
  'querystring' | 'body' | 'consumes' | 'params'
> & {
  [DECLARATION]: { params: P; path: Path };
};

function documented(param: Param<unknown>): TSchema {
  const schema = { ...param.kind.schema, description: param.description, ...(param.fallback !== undefined && { default: param.fallback }) };
  return param.presence === 'optional' ? Type.Optional(schema) : schema;
}

function declare<P extends Params, Path extends PathParams>(where: 'query' | 'form', params: P, path: Path): DeclaredSchema<P, Path> {
  const properties = Object.fromEntries(Object.entries(params).map(([name, param]) => [name, documented(param)]));
  const fields =
    Object.keys(params).length === 0
      ? {}
      : where === 'query'
        ? { querystring: Type.Object(properties) }
        : { body: Type.Object(properties), consumes: ['application/x-www-form-urlencoded', 'multipart/form-data'] };
  const pathProperties = Object.fromEntries(Object.entries(path).map(([name, param]) => [name, param.schema]));
  return { ...fields, ...(Object.keys(path).length > 0 && { params: Type.Object(pathProperties) }), [DECLARATION]: { params, path } };
}

/** The parameters a route schema declares (none for a schema without a declaration). */
export const declaredParameters = (schema: object): Readonly<Params> =>
  (schema as { [DECLARATION]?: Declaration })[DECLARATION]?.params ?? {};

/** Parameters of a GET: query string (a body is read too, first, as Zulip does). */
export const queryParameters = <P extends Params, Path extends PathParams = Record<never, never>>(params: P, path = {} as Path) =>
  declare('query', params, path);

/** Parameters of a POST, PATCH or DELETE: form fields (either body format; the query string is read too). */
export const formParameters = <P extends Params, Path extends PathParams = Record<never, never>>(params: P, path = {} as Path) =>
  declare('form', params, path);

/** The decoded values of a declaration: each parameter's type (undefined only when optional without default). */
export type Values<S> = S extends { [DECLARATION]: { params: infer P; path: infer Path } }
  ? { [K in keyof P]: P[K] extends Param<infer T> ? T : never } & { [K in keyof Path]: Path[K] extends PathParam<infer T> ? T : never }
  : never;

// --- The decoder. ---

/** Raw parameter values as received: the body's form fields, then the query string. */
export interface ParamSources {
  body: ReadonlyMap<string, string>;
  query: ReadonlyMap<string, string>;
}

/** The fields of a request without a form body: one map for all (a waiting long poll kept its own). */
export const NO_FIELDS: ReadonlyMap<string, string> = new Map();

/** A request's sources once its parameters are decoded. */
const NO_SOURCES: ParamSources = { body: NO_FIELDS, query: NO_FIELDS };

const raw = (sources: ParamSources, name: string): string | undefined => sources.body.get(name) ?? sources.query.get(name);

/**
 * Decodes the parameters `schema` declares, in declaration order, body first; the first failure is
 * thrown. Also answers the received names not declared (never `client`), sorted by code point.
 */
export function decodeParameters(
  schema: FastifySchema | undefined,
  sources: ParamSources,
  pathValues: Record<string, string> = {},
): { values: Record<string, unknown>; ignored: string[] } {
  const declaration = (schema as { [DECLARATION]?: Declaration } | undefined)?.[DECLARATION];
  const params = declaration?.params ?? {};
  const values: Record<string, unknown> = {};
  let missingLate: { name: string; rank: number } | undefined;
  for (const [name, param] of Object.entries(params)) {
    const text = raw(sources, name);
    if (text !== undefined) {
      values[name] = param.kind.decode(text, name);
    } else if (param.presence === 'required') {
      throw missingArgument(name);
    } else {
      const rank = param.lateRank ?? 0;
      if (param.presence === 'late' && (!missingLate || rank < missingLate.rank)) missingLate = { name, rank };
      values[name] = param.fallback;
    }
  }
  if (missingLate) throw badRequest(MESSAGES.missingLate(missingLate.name));
  for (const [name, param] of Object.entries(declaration?.path ?? {})) values[name] = decodeSegment(param, name, pathValues);
  return { values, ignored: undeclared(sources, params) };
}

function undeclared(sources: ParamSources, params: Params): string[] {
  const names = new Set<string>();
  for (const source of [sources.body, sources.query]) {
    for (const name of source.keys()) if (name !== 'client' && !Object.hasOwn(params, name)) names.add(name);
  }
  return [...names].sort(compareCodePoints);
}

export function compareCodePoints(a: string, b: string): number {
  // String comparison in JavaScript is by UTF-16 unit; compare by code point as docs/api.md says.
  const left = [...a];
  const right = [...b];
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    const diff = (left[i]!.codePointAt(0) ?? 0) - (right[i]!.codePointAt(0) ?? 0);
    if (diff !== 0) return diff;
  }
  return left.length - right.length;
}

const NON_GUESTS_ONLY = Symbol('refuses guests before its parameters');

/**
 * A route schema whose endpoint refuses guests before reading any parameter, as Zulip's
 * require_non_guest_user decorator does: `Not allowed for guest users`.
 */
export const nonGuestsOnly = <S extends object>(schema: S): S => ({ ...schema, [NON_GUESTS_ONLY]: true });

/**
 * The preHandler of `route`, after authentication and the rate limit: its parameters, decoded. A
 * callback hook, made once per route (so a request reads nothing of its route's options).
 */
export function parameterDecoder(route: RouteOptions) {
  const { schema } = route;
  const guestsRefused = (schema as { [NON_GUESTS_ONLY]?: true } | undefined)?.[NON_GUESTS_ONLY] === true;
  const beforeParameters = route.config?.beforeParameters;
  return (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    if (guestsRefused && request.caller?.role === ROLES.guest) return done(badRequest('Not allowed for guest users'));
    try {
      beforeParameters?.(request);
      const { values, ignored } = decodeParameters(schema, request.parameterSources, request.params as Record<string, string>);
      request.parameters = values;
      request.ignoredParameters = ignored;
      // Read by nothing after this; a long poll holds its request for a minute.
      request.parameterSources = NO_SOURCES;
    } catch (error) {
      return done(error as Error);
    }
    done();
  };
}

/** The request's decoded parameters, typed by the route's schema. */
export const parametersOf = <S extends DeclaredSchema<Params, PathParams>>(request: FastifyRequest, _schema: S): Values<S> =>
  request.parameters as Values<S>;

/**
 * One declared parameter decoded before authentication (a lookup folded into the authentication
 * statement needs it): undefined when invalid, whose 400 comes after authentication; its default
 * when absent. A path parameter as the router matched it.
 */
export function peekParameter<S extends DeclaredSchema<Params, PathParams>, K extends keyof Values<S> & string>(
  request: FastifyRequest,
  schema: S,
  name: K,
): Values<S>[K] | undefined {
  const { params, path } = schema[DECLARATION];
  const segment = path[name];
  if (segment) return decodeSegment(segment, name, request.params as Record<string, string>) as Values<S>[K];
  const param = params[name]!;
  const text = raw(request.parameterSources, name);
  if (text === undefined) return param.fallback as Values<S>[K];
  try {
    return param.kind.decode(text, name) as Values<S>[K];
  } catch {
    return undefined;
  }
}
