import type autocannon from 'autocannon';
import type { Database } from '../src/db/database.js';
import { basicAuth, FORM, formBody } from './load.js';
import { type Account, createDisposableViews, type RotatingCaller, type Seeded, WRITER_VIEW_FRAGMENT } from './seed.js';

/**
 * The benchmark's scenarios. Each builds fresh requests per phase (warm-up, measured run), so
 * one-shot resources (views to delete, names to set) are never reused, and names one probe
 * request for counting SQL statements.
 */

type Phase = 'warmup' | 'measure';

interface PhaseLoad {
  requests: autocannon.Request[];
  /** Stop after this many responses (one-shot resources); the duration still bounds the run. */
  amount?: number;
}

interface ProbeRequest {
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE';
  url: string;
  body?: string;
}

/**
 * Which process serves the scenario: ours and the floor as the reference rows have always run them
 * (rate limiting off, no logs), or with the production defaults (ours: rate limiting on with the
 * default rule, info logs written to a file; the floor: the same request log, no rate limiting).
 */
export type ServerKind = 'ours' | 'floor' | 'ours-production' | 'ours-production-metrics' | 'floor-production';

export interface Scenario {
  name: string;
  server: ServerKind;
  /** Whose credentials every request carries. */
  account: Account;
  /** Concurrent connections, when not the run's default (unloaded latency: 1). */
  connections?: number;
  /** Requests of the phase; `history` holds the measurements taken so far, by scenario name. */
  prepare(phase: Phase, durationSeconds: number, history: ReadonlyMap<string, { requestsPerSecond: number }>): Promise<PhaseLoad>;
  /** One representative request, sent in-process to count its SQL statements (ours only). */
  probe?(): Promise<ProbeRequest>;
}

/** The writers of the production write scenarios (distinct users, each written in turn). */
export const WRITERS = 1000;

export interface ScenarioContext {
  db: Database;
  seeded: Seeded;
  connections: number;
  /** Event queue ids of the poller, one per connection. */
  pollerQueues: string[];
}

export const USERS_FLOOR = 'GET /users/{id} — floor';
export const USERS_FLOOR_TWO_QUERIES = 'GET /users/{id} — floor with 2 queries';
export const USERS_FLOOR_PLAIN = 'GET /users/{id} — floor, unprepared';
export const USERS_OURS = 'GET /users/{id}';
/** Measured in alternating rounds, one after the other. */
export const USERS_COMPARISON = [USERS_FLOOR, USERS_FLOOR_TWO_QUERIES, USERS_FLOOR_PLAIN, USERS_OURS];
export const PRODUCTION_USERS_FLOOR = 'production: GET /users/{id}, 20,000 callers — floor';
export const PRODUCTION_USERS = 'production: GET /users/{id}, 20,000 callers';
export const PRODUCTION_SETTING_FLOOR = 'production: 1-entry settings update, 1,000 users — write floor';
export const PRODUCTION_SETTING = 'production: 1-entry settings update, 1,000 users';
export const PRODUCTION_PATCH_FLOOR = 'production: PATCH /navigation_views/{fragment}, 1,000 users — write floor';
export const PRODUCTION_PATCH = 'production: PATCH /navigation_views/{fragment}, 1,000 users';
/** The same on a third instance with the Prometheus metrics on (METRICS_PORT): what they cost. */
export const PRODUCTION_USERS_METRICS = `${PRODUCTION_USERS} — metrics on`;
export const PRODUCTION_SETTING_METRICS = `${PRODUCTION_SETTING} — metrics on`;
export const PRODUCTION_PATCH_METRICS = `${PRODUCTION_PATCH} — metrics on`;
/** Each group, [floor, ours, ours with metrics], is measured in alternating rounds; the ratios are the medians of theirs. */
export const PRODUCTION_COMPARISONS: string[][] = [
  [PRODUCTION_USERS_FLOOR, PRODUCTION_USERS, PRODUCTION_USERS_METRICS],
  [PRODUCTION_SETTING_FLOOR, PRODUCTION_SETTING, PRODUCTION_SETTING_METRICS],
  [PRODUCTION_PATCH_FLOOR, PRODUCTION_PATCH, PRODUCTION_PATCH_METRICS],
];
const BULK_SIZES = [1, 10, 100, 1000] as const;
export const bulkName = (size: number, connections?: number) =>
  `POST subscriptions/properties × ${size}${connections === undefined ? '' : `, ${connections} connection`}`;
/** Bulk sizes also measured one request at a time: the cost of a request without queueing. */
const UNLOADED_BULK_SIZES = [1, 1000] as const;
const PATCH_NAME = 'PATCH /navigation_views/{fragment}';
export const MEMBERSHIP_FLOOR = 'DELETE then POST /users/me/subscriptions, 100 channels, 1 connection — write floor';
export const MEMBERSHIP = 'DELETE then POST /users/me/subscriptions, 100 channels, 1 connection';
/** Channels one membership request names. */
const MEMBERSHIP_CHANNELS = 100;

/** Entry i of a bulk update: a mix of properties, `flip` alternates the values. */
function bulkEntry(streamId: number, i: number, flip: boolean) {
  switch (i % 4) {
    case 0:
      return { stream_id: streamId, property: 'is_muted', value: flip };
    case 1:
      return { stream_id: streamId, property: 'pin_to_top', value: !flip };
    case 2:
      return { stream_id: streamId, property: 'color', value: flip ? '#76ce90' : '#a6c7e5' };
    default:
      return { stream_id: streamId, property: 'desktop_notifications', value: flip };
  }
}

export function bulkBody(streamIds: number[], size: number, flip: boolean): string {
  const entries = streamIds.slice(0, size).map((id, i) => bulkEntry(id, i, flip));
  return formBody({ subscription_data: JSON.stringify(entries) });
}

const viewPath = (fragment: string) => `/api/v1/navigation_views/${encodeURIComponent(fragment)}`;

/**
 * One request shape sent by `callers` in turn, each with its own credentials: per-caller state
 * such as the rate-limit window is spread as it is on a busy server, and no caller is refused.
 */
export function rotating(
  callers: RotatingCaller[],
  request: (caller: RotatingCaller, turn: number) => autocannon.Request,
): autocannon.Request {
  const authorizations = callers.map((caller) => basicAuth(caller.email, caller.apiKey));
  let turn = 0;
  const first = request(callers[0]!, 0);
  return {
    ...first,
    setupRequest: (current) => {
      const index = turn % callers.length;
      const next = request(callers[index]!, turn++);
      return { ...current, ...next, headers: { ...current.headers, ...next.headers, authorization: authorizations[index]! } };
    },
  };
}

const settingBody = (caller: RotatingCaller, turn: number) =>
  formBody({ subscription_data: JSON.stringify([{ stream_id: caller.streamId, property: 'pin_to_top', value: turn % 2 === 0 }]) });

/** A writer's 1-entry settings update (the production write scenario's request). */
export const updateSetting = (caller: RotatingCaller, turn: number): autocannon.Request => ({
  method: 'POST',
  path: '/api/v1/users/me/subscriptions/properties',
  headers: FORM,
  body: settingBody(caller, turn),
});

export function buildScenarios(context: ScenarioContext): Scenario[] {
  const { db, seeded } = context;
  const userPath = `/api/v1/users/${seeded.targetUserId}`;
  const staticLoad = (requests: autocannon.Request[]) => async () => ({ requests });

  // Every PATCH sets a name no view has had yet (the view's own current name would clash).
  let renames = 0;
  const patchRequest = (): autocannon.Request => ({
    method: 'PATCH',
    path: viewPath(seeded.patchFragment),
    headers: FORM,
    setupRequest: (request) => ({
      ...request,
      body: formBody({ is_pinned: String(renames % 2 === 0), name: `Standup ${++renames}` }),
    }),
  });

  let disposablePools = 0;
  const deleteLoad = async (count: number): Promise<PhaseLoad> => {
    const prefix = `bench/disposable/${++disposablePools}/`;
    await createDisposableViews(db, seeded.caller, count, prefix);
    let deleted = 0;
    return {
      amount: count,
      requests: [
        {
          method: 'DELETE',
          path: viewPath(`${prefix}1`),
          setupRequest: (request) => ({ ...request, path: viewPath(`${prefix}${++deleted}`) }),
        },
      ],
    };
  };

  const bulkScenario = (size: number, connections?: number): Scenario => {
    const path = '/api/v1/users/me/subscriptions/properties';
    return {
      name: bulkName(size, connections),
      server: 'ours',
      account: seeded.caller,
      ...(connections !== undefined && { connections }),
      prepare: staticLoad(
        [true, false].map((flip) => ({ method: 'POST', path, headers: FORM, body: bulkBody(seeded.callerStreamIds, size, flip) })),
      ),
      probe: async () => ({ method: 'POST', url: path, body: bulkBody(seeded.callerStreamIds, size, true) }),
    };
  };

  const writers = seeded.rotating.slice(0, WRITERS);
  // Every PATCH of a writer's view sets a name it has not had (its own current name would clash).
  let viewRenames = 0;
  const productionScenario = (
    name: string,
    server: ServerKind,
    callers: RotatingCaller[],
    request: (caller: RotatingCaller, turn: number) => autocannon.Request,
  ): Scenario => ({
    name,
    server,
    account: callers[0]!,
    prepare: async () => ({ requests: [rotating(callers, request)] }),
    ...(server === 'ours-production' && {
      probe: async () => {
        const { method, path, body } = request(callers[0]!, 0);
        return { method: method as ProbeRequest['method'], url: path!, ...(typeof body === 'string' && { body }) };
      },
    }),
  });
  const readUser = (): autocannon.Request => ({ method: 'GET', path: userPath });
  const patchView = (): autocannon.Request => ({
    method: 'PATCH',
    path: viewPath(WRITER_VIEW_FRAGMENT),
    headers: FORM,
    body: formBody({ is_pinned: String(viewRenames % 2 === 0), name: `Plans ${++viewRenames}` }),
  });
  const productionScenarios: Scenario[] = [
    productionScenario(PRODUCTION_USERS_FLOOR, 'floor-production', seeded.rotating, readUser),
    productionScenario(PRODUCTION_USERS, 'ours-production', seeded.rotating, readUser),
    productionScenario(PRODUCTION_USERS_METRICS, 'ours-production-metrics', seeded.rotating, readUser),
    productionScenario(PRODUCTION_SETTING_FLOOR, 'floor-production', writers, updateSetting),
    productionScenario(PRODUCTION_SETTING, 'ours-production', writers, updateSetting),
    productionScenario(PRODUCTION_SETTING_METRICS, 'ours-production-metrics', writers, updateSetting),
    productionScenario(PRODUCTION_PATCH_FLOOR, 'floor-production', writers, patchView),
    productionScenario(PRODUCTION_PATCH, 'ours-production', writers, patchView),
    productionScenario(PRODUCTION_PATCH_METRICS, 'ours-production-metrics', writers, patchView),
  ];

  // One user leaves, then joins again, 100 public channels it is subscribed to (private ones
  // could not be joined again); one connection: one user's writes wait for each other anyway.
  const membershipNames = async () =>
    (
      await db
        .selectFrom('streams')
        .select('name')
        .where('id', 'in', seeded.callerStreamIds)
        .where('invite_only', '=', false)
        .where('deactivated', '=', false)
        .orderBy('id')
        .limit(MEMBERSHIP_CHANNELS)
        .execute()
    ).map((row) => row.name);
  const membershipRequests = (names: string[]): autocannon.Request[] => [
    { method: 'DELETE', path: '/api/v1/users/me/subscriptions', headers: FORM, body: formBody({ subscriptions: JSON.stringify(names) }) },
    {
      method: 'POST',
      path: '/api/v1/users/me/subscriptions',
      headers: FORM,
      body: formBody({ subscriptions: JSON.stringify(names.map((name) => ({ name }))) }),
    },
  ];
  const membershipScenario = (name: string, server: ServerKind): Scenario => ({
    name,
    server,
    account: seeded.caller,
    connections: 1,
    prepare: async () => ({ requests: membershipRequests(await membershipNames()) }),
    ...(server === 'ours' && {
      probe: async () => {
        const [, subscribe] = membershipRequests(await membershipNames());
        return { method: 'POST', url: subscribe!.path!, body: subscribe!.body as string };
      },
    }),
  });

  let nextQueue = 0;
  const eventsPath = (queueId: string) => `/api/v1/events?queue_id=${queueId}&last_event_id=-1&dont_block=true`;

  return [
    ...productionScenarios,
    { name: USERS_FLOOR, server: 'floor', account: seeded.caller, prepare: staticLoad([{ method: 'GET', path: userPath }]) },
    {
      name: USERS_FLOOR_TWO_QUERIES,
      server: 'floor',
      account: seeded.caller,
      prepare: staticLoad([{ method: 'GET', path: `/two-queries${userPath}` }]),
    },
    {
      name: USERS_FLOOR_PLAIN,
      server: 'floor',
      account: seeded.caller,
      prepare: staticLoad([{ method: 'GET', path: `/plain${userPath}` }]),
    },
    {
      name: USERS_OURS,
      server: 'ours',
      account: seeded.caller,
      prepare: staticLoad([{ method: 'GET', path: userPath }]),
      probe: async () => ({ method: 'GET', url: userPath }),
    },
    {
      name: 'GET /users/{id}?include_custom_profile_fields=true',
      server: 'ours',
      account: seeded.caller,
      prepare: staticLoad([{ method: 'GET', path: `${userPath}?include_custom_profile_fields=true` }]),
      probe: async () => ({ method: 'GET', url: `${userPath}?include_custom_profile_fields=true` }),
    },
    membershipScenario(MEMBERSHIP_FLOOR, 'floor'),
    membershipScenario(MEMBERSHIP, 'ours'),
    ...BULK_SIZES.map((size) => bulkScenario(size)),
    ...UNLOADED_BULK_SIZES.map((size) => bulkScenario(size, 1)),
    {
      name: PATCH_NAME,
      server: 'ours',
      account: seeded.caller,
      prepare: async () => ({ requests: [patchRequest()] }),
      probe: async () => ({
        method: 'PATCH',
        url: viewPath(seeded.patchFragment),
        body: formBody({ is_pinned: 'true', name: `Standup probe` }),
      }),
    },
    {
      name: 'DELETE /navigation_views/{fragment}',
      server: 'ours',
      account: seeded.caller,
      // Views to delete: enough for the run at the PATCH rate (the same write path) and then some.
      prepare: async (phase, durationSeconds, history) => {
        const rate = Math.max(history.get(PATCH_NAME)?.requestsPerSecond ?? 500, 200);
        return deleteLoad(Math.ceil(rate * durationSeconds * (phase === 'warmup' ? 1 : 1.5)) + context.connections);
      },
      probe: async () => {
        await createDisposableViews(db, seeded.caller, 1, 'bench/probe/');
        return { method: 'DELETE', url: viewPath('bench/probe/1') };
      },
    },
    {
      name: 'GET /events?dont_block=true',
      server: 'ours',
      account: seeded.poller,
      // Each connection polls its own queue, as each client would.
      prepare: staticLoad([
        {
          method: 'GET',
          path: eventsPath(context.pollerQueues[0]!),
          setupRequest: (request, connection) => {
            const state = connection as { queueId?: string };
            state.queueId ??= context.pollerQueues[nextQueue++ % context.pollerQueues.length]!;
            return { ...request, path: eventsPath(state.queueId) };
          },
        },
      ]),
      probe: async () => ({ method: 'GET', url: eventsPath(context.pollerQueues[0]!) }),
    },
  ];
}
