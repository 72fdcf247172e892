/**
 * `npm run check:metrics` (in .ci/run): a real server (src/server.ts, as `npm start` runs it) on an
 * embedded PostgreSQL serves a known set of requests from an independent client; then its metrics
 * listener is scraped once and checked:
 * - every family the README's "Operating it" lists is there;
 * - `zulip_http_requests_total` counts exactly the requests sent, by method, route and status;
 * - Prometheus's own linter (`promtool check metrics`) finds nothing to say;
 * - every metric deploy/alerts.yml and the Grafana dashboard use is one the server exports, and
 *   the dashboard's queries parse (`promtool check rules` on them as recording rules);
 * - the API port does not serve the metrics.
 * Exits 1 with the reasons on any failure; everything it starts is stopped on the way out.
 */
import { spawnSync } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as ops from '../src/cli/operations.js';
import { freePort } from '../src/lib/free-port.js';
import { baseEnvironment, REPO_ROOT, spawnServer } from './lib/processes.js';
import { startScratchDatabase } from './lib/scratch-database.js';

const HOST = 'metrics.example';

/** The families the issue asks for and the README lists (histograms by their base name). */
const EXPECTED_FAMILIES = [
  'zulip_http_requests_total',
  'zulip_http_request_duration_seconds',
  'zulip_http_requests_in_flight',
  'zulip_http_rate_limited_total',
  'zulip_http_body_refused_total',
  'zulip_db_pool_connections',
  'zulip_db_pool_idle_connections',
  'zulip_db_pool_waiting_clients',
  'zulip_db_lane_statements_in_flight',
  'zulip_db_errors_total',
  'zulip_db_unavailable_total',
  'zulip_db_auth_batch_size',
  'zulip_db_statement_duration_seconds',
  'zulip_db_statement_timeouts_total',
  'zulip_db_connections_opened_total',
  'zulip_db_connections_lost_total',
  'zulip_db_commit_group_size',
  'zulip_events_polls_waiting',
  'zulip_events_queues_registered_total',
  'zulip_events_queues_expired_total',
  'zulip_events_heartbeats_total',
  'zulip_events_notifications_total',
  'zulip_events_listen_reconnects_total',
  'zulip_events_poll_rechecks_total',
  'zulip_events_delivery_seconds',
  'zulip_sweep_deleted_rows_total',
  'nodejs_eventloop_lag_p99_seconds',
  'nodejs_eventloop_utilization_ratio',
  'nodejs_heap_size_used_bytes',
  'nodejs_gc_duration_seconds',
  'nodejs_active_handles',
  'process_cpu_seconds_total',
];

const problems: string[] = [];
const check = (ok: boolean, problem: string) => {
  if (!ok) problems.push(problem);
};

async function main(): Promise<void> {
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    const {
      directory: work,
      url: databaseUrl,
      handle,
    } = await startScratchDatabase({
      prefix: 'zulip-metrics-',
      onCleanup: (cleanup) => void cleanups.push(cleanup),
    });
    await ops.createRealm(handle.db, { subdomain: '', name: 'Metrics check' });
    await ops.createStream(handle.db, { realm: '', name: 'general' });
    const user = await ops.createUser(handle, { realm: '', email: 'user@metrics.example', fullName: 'Metrics User' });
    const other = await ops.createUser(handle, { realm: '', email: 'other@metrics.example', fullName: 'Other User' });
    const { stream_id: streamId } = await ops.subscribe(
      { db: handle.db, transactions: handle.transactions, maxPendingEvents: 10_000 },
      { realm: '', email: user.email, stream: 'general' },
    );

    const metricsPort = await freePort();
    const server = await spawnServer({
      args: ['--import', 'tsx', 'src/server.ts'],
      env: {
        ...baseEnvironment(),
        DATABASE_URL: databaseUrl,
        AVATAR_SALT: 'metrics-check',
        EXTERNAL_HOST: HOST,
        PORT: '0',
        HOST: '127.0.0.1',
        METRICS_PORT: String(metricsPort),
        LOG_LEVEL: 'info',
      },
    });
    cleanups.push(async () => {
      server.child.kill('SIGINT');
      await server.exited;
    });
    const sent = await sendRequests(
      server.url,
      `Basic ${Buffer.from(`${user.email}:${user.api_key}`).toString('base64')}`,
      other.user_id,
      streamId,
    );

    const scrape = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    check(scrape.status === 200, `GET /metrics answered ${scrape.status}`);
    const text = await scrape.text();
    checkFamilies(text);
    checkCounts(text, sent);
    await checkDeployReferences(text);
    checkWithPromtool(text);
    await checkDashboardQueries(work);
    check((await fetch(`${server.url}/metrics`)).status === 404, 'the API port serves /metrics');
    console.log(`[check:metrics] ${[...sent.values()].reduce((a, b) => a + b, 0)} requests sent, ${text.split('\n').length} lines scraped`);
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch((error: unknown) => problems.push(`cleanup: ${String(error)}`));
  }
}

/** Sends a known mix of requests; returns how many of each `method route status` were sent. */
async function sendRequests(base: string, authorization: string, otherId: number, streamId: number): Promise<Map<string, number>> {
  const sent = new Map<string, number>();
  const request = async (method: string, path: string, route: string, options: { auth?: boolean; form?: Record<string, string> } = {}) => {
    const headers: Record<string, string> = { host: HOST, 'accept-encoding': 'gzip' };
    if (options.auth !== false) headers.authorization = authorization;
    const init: RequestInit = { method, headers };
    if (options.form) init.body = new URLSearchParams(options.form);
    const response = await fetch(`${base}${path}`, init);
    const body = (await response.json()) as Record<string, unknown>;
    const key = `${method} ${route} ${response.status}`;
    sent.set(key, (sent.get(key) ?? 0) + 1);
    return body;
  };
  for (let i = 0; i < 7; i++) await request('GET', '/api/v1/users', '/api/v1/users');
  for (let i = 0; i < 3; i++) await request('GET', `/api/v1/users/${otherId}`, '/api/v1/users/:user');
  await request('GET', '/api/v1/users/999999', '/api/v1/users/:user');
  await request('GET', '/api/v1/users', '/api/v1/users', { auth: false });
  await request('GET', '/api/v1/no/such/thing', 'unmatched');
  const { queue_id: queueId } = await request('POST', '/api/v1/register', '/api/v1/register', {
    form: { event_types: '["subscription"]' },
  });
  // A long poll woken by a write: the delivery histogram and the notifications move.
  const poll = request('GET', `/api/v1/events?queue_id=${String(queueId)}&last_event_id=-1`, '/api/v1/events');
  await new Promise((resolve) => setTimeout(resolve, 300));
  await request('POST', '/api/v1/users/me/subscriptions/properties', '/api/v1/users/me/subscriptions/properties', {
    form: { subscription_data: JSON.stringify([{ stream_id: streamId, property: 'pin_to_top', value: true }]) },
  });
  const answer = await poll;
  check(Array.isArray(answer.events) && answer.events.length === 1, `the long poll answered ${JSON.stringify(answer)}`);
  return sent;
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function samplesOf(text: string): Sample[] {
  return text
    .split('\n')
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      if (!match) throw new Error(`not a sample line: ${line}`);
      const labels = Object.fromEntries(
        [...(match[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)].map((pair) => [pair[1]!, pair[2]!]),
      );
      return { name: match[1]!, labels, value: Number(match[3]) };
    });
}

function checkFamilies(text: string): void {
  const families = new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((match) => match[1]!));
  for (const name of EXPECTED_FAMILIES) check(families.has(name), `family ${name} is missing`);
}

function checkCounts(text: string, sent: Map<string, number>): void {
  const counted = new Map<string, number>();
  for (const sample of samplesOf(text).filter((s) => s.name === 'zulip_http_requests_total')) {
    counted.set(`${sample.labels.method} ${sample.labels.route} ${sample.labels.status_code}`, sample.value);
  }
  const keys = new Set([...sent.keys(), ...counted.keys()]);
  for (const key of keys) check(counted.get(key) === sent.get(key), `${key}: ${sent.get(key) ?? 0} sent, ${counted.get(key) ?? 0} counted`);
  const samples = samplesOf(text);
  const delivered = samples.find((s) => s.name === 'zulip_events_delivery_seconds_count')?.value;
  check(delivered === 1, `zulip_events_delivery_seconds_count is ${delivered}, expected 1`);
  const registered = samples.find((s) => s.name === 'zulip_events_queues_registered_total')?.value;
  check(registered === 1, `zulip_events_queues_registered_total is ${registered}, expected 1`);
}

/** Every metric name the alert rules and the dashboard use is exported (a renamed metric would leave them silent). */
async function checkDeployReferences(text: string): Promise<void> {
  const exported = new Set(
    [...text.matchAll(/^# TYPE (\S+) (\S+)/gm)].flatMap(([, name, type]) =>
      type === 'histogram' ? [`${name!}_bucket`, `${name!}_sum`, `${name!}_count`] : [name!],
    ),
  );
  for (const file of ['deploy/alerts.yml', 'deploy/grafana/dashboards/zulip.json']) {
    const content = await readFile(join(REPO_ROOT, file), 'utf8');
    for (const [name] of content.matchAll(/\b(?:zulip|nodejs|process)_[a-z0-9_]+/g)) {
      check(exported.has(name), `${file} uses ${name}, which the server does not export`);
    }
  }
}

/** The dashboard's queries parse as PromQL: promtool checks them as recording rules. */
async function checkDashboardQueries(work: string): Promise<void> {
  const dashboard = JSON.parse(await readFile(join(REPO_ROOT, 'deploy/grafana/dashboards/zulip.json'), 'utf8')) as {
    panels: { targets: { expr: string }[] }[];
  };
  const rules = dashboard.panels.flatMap((panel, p) =>
    panel.targets.map((target, t) => `      - record: dashboard:panel${p}_${t}\n        expr: ${JSON.stringify(target.expr)}`),
  );
  const file = join(work, 'dashboard-rules.yml');
  await writeFile(file, `groups:\n  - name: dashboard\n    rules:\n${rules.join('\n')}\n`);
  const result = spawnSync('promtool', ['check', 'rules', file], { encoding: 'utf8' });
  check(result.status === 0, `dashboard queries: ${result.stdout}${result.stderr}`);
  check(rules.length > 0, 'the dashboard has no queries');
}

function checkWithPromtool(text: string): void {
  const result = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  if (result.error) throw new Error(`promtool: ${result.error.message} (Debian: apt-get install prometheus)`);
  const output = `${result.stdout}${result.stderr}`.trim();
  check(result.status === 0 && output === '', `promtool check metrics: ${output || `exit ${result.status}`}`);
}

main().then(
  () => {
    if (problems.length > 0) {
      console.error(`[check:metrics] FAILED:\n  ${problems.join('\n  ')}`);
      process.exit(1);
    }
    console.log('[check:metrics] ok: every family present, counters equal to the requests sent, promtool clean');
  },
  (error: unknown) => {
    console.error('[check:metrics] error:', error);
    process.exit(1);
  },
);
