import { createHash } from 'node:crypto';
import formbody from '@fastify/formbody';
import Fastify, { type FastifyReply, type FastifyRequest } from 'fastify';
import pg from 'pg';
import { EMAIL_ADDRESS_VISIBILITY, ROLES } from '../src/zulip.js';

/**
 * The floor for GET /api/v1/users/{id}: what the stack (Node, Fastify, pg, PostgreSQL) costs
 * with nothing of ours in the way. Same database, same authentication semantics (Basic header,
 * SHA-256 of the key looked up by its unique index, address, active and organization checks),
 * same pool size, same user object keys, but ONE query that authenticates the caller and fetches
 * the target together; no hooks, no parameter layer, no logger, no query builder. Its queries are
 * named prepared statements, as the server's per-request statements are (src/db/reusable-statement.ts):
 * planned once per connection.
 *
 * Two more routes answer the same: /two-queries/… with two queries (authentication, then the
 * lookup, as the server does: the difference is the price of the extra round trip), and /plain/…
 * with an unnamed statement (the difference is what preparing is worth).
 *
 * The large-read floor: GET /api/v1/users, the caller's whole organization as json_agg's text (below).
 *
 * The write floor: POST /api/v1/users/me/subscriptions/properties (a 1-entry boolean change) and
 * PATCH /api/v1/navigation_views/{fragment}, each ONE autocommit prepared statement that
 * authenticates by key hash, applies the change, appends one audit row (settings), one event to
 * each of the caller's queues and NOTIFYs; the address and organization checks in JavaScript, as
 * for the read. No validation beyond that, no lock, no rate limiting.
 *
 * Environment: DATABASE_URL, PORT, DB_POOL_MAX (default 20, as the server's), FLOOR_LOG_FILE
 * (when set, one JSON line per request at info level goes there, as the server's production
 * default writes).
 */

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: Number(process.env.DB_POOL_MAX ?? 20) });
const LOG_FILE = process.env.FLOOR_LOG_FILE;
const app = Fastify({ logger: LOG_FILE ? { level: 'info', file: LOG_FILE } : false, disableRequestLogging: true });
await app.register(formbody);
if (LOG_FILE) {
  app.addHook('onResponse', (request, reply, done) => {
    request.log.info(
      { method: request.method, path: request.url.split('?', 1)[0], statusCode: reply.statusCode, responseTimeMs: reply.elapsedTime },
      'request completed',
    );
    done();
  });
}

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
  const keyHash = createHash('sha256')
    .update(decoded.slice(colon + 1).trim(), 'utf8')
    .digest('hex');
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
  const publicAddress = target.email_address_visibility === EMAIL_ADDRESS_VISIBILITY.everyone || target.bot_type !== null;
  return {
    result: 'success',
    msg: '',
    user: {
      email: publicAddress ? target.delivery_email : `user${target.id}@localhost`,
      user_id: target.id,
      avatar_version: target.avatar_version,
      is_admin: target.role <= ROLES.admin,
      is_owner: target.role === ROLES.owner,
      is_guest: target.role === ROLES.guest,
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

// The large-read floor (bench/large-org.ts): every user of the caller's organization as PostgreSQL's
// json_agg writes them (the user object's columns, not its computed keys), passed through as text.
const USERS_JSON_AGG = `WITH caller AS (SELECT ${CALLER_COLUMNS} FROM users c JOIN realms r ON r.id = c.realm_id WHERE c.api_key_hash = $1)
  SELECT caller.*, (SELECT json_agg(t ORDER BY t.id) FROM (SELECT ${TARGET_COLUMNS} FROM users t WHERE t.realm_id = caller.realm_id) t)::text AS members
  FROM caller`;

app.get('/api/v1/users', async (request, reply) => {
  const given = credentials(request.headers.authorization);
  if (!given) return unauthorized(reply, 'Invalid authorization header for basic auth');
  const row = (await pool.query<CallerRow & { members: string }>({ name: 'users_json_agg', text: USERS_JSON_AGG, values: [given.keyHash] }))
    .rows[0];
  if (!row || row.caller_email.toLowerCase() !== given.email.toLowerCase() || !row.caller_active || row.realm_deactivated) {
    return unauthorized(reply, 'Invalid API key');
  }
  if (row.subdomain !== subdomainOf(request.headers.host)) return unauthorized(reply, 'Account is not associated with this subdomain');
  return reply.type('application/json').send(`{"result":"success","msg":"","members":${row.members}}`);
});

// --- The write floor. ---

const CALLER_CTE = `caller AS (
  SELECT c.id, c.realm_id, ${CALLER_COLUMNS} FROM users c JOIN realms r ON r.id = c.realm_id WHERE c.api_key_hash = $1
)`;
/** Appends $4 (the event) to every queue of the user of `changed` and notifies, as the server does. */
const EVENT_CTES = `queued AS (
  UPDATE event_queues q SET next_event_id = q.next_event_id + 1 FROM changed
  WHERE q.user_id = changed.user_id RETURNING q.id, q.realm_id, q.next_event_id - 1 AS event_id
), inserted AS (
  INSERT INTO events (queue_id, id, realm_id, payload) SELECT id, event_id, realm_id, $4::json FROM queued RETURNING queue_id
)`;
const WRITE_RESULT = `SELECT caller.*, (SELECT count(*)::int FROM changed) AS changed,
  (SELECT count(*)::int FROM (SELECT pg_notify('zulip_events', queue_id::text) FROM inserted) n) AS notified
FROM caller`;
const SETTING_WRITE = `WITH ${CALLER_CTE}, changed AS (
  UPDATE subscriptions s SET pin_to_top = $3 FROM caller
  WHERE s.user_id = caller.id AND s.stream_id = $2 AND s.active
  RETURNING s.user_id, s.realm_id, s.stream_id
), audit AS (
  INSERT INTO subscription_audit_log (realm_id, acting_user_id, stream_id, property, old_value, new_value)
  SELECT realm_id, user_id, stream_id, 'pin_to_top', to_jsonb(NOT $3), to_jsonb($3) FROM changed
), ${EVENT_CTES}
${WRITE_RESULT}`;
const VIEW_WRITE = `WITH ${CALLER_CTE}, changed AS (
  UPDATE navigation_views v SET is_pinned = $3, name = $5 FROM caller
  WHERE v.user_id = caller.id AND v.fragment = $2 RETURNING v.user_id
), ${EVENT_CTES}
${WRITE_RESULT}`;

type WriteRow = CallerRow & { changed: number };

async function write(request: FastifyRequest, reply: FastifyReply, name: string, text: string, values: unknown[]) {
  const given = credentials(request.headers.authorization);
  if (!given) return unauthorized(reply, 'Invalid authorization header for basic auth');
  const row = (await pool.query<WriteRow>({ name, text, values: [given.keyHash, ...values] })).rows[0];
  if (!row || row.caller_email.toLowerCase() !== given.email.toLowerCase() || !row.caller_active || row.realm_deactivated) {
    return unauthorized(reply, 'Invalid API key');
  }
  if (row.subdomain !== subdomainOf(request.headers.host)) return unauthorized(reply, 'Account is not associated with this subdomain');
  if (row.changed === 0) return reply.code(400).send({ result: 'error', msg: 'Nothing to change', code: 'BAD_REQUEST' });
  return { result: 'success', msg: '' };
}

app.post<{ Body: { subscription_data?: string } }>('/api/v1/users/me/subscriptions/properties', async (request, reply) => {
  const [entry] = JSON.parse(request.body.subscription_data ?? '[]') as { stream_id: number; property: string; value: boolean }[];
  if (!entry || entry.property !== 'pin_to_top')
    return reply.code(400).send({ result: 'error', msg: 'pin_to_top only', code: 'BAD_REQUEST' });
  const event = JSON.stringify({
    type: 'subscription',
    op: 'update',
    property: 'pin_to_top',
    value: entry.value,
    stream_id: entry.stream_id,
  });
  return write(request, reply, 'setting_write', SETTING_WRITE, [entry.stream_id, entry.value, event]);
});

app.patch<{ Params: { '*': string }; Body: { is_pinned?: string; name?: string } }>(
  '/api/v1/navigation_views/*',
  async (request, reply) => {
    const fragment = request.params['*'];
    const isPinned = request.body.is_pinned === 'true';
    const name = request.body.name ?? null;
    const event = JSON.stringify({
      type: 'navigation_view',
      op: 'update',
      fragment,
      data: { ...(name !== null && { name }), is_pinned: isPinned },
    });
    return write(request, reply, 'view_write', VIEW_WRITE, [fragment, isPinned, event, name]);
  },
);

/**
 * The membership floor: DELETE and POST /api/v1/users/me/subscriptions naming channels of the
 * caller's organization, ONE statement each: authentication, the subscriptions deactivated or
 * upserted by name, and one event to every queue of the organization (the caller's queues the
 * subscription event, the others peer_remove / peer_add), with their NOTIFYs. No checks of names,
 * access or principals, no locks, no other reads.
 */
// caller has realm_id twice (CALLER_COLUMNS repeats it): `me` names the caller's organization once.
const MEMBERSHIP_CHANGED = (change: string) => `WITH ${CALLER_CTE}, me AS (
  SELECT c.id AS user_id, c.realm_id AS realm FROM users c WHERE c.api_key_hash = $1
), changed AS (
  ${change}
  RETURNING s.stream_id
), ids AS (
  SELECT coalesce(json_agg(stream_id ORDER BY stream_id), '[]') AS stream_ids FROM changed
), queued AS (
  UPDATE event_queues q SET next_event_id = q.next_event_id + 1 FROM me
  WHERE q.realm_id = me.realm AND EXISTS (SELECT 1 FROM changed)
  RETURNING q.id, q.realm_id, q.user_id = me.user_id AS own, q.next_event_id - 1 AS event_id
), inserted AS (
  INSERT INTO events (queue_id, id, realm_id, payload)
  SELECT queued.id, event_id, queued.realm_id, CASE WHEN own THEN json_build_object('type', 'subscription', 'op', $3::text, 'stream_ids', ids.stream_ids)
    ELSE json_build_object('type', 'subscription', 'op', 'peer_' || $3::text, 'stream_ids', ids.stream_ids, 'user_ids', json_build_array(me.user_id)) END
  FROM queued, ids, me
  RETURNING queue_id
)
${WRITE_RESULT}`;
const MEMBERSHIP_REMOVE = MEMBERSHIP_CHANGED(`UPDATE subscriptions s SET active = false FROM me, streams c
  WHERE s.user_id = me.user_id AND c.realm_id = me.realm AND lower(c.name) = ANY ($2::text[]) AND s.stream_id = c.id AND s.active AND $3::text <> ''`);
const MEMBERSHIP_ADD = MEMBERSHIP_CHANGED(`INSERT INTO subscriptions AS s (realm_id, user_id, stream_id)
  SELECT me.realm, me.user_id, c.id FROM me JOIN streams c ON c.realm_id = me.realm AND lower(c.name) = ANY ($2::text[])
  WHERE $3::text <> ''
  ON CONFLICT (user_id, stream_id) DO UPDATE SET active = true WHERE NOT s.active`);

app.post<{ Body: { subscriptions?: string } }>('/api/v1/users/me/subscriptions', async (request, reply) => {
  const names = (JSON.parse(request.body.subscriptions ?? '[]') as { name: string }[]).map((entry) => entry.name.toLowerCase());
  return write(request, reply, 'membership_add', MEMBERSHIP_ADD, [names, 'add']);
});

app.delete<{ Body: { subscriptions?: string } }>('/api/v1/users/me/subscriptions', async (request, reply) => {
  const names = (JSON.parse(request.body.subscriptions ?? '[]') as string[]).map((name) => name.toLowerCase());
  return write(request, reply, 'membership_remove', MEMBERSHIP_REMOVE, [names, 'remove']);
});

const shutdown = () => {
  void app
    .close()
    .then(() => pool.end())
    .then(() => process.exit(0));
};
process.once('SIGTERM', shutdown);
process.once('SIGINT', shutdown);

await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) });
console.log(`floor listening on ${JSON.stringify(app.server.address())}`);
