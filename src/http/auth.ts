import { isUtf8 } from 'node:buffer';
import type { FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import type { Config } from '../config.js';
import { API_KEY_PATTERN, apiKeyDigest, storedDigestMatches } from '../lib/api-keys.js';
import { subdomainOfHost } from '../lib/hosts.js';
import { type AccountBatches, type AccountRow, type AuthenticationRow, type AuthLookup, INCOMING_WEBHOOK_BOT } from './auth.repository.js';
import { badRequest, unauthorized } from './errors.js';
import { applyRateLimit, type RateLimitRule } from './rate-limit.js';

export interface Caller {
  id: number;
  realmId: number;
  realmSubdomain: string;
  /** 'everyone' or 'members' (guests restricted, docs/api.md §2.4). */
  realmCanAccessAllUsersGroup: string;
  deliveryEmail: string;
  role: number;
  botType: number | null;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const invalidHeader = () => unauthorized('Invalid authorization header for basic auth');

/** Splits a Basic Authorization header into email and key, with docs/api.md's messages (docs/api.md §1.3 rows 1–5). */
function parseBasicAuthorization(header: string | undefined): { email: string; apiKey: string } {
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
  // No stored address holds NUL (PostgreSQL's text and jsonb cannot carry it), so no account
  // matches (row 7); sent to the shared statement, it would fail every request batched with it.
  if (email.includes('\0')) throw unauthorized('Invalid API key');
  return { email, apiKey };
}

/** A route's lookup, folded into the authentication statement (see auth.repository.ts). */
export { type AuthLookup, AuthLookupQuery } from './auth.repository.js';

/**
 * Authenticates a request (docs/api.md §1.3 rows 6–11) and, when `rule` is given, decides its rate
 * limit (§1.10), with the route's lookup, in one statement. The messages follow the rows' order;
 * the address and organization checks are the statement's, so only accepted requests are counted.
 */
async function authenticate<Extra extends object>(
  accounts: AccountBatches,
  config: Config,
  request: FastifyRequest,
  lookup: AuthLookup<Extra> | undefined,
  rule: RateLimitRule | undefined,
): Promise<{ caller: Caller; row: AuthenticationRow<Extra> }> {
  const { email, apiKey } = parseBasicAuthorization(request.headers.authorization);
  const digest = apiKeyDigest(apiKey);
  const row = await accounts.find(
    {
      key_hash: digest.hex,
      email,
      subdomain: requestSubdomain(request, config),
      lookup_argument: lookup?.argument ?? 0,
    },
    lookup,
    rule,
  );
  if (!row || !storedDigestMatches(row.caller_api_key_hash, digest.bytes)) throw unauthorized('Invalid API key');
  if (!row.caller_email_matches) throw unauthorized('Invalid API key');
  if (row.caller_realm_deactivated) throw unauthorized('This organization has been deactivated');
  if (!row.caller_is_active) throw unauthorized('Account is deactivated');
  if (!row.caller_subdomain_matches) throw unauthorized('Account is not associated with this subdomain');
  if (row.caller_bot_type === INCOMING_WEBHOOK_BOT) throw unauthorized('This API is not available to incoming webhook bots.');
  const caller: Caller = {
    id: row.caller_id,
    realmId: row.caller_realm_id,
    realmSubdomain: row.caller_realm_subdomain,
    realmCanAccessAllUsersGroup: row.caller_realm_can_access_all_users_group,
    deliveryEmail: row.caller_delivery_email,
    role: row.caller_role,
    botType: row.caller_bot_type,
  };
  return { caller, row };
}

/**
 * The preHandler of an authenticated route (docs/api.md §1.1 steps 3–4): authentication, then the
 * rate limit, in one statement, before any parameter is parsed. Made once per route: a route that
 * declares `config.auth: false` needs no credentials and gets none (undefined); a route may fold a
 * lookup in (`config.authLookup`).
 */
export function authenticationHooks(accounts: AccountBatches, config: Config) {
  const rule = config.rateLimiting ? { maxRequests: config.rateLimitMaxRequests, windowSeconds: config.rateLimitWindowSeconds } : undefined;
  return (route: RouteOptions) => {
    if (route.config?.auth === false) return undefined;
    const authLookup = route.config?.authLookup;
    return async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
      const lookup = authLookup?.(request);
      const { caller, row } = await authenticate(accounts, config, request, lookup, rule);
      request.caller = caller;
      if (lookup) request.authLookupRow = { lookup, row };
      if (rule) applyRateLimit(reply, rule, row);
    };
  };
}

/** The authenticated caller of a route that needs credentials (its authentication hook ran). */
export function callerOf(request: FastifyRequest): Caller {
  if (!request.caller) throw new Error('callerOf: the route needs no credentials, so it has no caller');
  return request.caller;
}

/**
 * The row `lookup` added to the request's authentication statement, typed by the lookup; undefined
 * when the statement ran another lookup or none. A query's key is a hash of its SQL
 * (AuthLookupQuery), so a row of this key and argument has this lookup's columns.
 */
export function lookupRowOf<Extra extends object>(
  request: FastifyRequest,
  lookup: AuthLookup<Extra> | undefined,
): (AccountRow & Extra) | undefined {
  const found = request.authLookupRow;
  if (!lookup || !found || found.lookup.query.key !== lookup.query.key || found.lookup.argument !== lookup.argument) return undefined;
  return found.row as AccountRow & Extra;
}

/** The organization subdomain the request addresses (X-Forwarded-Host only behind a trusted proxy). */
export function requestSubdomain(request: FastifyRequest, config: Config): string {
  const forwarded = request.headers['x-forwarded-host'];
  const host = config.trustProxy && forwarded ? (Array.isArray(forwarded) ? forwarded[0] : forwarded) : request.headers.host;
  return subdomainOfHost(host, config);
}
