import { performance } from 'node:perf_hooks';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { AppDeps } from '../../deps.js';
import type { Metrics } from '../../metrics/metrics.js';
import { callerOf, lookupRowOf } from '../../http/auth.js';
import { clientGone } from '../../http/client-gone.js';
import { sendSuccessInSlices, success } from '../../http/envelope.js';
import { parametersOf } from '../../http/params.js';
import { ZULIP_FEATURE_LEVEL } from '../../zulip.js';
import { EventListener } from './event-listener.js';
import { QueueWakeups } from './event-wakeups.js';
import { deleteQueueSchema, getEventsSchema, registerSchema } from './events.schemas.js';
import { deleteQueue, type PollAnswer, pollEvents } from './events.service.js';
import { HeartbeatBatches, HeartbeatWheel, PollGathering, PollStartBatches } from './poll-batches.js';
import { PollRechecks } from './poll-rechecks.js';
import { notificationDefaultsFromLookup, notificationDefaultsLookup, registerEventQueue } from './register.service.js';

/** Heartbeats due within this long of each other are answered together (HeartbeatBatches). */
const HEARTBEAT_TICK_MS = 250;
/** Blocking polls arriving within this long of each other are authenticated and started together (PollGathering). */
const POLL_GATHER_MS = 50;

/**
 * Register and the event queue endpoints (spec §3.12–§3.14), plus what keeps long polls working
 * across instances: the LISTEN connection and answering every waiting poll on shutdown.
 */
export const eventRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, transactions, config }) => {
  const { metrics } = app;
  const wakeups = new QueueWakeups();
  const starts = new PollStartBatches(db);
  const heartbeats = new HeartbeatBatches(db, HEARTBEAT_TICK_MS);
  // The heartbeats falling due in one tick go as one statement, sent at once.
  const wheel = new HeartbeatWheel(HEARTBEAT_TICK_MS, () => heartbeats.flush());
  const pollDeps = { db, config, wakeups, starts, heartbeats, wheel };
  const gathering = new PollGathering(POLL_GATHER_MS);
  metrics?.watchWaitingPolls(() => wakeups.waitingPolls);
  const rechecks = new PollRechecks({
    db,
    wakeups,
    intervalMs: config.pollRecheckSeconds * 1000,
    log: app.log,
    ...(metrics && { onRecheck: (ok: boolean) => metrics.pollRecheck(ok ? 'ok' : 'failed') }),
  });
  const listener = new EventListener({
    connectionString: config.databaseUrl,
    connectTimeoutMs: config.dbConnectTimeoutMs,
    log: app.log,
    onQueueNotified: metrics
      ? (queueId) => {
          metrics.notificationReceived();
          wakeups.notified(queueId, performance.now());
        }
      : (queueId) => wakeups.wake(queueId),
    onGap: () => rechecks.request(),
    ...(metrics && { onReconnected: () => metrics.listenReconnected() }),
  });

  app.addHook('onReady', async () => {
    await listener.start();
    rechecks.start();
  });
  // preClose runs before the HTTP server waits for in-flight requests: waiting polls answer now.
  app.addHook('preClose', async () => {
    // The polls answer first: a check in progress may wait on the database for seconds.
    rechecks.stop();
    gathering.release();
    wheel.stop();
    heartbeats.flush();
    await wakeups.close();
    await rechecks.close();
  });
  app.addHook('onClose', async () => {
    rechecks.stop();
    wheel.stop();
    await wakeups.close();
    await rechecks.close();
    await listener.close();
  });

  const registerConfig = { authLookup: () => notificationDefaultsLookup };
  app.post('/api/v1/register', { schema: registerSchema, config: registerConfig }, async (request, reply) => {
    const params = parametersOf(request, registerSchema);
    const capabilities = params.client_capabilities;
    const { queueId, lifespanSeconds, state } = await registerEventQueue(
      transactions,
      config,
      callerOf(request),
      {
        notificationDefaults: notificationDefaultsFromLookup(lookupRowOf(request, notificationDefaultsLookup)),
        clientGravatar: params.client_gravatar,
        includeSubscribers: params.include_subscribers,
        notificationSettingsNull: capabilities.notification_settings_null === true,
        userListIncomplete: capabilities.user_list_incomplete === true,
        eventTypes: params.event_types,
        fetchEventTypes: params.fetch_event_types,
        queueLifespanSecs: params.queue_lifespan_secs,
        idleQueueTimeout: params.idle_queue_timeout,
      },
      clientGone(reply),
    );
    metrics?.queueRegistered();
    // As large as the organization's user list (realm_user): serialized in slices.
    return sendSuccessInSlices(request, reply, {
      queue_id: queueId,
      // Right after queue_id, as Zulip sends it (feature level 481).
      idle_queue_timeout_secs: lifespanSeconds,
      zulip_version: config.zulipVersion,
      zulip_feature_level: ZULIP_FEATURE_LEVEL,
      zulip_merge_base: config.zulipVersion,
      event_queue_longpoll_timeout_seconds: config.eventQueueLongpollTimeoutSeconds,
      ...state,
      last_event_id: -1,
    });
  });

  // Before authentication (the app's preHandler): a blocking poll waits for the others arriving
  // within POLL_GATHER_MS, whose authentication and start it then shares. dont_block polls do not
  // wait (read from the query, where clients send it; one sent in a body only waits 50 ms more).
  const gather = async (request: FastifyRequest) => {
    if ((request.query as Record<string, unknown> | undefined)?.dont_block !== 'true') await gathering.wait();
  };
  // Not async: a waiting poll holds no suspended handler (LongPoll in events.service.ts); the
  // answer is sent when it comes.
  app.get('/api/v1/events', { schema: getEventsSchema, preValidation: gather }, (request, reply) => {
    const { queue_id: queueId, last_event_id: lastEventId, dont_block: dontBlock } = parametersOf(request, getEventsSchema);
    const poll = { queueId, lastEventId, dontBlock, clientGone: clientGone(reply) };
    pollEvents(pollDeps, callerOf(request), poll, (error, answer) => {
      if (error) return void reply.send(error);
      if (answer === null) return void reply.hijack();
      try {
        if (metrics) countAnswer(metrics, answer);
        void reply.send(success(request, answer.waited ? { events: answer.events, queue_id: queueId } : { events: answer.events }));
      } catch (failure) {
        // As a throwing async handler's: the error handler answers (a masked 500).
        void reply.send(failure);
      }
    });
  });

  app.delete('/api/v1/events', { schema: deleteQueueSchema }, async (request) => {
    await deleteQueue({ db, wakeups }, callerOf(request), parametersOf(request, deleteQueueSchema).queue_id);
    return success(request);
  });
};

/** A poll's answer in the metrics: a heartbeat, or a delivery woken by a NOTIFY. */
function countAnswer(metrics: Metrics, answer: NonNullable<PollAnswer>): void {
  const { events, notifiedAt } = answer;
  if (events.at(-1)?.type === 'heartbeat') metrics.heartbeatSent();
  else if (notifiedAt !== undefined && events.length > 0) metrics.delivered((performance.now() - notifiedAt) / 1000);
}
