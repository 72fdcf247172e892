import { createHash } from 'node:crypto';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import pg from 'pg';

/**
 * The floor for GET /api/v1/users/{id}: what the stack (Node, Fastify, pg, PostgreSQL) costs
 * with nothing of ours in the way. Same database, same authentication semantics (Basic header,
 * SHA-256 of the key looked up by its unique index, address, active and organization checks),
 * same pool size, same user object keys, but ONE query that authenticates the caller and fetches
 * the target together; no hooks, no parameter layer, no logger, no query builder. Its queries are
 * named prepared statements, as the server's per-request queries are (src/lib/prepared-statements.ts):
 * planned once per connection.
 *
 * Two more routes answer the same: /two-queries/… with two queries (authentication, then the
 * lookup, as the server does: the difference is the price of the extra round trip), and /plain/…
 * with an unnamed statement (the difference is what preparing is worth).
 *
 * Environment: DATABASE_URL, PORT, DB_POOL_MAX (default 20, as the server's).
 */

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: Number(process.env.DB_POOL_MAX ?? 20) });
const app = Fastify({ logger: false });

const CALLER_COLUMNS = `c.realm_id, c.delivery_email AS caller_email, c.is_active AS caller_active,
  r.deactivated AS realm_deactivated, r.subdomain`;
const TARGET_COLUMNS = `t.id, t.delivery_email, t.full_name, t.date_joined, t.is_active, t.role, t.bot_type,
  t.bot_owner_id, t.timezone, t.avatar_source, t.avatar_version, t.email_address_visibility, t.is_imported_stub`;
const ONE_QUERY = `
  SELECT ${CALLER_COLUMNS}, ${TARGET_COLUMNS}
  FROM users c
  JOIN realms r ON r.id = c.realm_id
  LEFT JOIN users t ON t.id = $2 AND t.realm_id = c.realm_id
  WHERE c.api_key_hash = $1`;
const AUTH_QUERY = `SELECT ${CALLER_COLUMNS} FROM users c JOIN realms r ON r.id = c.realm_id WHERE c.api_key_hash = $1`;
const TARGET_QUERY = `SELECT ${TARGET_COLUMNS} FROM users t WHERE t.realm_id = $1 AND t.id = $2`;

interface CallerRow {
  realm_id: number;
  caller_email: string;
  caller_active: boolean;
  realm_deactivated: boolean;
  subdomain: string;
}

interface TargetRow {
  id: number | null;
  delivery_email: string;
  full_name: string;
  date_joined: Date;
  is_active: boolean;
  role: number;
  bot_type: number | null;
  bot_owner_id: number | null;
  timezone: string;
  avatar_source: string;
  avatar_version: number;
  email_address_visibility: number;
  is_imported_stub: boolean;
}

const HOST_SUFFIX = '.localhost:9991';

const unauthorized = (reply: FastifyReply, msg: string) => reply.code(401).send({ result: 'error', msg, code: 'UNAUTHORIZED' });

function credentials(header: string | undefined): { email: string; keyHash: string } | undefined {
  if (!header?.toLowerCase().startsWith('basic ')) return undefined;
  const decoded = Buffer.from(header.slice(6).trim(), 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) return undefined;
  const keyHash = createHash('sha256').update(decoded.slice(colon + 1).trim(), 'utf8').digest('hex');
  return { email: decoded.slice(0, colon).trim(), keyHash };
}

/** The organization the Host names: `<subdomain>.localhost:9991`, anything else is the root one. */
function subdomainOf(host: string | undefined): string {
  const lowered = host?.toLowerCase() ?? '';
  return lowered.endsWith(HOST_SUFFIX) ? lowered.slice(0, -HOST_SUFFIX.length) : '';
}

function answer(request: FastifyRequest, reply: FastifyReply, email: string, caller: CallerRow | undefined, target: TargetRow | undefined) {
  if (!caller || caller.caller_email.toLowerCase() !== email.toLowerCase() || !caller.caller_active || caller.realm_deactivated) {
    return unauthorized(reply, 'Invalid API key');
  }
  if (caller.subdomain !== subdomainOf(request.headers.host)) return unauthorized(reply, 'Account is not associated with this subdomain');
  if (!target || target.id === null) return reply.code(400).send({ result: 'error', msg: 'No such user', code: 'BAD_REQUEST' });
  // The benchmark's target has a public address and a Gravatar avatar (the server decides both).
  const publicAddress = target.email_address_visibility === 1 || target.bot_type !== null;
  return {
    result: 'success',
    msg: '',
    user: {
      email: publicAddress ? target.delivery_email : `user${target.id}@localhost`,
      user_id: target.id,
      avatar_version: target.avatar_version,
      is_admin: target.role <= 200,
      is_owner: target.role === 100,
      is_guest: target.role === 600,
      role: target.role,
      is_bot: target.bot_type !== null,
      full_name: target.full_name,
      timezone: target.timezone,
      is_active: target.is_active,
      date_joined: `${target.date_joined.toISOString().slice(0, 16)}+00:00`,
      delivery_email: target.delivery_email,
      avatar_url: target.avatar_source === 'G' ? null : `/user_avatars/${target.avatar_version}.png`,
      is_imported_stub: target.is_imported_stub,
    },
  };
}

app.get('/health', async () => ({ status: 'ok' }));

app.get<{ Params: { id: string } }>('/api/v1/users/:id', async (request, reply) => {
  const given = credentials(request.headers.authorization);
  if (!given) return unauthorized(reply, 'Invalid authorization header for basic auth');
  const values = [given.keyHash, Number(request.params.id)];
  const row = (await pool.query<CallerRow & TargetRow>({ name: 'one_query', text: ONE_QUERY, values })).rows[0];
  return answer(request, reply, given.email, row, row);
});

// The same with a plain pool.query (an unnamed statement, planned on every execution): what
// preparing the statement is worth.
app.get<{ Params: { id: string } }>('/plain/api/v1/users/:id', async (request, reply) => {
  const given = credentials(request.headers.authorization);
  if (!given) return unauthorized(reply, 'Invalid authorization header for basic auth');
  const row = (await pool.query<CallerRow & TargetRow>(ONE_QUERY, [given.keyHash, Number(request.params.id)])).rows[0];
  return answer(request, reply, given.email, row, row);
});

app.get<{ Params: { id: string } }>('/two-queries/api/v1/users/:id', async (request, reply) => {
  const given = credentials(request.headers.authorization);
  if (!given) return unauthorized(reply, 'Invalid authorization header for basic auth');
  const caller = (await pool.query<CallerRow>({ name: 'auth_query', text: AUTH_QUERY, values: [given.keyHash] })).rows[0];
  if (!caller) return unauthorized(reply, 'Invalid API key');
  const values = [caller.realm_id, Number(request.params.id)];
  const target = (await pool.query<TargetRow>({ name: 'target_query', text: TARGET_QUERY, values })).rows[0];
  return answer(request, reply, given.email, caller, target);
});

const shutdown = () => {
  void app.close().then(() => pool.end()).then(() => process.exit(0));
};
process.once('SIGTERM', shutdown);
process.once('SIGINT', shutdown);

await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) });
console.log(`floor listening on ${JSON.stringify(app.server.address())}`);
