import http from 'node:http';
import { sql } from 'kysely';
import { Counter, Histogram, Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { LISTENER_APPLICATION_NAME } from '../src/db/event-listener.js';
import { startMetricsListener } from '../src/metrics/listener.js';
import { SeriesCounter, SeriesHistogram } from '../src/metrics/series.js';
import { api, createTestContext, type TestAppOptions, type TestContext } from './helpers/app.js';
import { getEvents, registerQueue, setPinToTop } from './helpers/events.js';
import { ids } from './helpers/fixture.js';
import { eventually } from './helpers/wait.js';

/**
 * The Prometheus metrics (src/metrics/metrics.ts): scraped after real requests, every counter and
 * histogram moved by exactly what was sent, and no label carries a path or a user id.
 */

let ctx: TestContext;

afterEach(async () => {
  await ctx?.close();
});

async function setUp(env: Record<string, string> = {}, options: TestAppOptions = {}): Promise<TestContext> {
  ctx = await createTestContext({ ...options, env: { METRICS_PORT: '0', ...env } });
  return ctx;
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of the text format, as Prometheus reads them. */
function parse(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const pair of (match[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]!] = pair[2]!;
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

async function scrape(): Promise<Sample[]> {
  return parse(await ctx.app.metrics!.registry.metrics());
}

/** The value of one sample (0 when absent: a counter not yet incremented). */
function valueOf(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  const found = samples.filter(
    (sample) => sample.name === name && Object.entries(labels).every(([key, value]) => sample.labels[key] === value),
  );
  if (found.length > 1) throw new Error(`${name} ${JSON.stringify(labels)} matches ${found.length} samples`);
  return found[0]?.value ?? 0;
}

const USERS = { method: 'GET', route: '/api/v1/users', status_code: '200' };

describe('HTTP metrics', () => {
  it('counts each request once under its route template, method and status, with its duration', async () => {
    await setUp();
    const before = await scrape();
    for (let i = 0; i < 3; i++) expect((await api(ctx.app, { url: '/api/v1/users', as: 'U' })).statusCode).toBe(200);
    expect((await api(ctx.app, { url: `/api/v1/users/${ids.V}`, as: 'U' })).statusCode).toBe(200);
    expect((await api(ctx.app, { url: '/api/v1/users/987654', as: 'U' })).statusCode).toBe(400);
    expect((await api(ctx.app, { url: '/api/v1/users' })).statusCode).toBe(401);
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string>) => valueOf(after, name, labels) - valueOf(before, name, labels);

    expect(delta('zulip_http_requests_total', USERS)).toBe(3);
    expect(delta('zulip_http_requests_total', { ...USERS, status_code: '401' })).toBe(1);
    expect(delta('zulip_http_requests_total', { method: 'GET', route: '/api/v1/users/:user', status_code: '200' })).toBe(1);
    expect(delta('zulip_http_requests_total', { method: 'GET', route: '/api/v1/users/:user', status_code: '400' })).toBe(1);
    const route = { method: 'GET', route: '/api/v1/users' };
    expect(delta('zulip_http_request_duration_seconds_count', route)).toBe(4);
    expect(delta('zulip_http_request_duration_seconds_bucket', { ...route, le: '+Inf' })).toBe(4);
    expect(delta('zulip_http_request_duration_seconds_sum', route)).toBeGreaterThan(0);
    expect(valueOf(after, 'zulip_http_requests_in_flight')).toBe(0);
  });

  it('puts no raw path, user id or other unbounded value in any label', async () => {
    await setUp();
    const paths = [
      `/api/v1/users/${ids.V}`,
      '/api/v1/users/987654',
      '/api/v1/no/such/path/424242',
      '/api/v1/users/u@example.com',
      '/whatever?x=777777',
    ];
    for (const url of paths) await api(ctx.app, { url, as: 'U' });
    await api(ctx.app, { method: 'OPTIONS', url: '/api/v1/users/313131' });
    const samples = await scrape();
    const routeLabels = new Set(samples.filter((sample) => sample.labels.route !== undefined).map((sample) => sample.labels.route));
    expect([...routeLabels].sort()).toEqual(['/api/v1/users/:user', 'unmatched']);
    for (const sample of samples) {
      for (const value of Object.values(sample.labels)) {
        expect(value).not.toMatch(/987654|424242|313131|777777|@|\?/);
        // User ids of the fixture never appear as a label value (status codes, lanes and buckets are numbers of their own).
        if (sample.name.startsWith('zulip_') && !['status_code', 'lane', 'le'].some((name) => sample.labels[name] === value)) {
          expect(value).not.toMatch(new RegExp(`^(${Object.values(ids).join('|')})$`));
        }
      }
    }
  });

  it('folds the methods no route answers into one label value: 1,500 hostile requests add few series', async () => {
    await setUp();
    const before = await scrape();
    const paths = ['/api/v1/users', '/api/v1/users/me', '/api/v1/nope', '/health', '/'];
    const sent = new Map<string, number>();
    for (let i = 0; i < 1500; i++) {
      // Every method Node's parser accepts (CONNECT aside: it never reaches a request handler).
      const methods = http.METHODS.filter((method) => method !== 'CONNECT');
      const method = methods[i % methods.length]!;
      const headers: Record<string, string> = { host: 'chat.example.com' };
      if (i % 3 === 0) headers['content-type'] = 'text/plain';
      const res = await ctx.app.inject({ method: method as 'GET', url: paths[i % paths.length]!, headers, payload: 'x=1' });
      expect(res.statusCode, `${method}`).toBeLessThan(500);
      if (!['DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT'].includes(method)) {
        const key = `${res.statusCode}`;
        sent.set(key, (sent.get(key) ?? 0) + 1);
      }
    }
    const after = await scrape();
    const methodLabels = new Set(after.filter((sample) => sample.labels.method !== undefined).map((sample) => sample.labels.method));
    expect([...methodLabels].sort()).toEqual(['DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT', 'other']);
    for (const [status, count] of sent) {
      const labels = { method: 'other', route: 'unmatched', status_code: status };
      expect(valueOf(after, 'zulip_http_requests_total', labels) - valueOf(before, 'zulip_http_requests_total', labels), status).toBe(
        count,
      );
    }
    // Every series of the registry (process metrics included): 107 before, 460 after (2026-11-27), over a thousand with a label per method.
    expect(after.length).toBeLessThanOrEqual(600);
  });

  it('counts rate-limit refusals and refused bodies by reason', async () => {
    await setUp({ RATE_LIMITING: 'true', RATE_LIMIT_MAX_REQUESTS: '2' });
    const before = await scrape();
    const statuses = [];
    for (let i = 0; i < 4; i++) statuses.push((await api(ctx.app, { url: '/api/v1/users', as: 'V' })).statusCode);
    expect(statuses).toEqual([200, 200, 429, 429]);
    const tooLarge = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/register',
      as: 'U',
      form: { x: 'a'.repeat(ctx.config.bodyLimitBytes) },
    });
    expect(tooLarge.statusCode).toBe(413);
    const manyFields = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/register',
      as: 'U',
      payload: 'a=1&'.repeat(2000),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(manyFields.statusCode).toBe(400);
    expect(manyFields.json()).toMatchObject({ msg: 'Too many fields in request body' });
    const after = await scrape();
    const delta = (name: string, labels: Record<string, string>) => valueOf(after, name, labels) - valueOf(before, name, labels);
    expect(delta('zulip_http_rate_limited_total', { limit: 'rate_limit' })).toBe(2);
    expect(delta('zulip_http_rate_limited_total', { limit: 'user_body_memory' })).toBe(0);
    expect(delta('zulip_http_body_refused_total', { reason: 'size' })).toBe(1);
    expect(delta('zulip_http_body_refused_total', { reason: 'fields' })).toBe(1);
    expect(delta('zulip_http_requests_total', { ...USERS, status_code: '429' })).toBe(2);
  });

  it('collects nothing when METRICS_PORT is unset', async () => {
    ctx = await createTestContext();
    expect(ctx.app.metrics).toBeUndefined();
  });
});

describe('database, process and event metrics', () => {
  it('reports the pool, the pipelined lanes, the authentication batches and the process', async () => {
    await setUp();
    const before = await scrape();
    await Promise.all(['U', 'V', 'O'].map((as) => api(ctx.app, { url: '/api/v1/users', as: as as 'U' })));
    const after = await scrape();
    expect(valueOf(after, 'zulip_db_pool_connections')).toBeGreaterThanOrEqual(0);
    expect(valueOf(after, 'zulip_db_pool_idle_connections')).toBeLessThanOrEqual(valueOf(after, 'zulip_db_pool_connections'));
    expect(valueOf(after, 'zulip_db_pool_waiting_clients')).toBe(0);
    expect(
      after
        .filter((sample) => sample.name === 'zulip_db_lane_statements_in_flight' && sample.labels.kind === 'short_statements')
        .map((sample) => sample.value),
    ).toEqual(Array<number>(ctx.config.dbReadConnections).fill(0));
    // The three requests of one turn share one authentication statement.
    expect(valueOf(after, 'zulip_db_auth_batch_size_count') - valueOf(before, 'zulip_db_auth_batch_size_count')).toBe(1);
    expect(valueOf(after, 'zulip_db_auth_batch_size_sum') - valueOf(before, 'zulip_db_auth_batch_size_sum')).toBe(3);
    for (const name of [
      'nodejs_eventloop_lag_p99_seconds',
      'nodejs_heap_size_used_bytes',
      'nodejs_active_handles',
      'process_cpu_seconds_total',
      'nodejs_eventloop_utilization_ratio',
    ]) {
      expect(
        after.some((sample) => sample.name === name),
        name,
      ).toBe(true);
    }
  });

  it('follows a long poll from register to the delivery of a write', async () => {
    await setUp();
    const before = await scrape();
    const queueId = await registerQueue(ctx.app);
    const poll = getEvents(ctx.app, { queue_id: queueId, last_event_id: '-1' });
    await eventually(async () => valueOf(await scrape(), 'zulip_events_polls_waiting') === 1);
    expect((await setPinToTop(ctx.app, true)).statusCode).toBe(200);
    const answer = await poll;
    expect(answer.json().events).toHaveLength(1);
    const after = await scrape();
    const delta = (name: string) => valueOf(after, name) - valueOf(before, name);
    expect(delta('zulip_events_queues_registered_total')).toBe(1);
    expect(valueOf(after, 'zulip_events_polls_waiting')).toBe(0);
    expect(delta('zulip_events_notifications_total')).toBeGreaterThanOrEqual(1);
    expect(delta('zulip_events_delivery_seconds_count')).toBe(1);
    expect(delta('zulip_events_heartbeats_total')).toBe(0);
  });
});

describe('database metrics', () => {
  const LABEL = /^(?:(?:select|insert|update|delete|statement)_[a-z_]+_[0-9a-f]{8}|unnamed)$/;

  it('times the pipelined statements by a stable label and counts commit groups', async () => {
    await setUp();
    const before = await scrape();
    for (let i = 0; i < 3; i++) await api(ctx.app, { url: '/api/v1/users', as: 'U' });
    await Promise.all([setPinToTop(ctx.app, true, 'U'), setPinToTop(ctx.app, true, 'V')]);
    const after = await scrape();
    const counts = after.filter((sample) => sample.name === 'zulip_db_statement_duration_seconds_count');
    for (const sample of counts) expect(sample.labels.statement).toMatch(LABEL);
    const delta = (name: string) => valueOf(after, name) - valueOf(before, name);
    // Sequential requests: one authentication statement each (and the two writes' own).
    expect(delta('zulip_db_auth_batch_size_count')).toBeGreaterThanOrEqual(4);
    const timed =
      counts.reduce((sum, sample) => sum + sample.value, 0) -
      before.filter((sample) => sample.name === 'zulip_db_statement_duration_seconds_count').reduce((sum, sample) => sum + sample.value, 0);
    expect(timed).toBeGreaterThanOrEqual(delta('zulip_db_auth_batch_size_count'));
    // Both writes went through commit groups (together or not): every member counted once.
    expect(delta('zulip_db_commit_group_size_sum')).toBe(2);
    expect(valueOf(after, 'zulip_db_connections_opened_total', { kind: 'short_statements' })).toBeGreaterThanOrEqual(1);
  });

  it('counts server errors by SQLSTATE class, statement timeouts, and lost connections', async () => {
    await setUp();
    await api(ctx.app, { url: '/api/v1/users', as: 'U' });
    const before = await scrape();
    await expect(ctx.database.shortStatements.run({ text: 'SELECT 1/0' }, [])).rejects.toMatchObject({ code: '22012' });
    await expect(ctx.database.shortStatements.run({ text: 'SELECT pg_sleep(5)' }, [])).rejects.toMatchObject({ code: '57014' });
    const errors = await scrape();
    const delta = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
      valueOf(samples, name, labels) - valueOf(before, name, labels);
    expect(delta(errors, 'zulip_db_errors_total', { sqlstate_class: '22' })).toBe(1);
    expect(delta(errors, 'zulip_db_errors_total', { sqlstate_class: '57' })).toBe(1);
    expect(delta(errors, 'zulip_db_statement_timeouts_total')).toBe(1);

    // Every connection of this database but the one asking (and the LISTEN one) is terminated.
    await ctx.database.shortStatements.run({ text: 'SELECT 1' }, []);
    await sql`
      SELECT pg_terminate_backend(pid) FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> ${LISTENER_APPLICATION_NAME}
    `.execute(ctx.db);
    await eventually(async () => delta(await scrape(), 'zulip_db_connections_lost_total', { kind: 'short_statements' }) >= 1);
    // The next request opens a new one.
    expect((await api(ctx.app, { url: '/api/v1/users', as: 'U' })).statusCode).toBe(200);
    expect(delta(await scrape(), 'zulip_db_connections_opened_total', { kind: 'short_statements' })).toBeGreaterThanOrEqual(1);
  });
});

describe('hot-path series (src/metrics/series.ts)', () => {
  it("print exactly what prom-client's own counter and histogram print for the same observations", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const buckets = [0.01, 0.1, 1];
    const histogram = new SeriesHistogram({ name: 'h_seconds', help: 'h', labelNames: ['route'], buckets, registers: [ours] });
    const counter = new SeriesCounter({ name: 'c_total', help: 'c', labelNames: ['route'], registers: [ours] });
    const reference = new Histogram({ name: 'h_seconds', help: 'h', labelNames: ['route'], buckets, registers: [theirs] });
    const referenceCounter = new Counter({ name: 'c_total', help: 'c', labelNames: ['route'], registers: [theirs] });
    for (const route of ['/a', '/b']) {
      const series = histogram.seriesFor({ route });
      const count = counter.seriesFor({ route });
      for (const value of route === '/a' ? [0.005, 0.01, 0.5, 7] : [0.2]) {
        series.observe(value);
        reference.observe({ route }, value);
        count.add();
        referenceCounter.inc({ route });
      }
    }
    expect(await ours.metrics()).toBe(await theirs.metrics());
    // Counted again after a scrape: nothing is lost or counted twice.
    counter.seriesFor({ route: '/c' }).add(3);
    referenceCounter.inc({ route: '/c' }, 3);
    expect(await ours.metrics()).toBe(await theirs.metrics());
  });
});

describe('the metrics listener', () => {
  it('serves GET /metrics in the text format on its own port, and nothing else', async () => {
    await setUp();
    await api(ctx.app, { url: '/api/v1/users', as: 'U' });
    const { server, port } = await startMetricsListener(ctx.app.metrics!.registry, '127.0.0.1', 0);
    try {
      const response = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(response.status).toBe(200);
      expect(response.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
      expect(valueOf(parse(await response.text()), 'zulip_http_requests_total', USERS)).toBe(1);
      expect((await fetch(`http://127.0.0.1:${port}/api/v1/users`)).status).toBe(404);
      // The API does not serve them.
      expect((await api(ctx.app, { url: '/metrics' })).statusCode).toBe(404);
    } finally {
      server.close();
    }
  });
});
