import { isUtf8 } from 'node:buffer';
import type { FastifyRequest } from 'fastify';
import type { Compilable } from 'kysely';
import type { Config } from '../config.js';
import type { Database } from '../db/database.js';
import { reusableStatement, type StatementRunner } from '../db/reusable-statement.js';
import { API_KEY_PATTERN, apiKeyDigest, storedDigestMatches } from '../lib/api-keys.js';
import { subdomainOfHost } from '../lib/hosts.js';
import { badRequest, unauthorized } from './errors.js';

export interface Caller {
  id: number;
  realmId: number;
  realmSubdomain: string;
  /** 'everyone' or 'members' (guests restricted, spec §2.4). */
  realmCanAccessAllUsersGroup: string;
  deliveryEmail: string;
  role: number;
  botType: number | null;
}

declare module 'fastify' {
  interface FastifyRequest {
    caller: Caller;
    /** The route's AuthLookup result, when it has one (see authenticate). */
    authLookupResult?: unknown;
  }
}

const INCOMING_WEBHOOK_BOT = 2;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const invalidHeader = () => unauthorized('Invalid authorization header for basic auth');

/** Splits a Basic Authorization header into email and key, with the spec's messages (§1.3 rows 1–5). */
export function parseBasicAuthorization(header: string | undefined): { email: string; apiKey: string } {
  if (header === undefined) throw unauthorized('Not logged in: API authentication or user session required');
  const tokens = header.trim().split(/\s+/);
  if (tokens.length !== 2) throw invalidHeader();
  const [scheme, encoded] = tokens as [string, string];
  if (scheme.toLowerCase() !== 'basic') throw badRequest('This endpoint requires HTTP basic authentication.');
  if (!BASE64.test(encoded) || encoded.length % 4 !== 0) throw invalidHeader();
  // Strict UTF-8 (a leading byte-order mark goes with the trim below). isUtf8 then toString costs
  // a fraction of a fatal TextDecoder, and this runs on every request.
  const bytes = Buffer.from(encoded, 'base64');
  if (!isUtf8(bytes)) throw invalidHeader();
  const parts = bytes.toString('utf8').split(':');
  if (parts.length !== 2) throw invalidHeader();
  const email = parts[0]!.trim();
  const apiKey = parts[1]!.trim();
  if (!API_KEY_PATTERN.test(apiKey)) throw unauthorized('Malformed API key');
  return { email, apiKey };
}

// The caller's columns carry a caller_ prefix, so that a route's lookup can add its own row's
// columns under their plain names (see AuthLookup). Only what every route needs: each column costs
// the hottest endpoint about 1.5 µs of row decoding in node-postgres (bench/RESULTS.md); a route
// that needs more of the caller's row asks for it with a lookup.
function selectAccount(db: Database, keyHash: string) {
  return db
    .selectFrom('users as caller')
    .innerJoin('realms as caller_realm', 'caller_realm.id', 'caller.realm_id')
    .select([
      'caller.id as caller_id', 'caller.realm_id as caller_realm_id', 'caller.delivery_email as caller_delivery_email',
      'caller.role as caller_role', 'caller.bot_type as caller_bot_type', 'caller.is_active as caller_is_active',
      'caller.api_key_hash as caller_api_key_hash',
      'caller_realm.subdomain as caller_realm_subdomain', 'caller_realm.deactivated as caller_realm_deactivated',
      'caller_realm.can_access_all_users_group as caller_realm_can_access_all_users_group',
    ])
    .where('caller.api_key_hash', '=', keyHash);
}

/** The authentication query, for a route's lookup to extend. */
export type AccountQuery = ReturnType<typeof selectAccount>;

// Runs on every request: compiled once (see src/db/reusable-statement.ts).
const findAccountByKeyHash = reusableStatement(1, selectAccount);

type AccountRow = Awaited<ReturnType<AccountQuery['executeTakeFirstOrThrow']>>;

/**
 * A lookup a route folds into its authentication statement, so that a hot endpoint needs one round
 * trip instead of two. `extend` LEFT JOINs the lookup's row to the caller's (tables `caller` and
 * `caller_realm`) and selects its columns, none starting with `caller_`. The whole row reaches the
 * route as `request.authLookupResult`; it is computed whether or not the credentials are
 * accepted, and used only if they are. `key` names the query: the same key must always build the
 * same query.
 */
export type AuthLookup =
  /** A lookup binding one value (bound exactly once: checked when first compiled). */
  | { key: string; argument: number; extend: (account: AccountQuery, argument: number) => Compilable<AccountRow> }
  /** A lookup of the caller's own row only. */
  | { key: string; argument?: undefined; extend: (account: AccountQuery) => Compilable<AccountRow> };

const accountWithLookupQueries = new Map<string, (reads: StatementRunner, keyHash: string, argument: number) => Promise<AccountRow[]>>();

function accountWithLookupQuery(lookup: AuthLookup) {
  if (lookup.argument === undefined) {
    const { extend } = lookup;
    const query = reusableStatement(1, (db: Database, keyHash: string) => extend(selectAccount(db, keyHash)));
    return (reads: StatementRunner, keyHash: string) => query(reads, keyHash);
  }
  const { extend } = lookup;
  return reusableStatement(2, (db: Database, keyHash: string, argument: number) => extend(selectAccount(db, keyHash), argument));
}

/** The caller's row, with the lookup's columns when there is one. */
function findAccount(reads: StatementRunner, keyHash: string, lookup: AuthLookup | undefined): Promise<AccountRow[]> {
  if (!lookup) return findAccountByKeyHash(reads, keyHash);
  let query = accountWithLookupQueries.get(lookup.key);
  if (!query) accountWithLookupQueries.set(lookup.key, (query = accountWithLookupQuery(lookup)));
  return query(reads, keyHash, lookup.argument ?? 0);
}

/**
 * Authenticates a request with one indexed query (spec §1.3 rows 6–11), which also computes the
 * route's lookup when one is given (its result: undefined when none ran, else the joined row).
 */
export async function authenticate(
  reads: StatementRunner,
  config: Config,
  request: FastifyRequest,
  lookup?: AuthLookup,
): Promise<{ caller: Caller; lookupResult: unknown }> {
  const { email, apiKey } = parseBasicAuthorization(request.headers.authorization);
  const digest = apiKeyDigest(apiKey);
  const [row] = await findAccount(reads, digest.hex, lookup);
  if (!row || !storedDigestMatches(row.caller_api_key_hash, digest.bytes)) throw unauthorized('Invalid API key');
  if (row.caller_delivery_email.toLowerCase() !== email.toLowerCase()) throw unauthorized('Invalid API key');
  if (row.caller_realm_deactivated) throw unauthorized('This organization has been deactivated');
  if (!row.caller_is_active) throw unauthorized('Account is deactivated');
  if (requestSubdomain(request, config) !== row.caller_realm_subdomain) {
    throw unauthorized('Account is not associated with this subdomain');
  }
  if (row.caller_bot_type === INCOMING_WEBHOOK_BOT) {
    throw unauthorized('This API is not available to incoming webhook bots.');
  }
  const caller: Caller = {
    id: row.caller_id,
    realmId: row.caller_realm_id,
    realmSubdomain: row.caller_realm_subdomain,
    realmCanAccessAllUsersGroup: row.caller_realm_can_access_all_users_group,
    deliveryEmail: row.caller_delivery_email,
    role: row.caller_role,
    botType: row.caller_bot_type,
  };
  return { caller, lookupResult: lookup && row };
}

/** The organization subdomain the request addresses (X-Forwarded-Host only behind a trusted proxy). */
export function requestSubdomain(request: FastifyRequest, config: Config): string {
  const forwarded = request.headers['x-forwarded-host'];
  const host = config.trustProxy && forwarded ? (Array.isArray(forwarded) ? forwarded[0] : forwarded) : request.headers.host;
  return subdomainOfHost(host, config);
}
