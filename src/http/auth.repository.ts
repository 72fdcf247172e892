import { type Expression, type QueryCreator, sql } from 'kysely';
import type { DB } from '../db/types.js';
import { valueMayCause } from '../db/errors.js';
import { Batcher } from '../lib/batcher.js';
import { type ReusableStatement, reusableStatement, type Statement, type StatementRunner } from '../db/reusable-statement.js';
import type { RateLimitColumns, RateLimitRule } from './rate-limit.js';

/**
 * The one statement the authenticated requests run: per request, the account of its key, whether
 * its address and organization fit that account (decided here, so that the rate limiter below and
 * the messages of src/http/auth.ts never disagree), the rate-limit decision when rate limiting is
 * on, and a route's lookup (AuthLookup) when it has one. The requests of one turn of the event
 * loop share one statement (AccountBatches): a statement's fixed cost in PostgreSQL is most of a
 * small one's. A named prepared statement on the short-statement connections.
 */

export const INCOMING_WEBHOOK_BOT = 2;

/** One request of a batch, as the statement receives it (one element of a JSON array). */
interface AccountRequest {
  ord: number;
  key_hash: string;
  /** The address of the credentials, compared ignoring case (PostgreSQL's lower(), as the unique index on addresses). */
  email: string;
  /** The organization the request's Host names. */
  subdomain: string;
  /** The value the route's lookup uses (0 when it uses none). */
  lookup_argument: number;
}

export type AccountRequestFields = Omit<AccountRequest, 'ord'>;

type DBWithRequests = DB & { request: AccountRequest };

// The caller's columns carry a caller_ prefix, so that a route's lookup can add its own row's
// columns under their plain names. Only what every route needs: each column costs the hottest
// endpoint about 1.5 µs of row decoding in node-postgres; a route that needs more of the caller's
// row asks for it with a lookup.
function selectAccounts(db: QueryCreator<DBWithRequests>) {
  return (
    db
      .selectFrom('request as r')
      // One index probe per request: OFFSET 0 keeps the lookup a lateral subquery. Flattened, the
      // planner joins the batch (a JSON array it takes for 100 rows) to every user of the table.
      .innerJoinLateral(
        (eb) => eb.selectFrom('users').selectAll('users').whereRef('users.api_key_hash', '=', 'r.key_hash').offset(sql.lit(0)).as('caller'),
        (join) => join.onTrue(),
      )
      .innerJoin('realms as caller_realm', 'caller_realm.id', 'caller.realm_id')
      .select([
        'r.ord',
        'r.lookup_argument',
        'caller.id as caller_id',
        'caller.realm_id as caller_realm_id',
        'caller.delivery_email as caller_delivery_email',
        'caller.role as caller_role',
        'caller.bot_type as caller_bot_type',
        'caller.is_active as caller_is_active',
        'caller.api_key_hash as caller_api_key_hash',
        'caller_realm.subdomain as caller_realm_subdomain',
        'caller_realm.deactivated as caller_realm_deactivated',
        'caller_realm.can_access_all_users_group as caller_realm_can_access_all_users_group',
      ])
      .select((eb) => [
        eb(eb.fn('lower', ['caller.delivery_email']), '=', eb.fn('lower', ['r.email'])).as('caller_email_matches'),
        eb('caller_realm.subdomain', '=', eb.ref('r.subdomain')).as('caller_subdomain_matches'),
      ])
  );
}

/** The authentication query, for a route's lookup to extend. */
export type AccountQuery = ReturnType<typeof selectAccounts>;
export type AccountRow = Awaited<ReturnType<AccountQuery['executeTakeFirstOrThrow']>>;

/**
 * A lookup a route folds into its authentication statement, so that a hot endpoint needs one round
 * trip instead of two: its query (AuthLookupQuery, defined once) and, per request, the value it
 * reads (`argument`; 0 for a lookup of the caller's own row only).
 */
export interface AuthLookup<Extra extends object> {
  query: AuthLookupQuery<Extra>;
  argument: number;
}

export type AuthenticationRow<Extra extends object> = AccountRow & Extra & RateLimitColumns;

interface BatchArgs extends Record<string, unknown> {
  /** The batch's requests (AccountRequest objects), as one JSON array. */
  requests: string;
  /** The rate-limit rule: used only when rate limiting is on. */
  maxRequests: number;
  windowSeconds: number;
}

/**
 * The sliding-log decision (docs/api.md §1.10), in the same statement, only for a request the
 * account accepts: a user's first request inserts its row; later ones take ON CONFLICT DO UPDATE,
 * which locks the row (found by its unique index, whatever the table's statistics say) and
 * evaluates SET against its latest committed version, so concurrent requests (on any instance) are
 * serialized per user and never both take the last slot. `hits` holds the times of the accepted
 * requests still in the window; a refused request records nothing but the decision. The time is
 * the request's own (read before the lock): a request decided after a later one counts that later
 * one in its window, which only ever refuses more, never accepts more than the maximum.
 *
 * A batch holds at most one request per key (AccountBatches), so ON CONFLICT never meets one row
 * twice; its rows are taken in user id order, as every batch's are, so that two batches sharing
 * users wait for each other instead of deadlocking. Raw SQL: the builder cannot say `SET (a, b, c)
 * = (subquery)`, and the three columns must come from one evaluation of the window (OFFSET 0 keeps
 * it one subquery: pulled up, its ARRAY(...) would be computed once per reference). With more than
 * max hits (the limit was lowered), a slot frees when the (count − max + 1)-th oldest leaves.
 */
const decision = (args: BatchArgs) => {
  const max = sql`${args.maxRequests}::integer`;
  const span = sql`(${args.windowSeconds}::integer * interval '1 second')`;
  return sql<RateLimitColumns & { user_id: number }>`(
  INSERT INTO rate_limit_logs AS log (user_id, realm_id, hits, last_checked_at, last_accepted)
  SELECT account.caller_id, account.caller_realm_id, ARRAY[clock.t], clock.t, true
  FROM account, (SELECT clock_timestamp() AS t) AS clock
  WHERE account.caller_email_matches AND account.caller_subdomain_matches AND account.caller_is_active
    AND NOT account.caller_realm_deactivated AND account.caller_bot_type IS DISTINCT FROM ${sql.lit(INCOMING_WEBHOOK_BOT)}
  ORDER BY account.caller_id
  ON CONFLICT (user_id) DO UPDATE SET (hits, last_checked_at, last_accepted) = (
    SELECT CASE WHEN cardinality(recent.hits) < ${max} THEN recent.hits || excluded.last_checked_at ELSE recent.hits END,
           excluded.last_checked_at,
           cardinality(recent.hits) < ${max}
    FROM (
      SELECT ARRAY(SELECT hit FROM unnest(log.hits) AS hit WHERE hit > excluded.last_checked_at - ${span} ORDER BY hit) AS hits
      OFFSET 0
    ) AS recent
  )
  RETURNING user_id,
            last_accepted AS rate_limit_accepted,
            cardinality(hits) AS rate_limit_used,
            extract(epoch FROM last_checked_at)::float8 AS rate_limit_now,
            extract(epoch FROM hits[cardinality(hits) - ${max} + 1] + ${span} - last_checked_at)::float8 AS rate_limit_retry_after
)`;
};

function accountStatement<Extra extends object>(extend: LookupExtension<Extra>, rateLimited: boolean) {
  const account = (db: QueryCreator<DBWithRequests>) => extend(selectAccounts(db), sql.ref<number>('r.lookup_argument'));
  const names: (keyof BatchArgs & string)[] = ['requests', ...(rateLimited ? (['maxRequests', 'windowSeconds'] as const) : [])];
  return reusableStatement<BatchArgs, AuthenticationRow<Extra>>(names, (db, args) => {
    const withAccount = db
      .with(
        'request(ord, key_hash, email, subdomain, lookup_argument)',
        () => sql<AccountRequest>`(
        SELECT * FROM jsonb_to_recordset(${args.requests}::jsonb)
          AS r(ord integer, key_hash text, email text, subdomain text, lookup_argument integer))`,
      )
      .with('account', (creator) => account(creator));
    if (!rateLimited) {
      return withAccount
        .selectFrom('account')
        .selectAll()
        .select([
          sql<null>`NULL`.as('rate_limit_accepted'),
          sql<null>`NULL`.as('rate_limit_used'),
          sql<null>`NULL`.as('rate_limit_now'),
          sql<null>`NULL`.as('rate_limit_retry_after'),
        ]);
    }
    return withAccount
      .with('decision', () => decision(args))
      .selectFrom('account')
      .leftJoin('decision', 'decision.user_id', 'account.caller_id')
      .selectAll('account')
      .select(['decision.rate_limit_accepted', 'decision.rate_limit_used', 'decision.rate_limit_now', 'decision.rate_limit_retry_after']);
  });
}

/**
 * How a lookup extends the authentication query: joins its row to the caller's (tables `caller` and
 * `caller_realm`; one row per request, by index: a LEFT JOIN LATERAL … OFFSET 0, as the caller's)
 * and selects its columns, none starting with `caller_` or `rate_limit_`. `argument` is the
 * request's value (its column in the query); a lookup of the caller's own row ignores it. The row
 * is computed whether or not the credentials are accepted, and used only if they are.
 */
type LookupExtension<Extra extends object> = (account: AccountQuery, argument: Expression<number>) => Expression<AccountRow & Extra>;

/** One authentication statement (a lookup, rate limited or not), compiled: `key` is its name, a hash of its SQL. */
interface AuthVariant {
  key: string;
  run: ReusableStatement<BatchArgs, AuthenticationRow<object>>;
}

/**
 * A lookup's query, defined once at module level (scripts/lib/sql-registry.ts lists every one, so that
 * `npm run sql` writes its statements to sql/auth/). Its two statements (rate limited or not) are
 * built and compiled on first use, then kept here: a request only picks one. Batches and lookup
 * rows are matched by the statements' names, which are hashes of their SQL, so two lookups share
 * a batch or a row only when they run the same query, whatever they are called.
 */
export class AuthLookupQuery<Extra extends object> {
  private readonly variants: [AuthVariant | undefined, AuthVariant | undefined] = [undefined, undefined];

  constructor(
    /** Names its files in sql/auth/. */
    readonly name: string,
    private readonly extend: LookupExtension<Extra>,
  ) {}

  /** The authentication statement with this lookup, with the rate-limit decision or without. */
  variant(rateLimited: boolean): AuthVariant {
    const index = rateLimited ? 1 : 0;
    let variant = this.variants[index];
    if (!variant) {
      const run = accountStatement(this.extend, rateLimited);
      variant = this.variants[index] = { key: run.statement().name, run };
    }
    return variant;
  }

  /** The text and name of its statement (scripts/lib/sql-registry.ts). */
  statement(rateLimited: boolean): Required<Statement> {
    return this.variant(rateLimited).run.statement();
  }

  /** Names the query: the name of its statement without the rate-limit decision. */
  get key(): string {
    return this.variant(false).key;
  }
}

/** The authentication statement of a route without a lookup. */
export const NO_LOOKUP = new AuthLookupQuery<object>('caller', (account) => account);

/** Bounds one statement's work (and its time ahead of the statements pipelined behind it). */
const MAX_BATCH = 256;

type Found = AuthenticationRow<object> | undefined;

/**
 * The authentication statements of one app: the requests of one turn of the event loop that need
 * the same statement are sent together, as one, when the turn ends. Requests with one key go in
 * separate batches, in their order: one user's decisions stay one after the other.
 *
 * A batch that fails in a way one request's values can cause (valueMayCause) is sent again one
 * request at a time, so that such a request cannot fail the others of its turn. Any other failure
 * (the database unavailable, read-only or out of space) each would meet alone too.
 */
export class AccountBatches {
  private readonly batchers = new Map<string, Batcher<AccountRequestFields, Found>>();

  constructor(
    private readonly shortStatements: StatementRunner,
    /** Told the size of every statement sent (the metrics' batch sizes). */
    private readonly onBatch?: (size: number) => void,
  ) {}

  /** The account of the request's key with the checks, the decision and the lookup; undefined when no account has the key. */
  find<Extra extends object>(
    request: AccountRequestFields,
    lookup: AuthLookup<Extra> | undefined,
    rule: RateLimitRule | undefined,
  ): Promise<AuthenticationRow<Extra> | undefined> {
    const variant = (lookup?.query ?? NO_LOOKUP).variant(rule !== undefined);
    const statement = `${variant.key}|${rule ? `${rule.maxRequests}/${rule.windowSeconds}` : ''}`;
    let batcher = this.batchers.get(statement);
    if (!batcher) {
      const send = (requests: AccountRequestFields[]) => this.send(requests, variant, rule);
      batcher = new Batcher({ max: MAX_BATCH, key: (sent) => sent.key_hash, send, retryAlone: valueMayCause });
      this.batchers.set(statement, batcher);
    }
    return batcher.add(request) as Promise<AuthenticationRow<Extra> | undefined>;
  }

  private async send(requests: AccountRequestFields[], variant: AuthVariant, rule: RateLimitRule | undefined): Promise<Found[]> {
    const args = {
      requests: JSON.stringify(requests.map((request, ord) => ({ ...request, ord }))),
      maxRequests: rule?.maxRequests ?? 0,
      windowSeconds: rule?.windowSeconds ?? 0,
    };
    this.onBatch?.(requests.length);
    const byOrd = new Map((await variant.run(this.shortStatements, args)).map((row) => [row.ord, row]));
    return requests.map((_, ord) => byOrd.get(ord));
  }
}
