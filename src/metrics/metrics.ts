import { performance } from 'node:perf_hooks';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import { createHash } from 'node:crypto';
import type { Pool } from '../db/database.js';
import { isDatabaseUnavailable } from '../db/errors.js';
import type { DatabaseObserver } from '../db/observer.js';
import { type CounterSeries, type HistogramSeries, SeriesCounter, SeriesHistogram } from './series.js';

/**
 * The server's Prometheus metrics, one registry per app (buildApp): a test scrapes exactly what
 * production serves on METRICS_PORT. Every label value comes from a bounded set (route templates,
 * never a raw path). Names: `zulip_` prefix, base units, `_total` on counters.
 */

/** What the metrics read when scraped; nothing on the request path. */
export interface MetricsSources {
  pool: Pick<Pool, 'totalCount' | 'idleCount' | 'waitingCount'>;
  /** The pipelined connections' statements in flight per lane (PipelinedConnections.inFlightByLane). */
  lanes: { shortStatements?: () => readonly number[]; writes: () => readonly number[] };
  /** The database layer's reports (src/db/observer.ts): the metrics fill it in. */
  observer: DatabaseObserver;
}

/** The route label of a request no route matched (404, 405, OPTIONS): one value, whatever the path. */
const UNMATCHED = 'unmatched';

/** The method labels: the routes' methods (ROUTED_METHODS in src/http/routing.ts) and OPTIONS; `other` for the rest Node parses. */
const METHOD_LABELS = new Set(['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT', 'OPTIONS']);
const OTHER_METHOD = 'other';

const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
const DELIVERY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];
const STATEMENT_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
/** SQLSTATE of a cancelled statement: statement_timeout, or a request whose client left (pg_cancel_backend). */
const QUERY_CANCELED = '57014';

/** A route's series for one method: its duration, and its count by status. */
interface RouteSeries {
  duration: HistogramSeries;
  byStatus: Map<number, CounterSeries>;
}

/** The limit a 429 is the refusal of: zulip_rate_limited_total's `limit` label. */
export type RefusedLimit = 'rate_limit' | 'user_body_memory';
/** Why a request body was refused: zulip_request_body_refused_total's `reason` label. */
export type BodyRefusal = 'size' | 'fields' | 'timeout';

/** What a sweep deletes. */
type SweptKind = 'event_queues' | 'audit_rows';

export class Metrics {
  readonly registry = new Registry();

  private readonly httpRequests: SeriesCounter;
  private readonly httpDuration: SeriesHistogram;
  private inFlight = 0;

  /** From the error handler: counts the refusals and the database's failures among the errors answered. */
  readonly errorAnswered: (cause: unknown, limit: RefusedLimit | undefined, reason: BodyRefusal | undefined) => void;
  readonly authBatch: (size: number) => void;
  readonly queueRegistered: () => void;
  readonly heartbeatSent: () => void;
  readonly notificationReceived: () => void;
  readonly listenReconnected: () => void;
  readonly pollRecheck: (outcome: 'ok' | 'failed') => void;
  /** A woken poll answered `seconds` after the notification that woke it arrived. */
  readonly delivered: (seconds: number) => void;
  readonly swept: (kind: SweptKind, rows: number) => void;

  /** The series of each route template and method, made at their first request. */
  private readonly routes = new Map<string, Map<string, RouteSeries>>();
  private waitingPolls: () => number = () => 0;

  constructor({ pool, lanes, observer }: MetricsSources) {
    const registers = [this.registry];
    const counter = <L extends string = string>(name: string, help: string, labelNames: readonly L[] = []) =>
      new Counter<L>({ name, help, labelNames, registers });
    /** A gauge that reads its value when scraped. */
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          this.set(read());
        },
      });
    /** A histogram without labels: its one series. */
    const histogram = (name: string, help: string, buckets: number[]) =>
      new SeriesHistogram({ name, help, buckets, registers }).seriesFor({});

    collectDefaultMetrics({ register: this.registry });
    // Gauges named like counters, which `promtool check metrics` rejects; the same totals are the
    // sums of nodejs_active_handles, _requests and _resources (by type), which stay.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) {
      this.registry.removeSingleMetric(name);
    }
    let lastUtilization = performance.eventLoopUtilization();
    gauge('nodejs_eventloop_utilization_ratio', 'Share of the time since the previous scrape the event loop was busy', () => {
      const now = performance.eventLoopUtilization();
      const { utilization } = performance.eventLoopUtilization(now, lastUtilization);
      lastUtilization = now;
      return utilization;
    });

    this.httpRequests = new SeriesCounter({
      name: 'zulip_http_requests_total',
      help: 'HTTP requests answered, by method, route template and status',
      labelNames: ['method', 'route', 'status_code'],
      registers,
    });
    this.httpDuration = new SeriesHistogram({
      name: 'zulip_http_request_duration_seconds',
      help: "Time from a request's arrival to its answer, by method and route template",
      labelNames: ['method', 'route'],
      buckets: HTTP_BUCKETS,
      registers,
    });
    gauge('zulip_http_requests_in_flight', 'Requests received and not yet answered', () => this.inFlight);
    const rateLimited = counter(
      'zulip_http_rate_limited_total',
      "Requests refused with 429, by limit: the per-user rate limit, or the user's share of body memory",
      ['limit'],
    );
    const bodyRefused = counter(
      'zulip_http_body_refused_total',
      'Request bodies refused, by reason: size (413), field count (400), too slow (408)',
      ['reason'],
    );

    gauge('zulip_db_pool_connections', 'Connections of the pool, idle or lent out', () => pool.totalCount);
    gauge('zulip_db_pool_idle_connections', 'Idle connections of the pool', () => pool.idleCount);
    gauge('zulip_db_pool_waiting_clients', 'Requests waiting for a connection of the pool', () => pool.waitingCount);
    new Gauge({
      name: 'zulip_db_lane_statements_in_flight',
      help: 'Statements sent and not yet answered on each pipelined connection, by kind and lane',
      labelNames: ['kind', 'lane'],
      registers,
      collect() {
        this.reset();
        for (const [kind, read] of [
          ['short_statements', lanes.shortStatements],
          ['writes', lanes.writes],
        ] as const) {
          read?.().forEach((inFlight, lane) => this.set({ kind, lane: String(lane) }, inFlight));
        }
      },
    });
    const dbErrors = counter('zulip_db_errors_total', 'Statements PostgreSQL failed, by SQLSTATE class (the first two characters)', [
      'sqlstate_class',
    ]);
    const dbUnavailable = counter(
      'zulip_db_unavailable_total',
      'Requests answered 503 because the database could not be reached or a statement was cut off',
    );
    this.errorAnswered = (cause, limit, reason) => {
      if (isDatabaseUnavailable(cause)) dbUnavailable.inc();
      if (limit) rateLimited.inc({ limit });
      if (reason) bodyRefused.inc({ reason });
    };

    // The database layer's reports: statements, failures, connections, commit groups.
    const statementDuration = new SeriesHistogram({
      name: 'zulip_db_statement_duration_seconds',
      help: 'From sending a prepared statement on a pipelined connection to its answer (its wait in the pipeline included), by statement',
      labelNames: ['statement'],
      buckets: STATEMENT_BUCKETS,
      registers,
    });
    const timeouts = counter(
      'zulip_db_statement_timeouts_total',
      'Statements cut off by statement_timeout (SQLSTATE 57014 for a timeout; cancelled requests of clients that left are not counted)',
    );
    const opened = counter('zulip_db_connections_opened_total', 'Database connections opened, by kind', ['kind']);
    const lost = counter('zulip_db_connections_lost_total', 'Database connections lost (an error or a disconnect), by kind', ['kind']);
    const groups = histogram(
      'zulip_db_commit_group_size',
      'Write transactions committed together in one commit group',
      [1, 2, 4, 8, 16, 32],
    );
    // One series per statement name, made at its first answer. Names are per process, so the label
    // is the statement's kind, first table and a digest of its text: the same on every instance and restart.
    const byName = new Map<string, HistogramSeries>();
    let unnamed: HistogramSeries | undefined;
    observer.statementDone = (name, text, seconds) => {
      let series = name === undefined ? (unnamed ??= statementDuration.seriesFor({ statement: 'unnamed' })) : byName.get(name);
      if (!series) byName.set(name!, (series = statementDuration.seriesFor({ statement: statementLabel(text) })));
      series.observe(seconds);
    };
    observer.statementFailed = (error) => {
      const code = error.code ?? '';
      dbErrors.inc({ sqlstate_class: /^[0-9A-Z]{2}/.test(code) ? code.slice(0, 2) : 'unknown' });
      // PostgreSQL tells a timeout from another cancel only in the message text.
      if (code === QUERY_CANCELED && error.message.includes('statement timeout')) timeouts.inc();
    };
    observer.connectionOpened = (kind) => opened.inc({ kind });
    observer.connectionLost = (kind) => lost.inc({ kind });
    observer.commitGroup = (members) => groups.observe(members);
    const authBatchSize = histogram('zulip_db_auth_batch_size', 'Requests authenticated by one statement', BATCH_BUCKETS);
    this.authBatch = (size) => authBatchSize.observe(size);

    gauge('zulip_events_polls_waiting', 'Long polls waiting on this instance', () => this.waitingPolls());
    const queuesRegistered = counter('zulip_events_queues_registered_total', 'Event queues registered on this instance');
    this.queueRegistered = () => queuesRegistered.inc();
    const queuesExpired = counter('zulip_events_queues_expired_total', "Expired event queues deleted by this instance's sweeps");
    const heartbeats = counter('zulip_events_heartbeats_total', 'Heartbeat events sent to idle long polls');
    this.heartbeatSent = () => heartbeats.inc();
    const notifications = counter('zulip_events_notifications_total', 'NOTIFY messages received on the LISTEN connection');
    this.notificationReceived = () => notifications.inc();
    const reconnects = counter('zulip_events_listen_reconnects_total', 'Times the LISTEN connection was lost and opened again');
    this.listenReconnected = () => reconnects.inc();
    const rechecks = counter('zulip_events_poll_rechecks_total', 'Checks of all the waiting polls in one statement, by outcome', [
      'outcome',
    ]);
    this.pollRecheck = (outcome) => rechecks.inc({ outcome });
    const deliveryLatency = histogram(
      'zulip_events_delivery_seconds',
      'From the NOTIFY of a committed write reaching this instance to the answer of the poll it woke',
      DELIVERY_BUCKETS,
    );
    this.delivered = (seconds) => deliveryLatency.observe(seconds);
    const sweptRows = counter('zulip_sweep_deleted_rows_total', 'Rows deleted by the periodic sweeps, by kind', ['kind']);
    this.swept = (kind, rows) => {
      sweptRows.inc({ kind }, rows);
      if (kind === 'event_queues') queuesExpired.inc(rows);
    };
  }

  /** onRequest: one more request in flight, one less when its response closes (answered or abandoned). */
  readonly requestStarted = (_request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    this.inFlight++;
    reply.raw.once('close', this.requestClosed);
    done();
  };

  private readonly requestClosed = (): void => {
    this.inFlight--;
  };

  /** onResponse: the request's count and duration under its route template (routeOptions.url), never its path. */
  readonly requestAnswered = (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const method = request.method;
    const series = this.routeSeries(request.routeOptions.url ?? UNMATCHED, METHOD_LABELS.has(method) ? method : OTHER_METHOD);
    const status = reply.statusCode;
    let count = series.byStatus.get(status);
    if (!count) {
      count = this.httpRequests.seriesFor({ ...series.duration.labels, status_code: String(status) });
      series.byStatus.set(status, count);
    }
    count.add();
    series.duration.observe(reply.elapsedTime / 1000);
    done();
  };

  /** Where the waiting polls are counted (the events module's QueueWakeups). */
  watchWaitingPolls(count: () => number): void {
    this.waitingPolls = count;
  }

  private routeSeries(route: string, method: string): RouteSeries {
    let byMethod = this.routes.get(route);
    if (!byMethod) this.routes.set(route, (byMethod = new Map<string, RouteSeries>()));
    let series = byMethod.get(method);
    if (!series) {
      series = { duration: this.httpDuration.seriesFor({ method, route: readableRoute(route) }), byStatus: new Map() };
      byMethod.set(method, series);
    }
    return series;
  }
}

/** A route template without its parameters' regular expressions: `/api/v1/users/:user(^(?!me$).+$)` → `/api/v1/users/:user`. */
function readableRoute(template: string): string {
  let readable = '';
  let depth = 0;
  for (const char of template) {
    if (char === '(') depth++;
    else if (char === ')' && depth > 0) depth--;
    else if (depth === 0) readable += char;
  }
  return readable;
}

/** `select_users_1a2b3c4d`: what a statement does and to which table first, and a digest of its text. */
function statementLabel(text: string): string {
  const verb = /^\s*(?:with\b[\s\S]*?\)\s*)?(select|insert|update|delete)\b/i.exec(text)?.[1]?.toLowerCase() ?? 'statement';
  const table = /\b(?:from|into|update)\s+"?([a-z_]+)"?/i.exec(text)?.[1]?.toLowerCase() ?? 'none';
  return `${verb}_${table}_${createHash('sha256').update(text).digest('hex').slice(0, 8)}`;
}
