import type { FastifyRequest } from 'fastify';
import { type AliasableExpression, type Expression, sql } from 'kysely';
import type { Config } from '../config.js';
import type { Database } from '../db/database.js';
import { API_KEY_PATTERN, hashApiKey, hashesEqual } from '../lib/api-keys.js';
import { subdomainOfHost } from '../lib/hosts.js';
import { reusableQuery } from '../lib/reusable-query.js';
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
  enableStreamDesktopNotifications: boolean;
  enableStreamAudibleNotifications: boolean;
  enableStreamPushNotifications: boolean;
  enableStreamEmailNotifications: boolean;
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
  let decoded: string;
  try {
    decoded = new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(encoded, 'base64'));
  } catch {
    throw invalidHeader();
  }
  const parts = decoded.split(':');
  if (parts.length !== 2) throw invalidHeader();
  const email = parts[0]!.trim();
  const apiKey = parts[1]!.trim();
  if (!API_KEY_PATTERN.test(apiKey)) throw unauthorized('Malformed API key');
  return { email, apiKey };
}

function selectAccount(db: Database, keyHash: string) {
  return db
    .selectFrom('users as caller')
    .innerJoin('realms as caller_realm', 'caller_realm.id', 'caller.realm_id')
    .select([
      'caller.id', 'caller.realm_id', 'caller.delivery_email', 'caller.role', 'caller.bot_type', 'caller.is_active',
      'caller.api_key_hash', 'caller.enable_stream_desktop_notifications', 'caller.enable_stream_audible_notifications',
      'caller.enable_stream_push_notifications', 'caller.enable_stream_email_notifications',
      'caller_realm.subdomain', 'caller_realm.deactivated as realm_deactivated', 'caller_realm.can_access_all_users_group',
    ])
    .where('caller.api_key_hash', '=', keyHash);
}

// Runs on every request: compiled once (see reusable-query.ts); the marker is no valid hash.
const KEY_HASH_MARKER = '\0key hash';
const findAccountByKeyHash = reusableQuery([KEY_HASH_MARKER], selectAccount);

/**
 * A lookup a route folds into its authentication statement, so that a hot endpoint needs one round
 * trip instead of two. It adds one column, computed in the same statement as the caller's row:
 * `column` may refer to the caller's organization as `callerRealmId` (which must be its only
 * reference to the outer query). The value reaches the route as `request.authLookupResult`; it is
 * computed whether or not the credentials are accepted, and used only if they are.
 */
export interface AuthLookup {
  /** One compiled statement per key: the same key must always build the same column. */
  key: string;
  /** The one value the column binds: a positive integer (-1 stands for it while compiling). */
  argument: number;
  column: (db: Database, argument: number, callerRealmId: Expression<number>) => AliasableExpression<unknown>;
}

const ARGUMENT_MARKER = -1;
const accountWithLookupQueries = new Map<string, ReturnType<typeof accountWithLookupQuery>>();
const accountWithLookupQuery = (lookup: AuthLookup) =>
  reusableQuery([KEY_HASH_MARKER, ARGUMENT_MARKER], (db: Database, keyHash: string, argument: number) =>
    selectAccount(db, keyHash).select(lookup.column(db, argument, sql.ref<number>('caller.realm_id')).as('lookup')),
  );

async function findAccount(db: Database, keyHash: string, lookup: AuthLookup | undefined) {
  if (!lookup) return { row: (await findAccountByKeyHash(db, keyHash))[0], lookupResult: undefined };
  let query = accountWithLookupQueries.get(lookup.key);
  if (!query) accountWithLookupQueries.set(lookup.key, (query = accountWithLookupQuery(lookup)));
  const [row] = await query(db, keyHash, lookup.argument);
  return { row, lookupResult: row?.lookup };
}

/**
 * Authenticates a request with one indexed query (spec §1.3 rows 6–11), which also computes the
 * route's lookup when one is given (its result: undefined when none ran, else the column's value).
 */
export async function authenticate(
  db: Database,
  config: Config,
  request: FastifyRequest,
  lookup?: AuthLookup,
): Promise<{ caller: Caller; lookupResult: unknown }> {
  const { email, apiKey } = parseBasicAuthorization(request.headers.authorization);
  const keyHash = hashApiKey(apiKey);
  const { row, lookupResult } = await findAccount(db, keyHash, lookup);
  if (!row || !hashesEqual(row.api_key_hash, keyHash)) throw unauthorized('Invalid API key');
  if (row.delivery_email.toLowerCase() !== email.toLowerCase()) throw unauthorized('Invalid API key');
  if (row.realm_deactivated) throw unauthorized('This organization has been deactivated');
  if (!row.is_active) throw unauthorized('Account is deactivated');
  if (requestSubdomain(request, config) !== row.subdomain) {
    throw unauthorized('Account is not associated with this subdomain');
  }
  if (row.bot_type === INCOMING_WEBHOOK_BOT) {
    throw unauthorized('This API is not available to incoming webhook bots.');
  }
  const caller: Caller = {
    id: row.id,
    realmId: row.realm_id,
    realmSubdomain: row.subdomain,
    realmCanAccessAllUsersGroup: row.can_access_all_users_group,
    deliveryEmail: row.delivery_email,
    role: row.role,
    botType: row.bot_type,
    enableStreamDesktopNotifications: row.enable_stream_desktop_notifications,
    enableStreamAudibleNotifications: row.enable_stream_audible_notifications,
    enableStreamPushNotifications: row.enable_stream_push_notifications,
    enableStreamEmailNotifications: row.enable_stream_email_notifications,
  };
  return { caller, lookupResult };
}

/** The organization subdomain the request addresses (X-Forwarded-Host only behind a trusted proxy). */
export function requestSubdomain(request: FastifyRequest, config: Config): string {
  const forwarded = request.headers['x-forwarded-host'];
  const host = config.trustProxy && forwarded ? (Array.isArray(forwarded) ? forwarded[0] : forwarded) : request.headers.host;
  return subdomainOfHost(host, config);
}
