import type { FastifyRequest } from 'fastify';
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

// Runs on every request: compiled once (see reusable-query.ts); the marker is no valid hash.
const findAccountByKeyHash = reusableQuery(['\0key hash'], (db: Database, keyHash: string) =>
  db
    .selectFrom('users')
    .innerJoin('realms', 'realms.id', 'users.realm_id')
    .select([
      'users.id', 'users.realm_id', 'users.delivery_email', 'users.role', 'users.bot_type', 'users.is_active',
      'users.api_key_hash', 'users.enable_stream_desktop_notifications', 'users.enable_stream_audible_notifications',
      'users.enable_stream_push_notifications', 'users.enable_stream_email_notifications',
      'realms.subdomain', 'realms.deactivated as realm_deactivated', 'realms.can_access_all_users_group',
    ])
    .where('users.api_key_hash', '=', keyHash),
);

/** Authenticates a request with one indexed query (spec §1.3 rows 6–11). */
export async function authenticate(db: Database, config: Config, request: FastifyRequest): Promise<Caller> {
  const { email, apiKey } = parseBasicAuthorization(request.headers.authorization);
  const keyHash = hashApiKey(apiKey);
  const [row] = await findAccountByKeyHash(db, keyHash);
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
  return {
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
}

/** The organization subdomain the request addresses (X-Forwarded-Host only behind a trusted proxy). */
export function requestSubdomain(request: FastifyRequest, config: Config): string {
  const forwarded = request.headers['x-forwarded-host'];
  const host = config.trustProxy && forwarded ? (Array.isArray(forwarded) ? forwarded[0] : forwarded) : request.headers.host;
  return subdomainOfHost(host, config);
}
