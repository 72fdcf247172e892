import type { FastifyPluginAsync } from 'fastify';
import type { AppDeps } from '../../app.js';
import { clientGone } from '../../http/client-gone.js';
import { success } from '../../http/envelope.js';
import { badRequest } from '../../http/errors.js';
import { asString, checkBoolean, jsonBoolean, jsonDict, jsonInteger, jsonStringListOfAtMost, keyPath, parseJson } from '../../http/params.js';
import { FEATURE_LEVEL } from '../server-settings/server-settings.routes.js';
import { includeSubscribersParam } from '../subscriptions/subscriptions.routes.js';
import { EventListener } from './event-listener.js';
import { QueueWakeups } from './event-wakeups.js';
import { deleteQueueSchema, getEventsSchema, registerSchema } from './events.schemas.js';
import { deleteQueue, pollEvents } from './events.service.js';
import { PollRechecks } from './poll-rechecks.js';
import { notificationDefaultsFromLookup, notificationDefaultsLookup, registerEventQueue } from './register.service.js';

/** Entries of event_types and fetch_event_types (spec §3.12): bounds the matching of every event. */
export const MAX_EVENT_TYPES = 256;
const eventTypeList = jsonStringListOfAtMost(MAX_EVENT_TYPES);

/** Client capabilities register understands; other keys are accepted and ignored. */
function parseCapabilities(raw: string, name: string): Record<string, boolean> {
  const capabilities = jsonDict(raw, name);
  for (const [key, value] of Object.entries(capabilities)) checkBoolean(value, keyPath(name, key));
  return capabilities as Record<string, boolean>;
}

/**
 * idle_queue_timeout: a JSON integer of at least 1, or the JSON string "mobile". Zulip documents
 * the kinds, not the messages; these are its usual templates.
 */
function parseIdleQueueTimeout(raw: string, name: string): number | 'mobile' {
  // The JSON string, as documented; the bare word too, which a client may well send.
  if (raw === 'mobile') return 'mobile';
  const value = parseJson(raw, name);
  if (value === 'mobile') return value;
  if (typeof value !== 'number' || !Number.isInteger(value)) throw badRequest(`Invalid ${name}`);
  if (value < 1) throw badRequest(`${name} is too small`);
  return value;
}

/**
 * Register and the event queue endpoints (spec §3.12–§3.14), plus what keeps long polls working
 * across instances: the LISTEN connection and answering every waiting poll on shutdown.
 */
export const eventRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, transactions, config }) => {
  const wakeups = new QueueWakeups();
  const rechecks = new PollRechecks({ db, wakeups, intervalMs: config.pollRecheckSeconds * 1000, log: app.log });
  const listener = new EventListener({
    connectionString: config.databaseUrl,
    connectTimeoutMs: config.dbConnectTimeoutMs,
    log: app.log,
    onQueueNotified: (queueId) => wakeups.wake(queueId),
    onGap: () => rechecks.request(),
  });

  app.addHook('onReady', async () => {
    await listener.start();
    rechecks.start();
  });
  // preClose runs before the HTTP server waits for in-flight requests: waiting polls answer now.
  app.addHook('preClose', async () => {
    // The polls answer first: a check in progress may wait on the database for seconds.
    rechecks.stop();
    await wakeups.close();
    await rechecks.close();
  });
  app.addHook('onClose', async () => {
    rechecks.stop();
    await wakeups.close();
    await rechecks.close();
    await listener.close();
  });

  const registerConfig = { authLookup: () => notificationDefaultsLookup };
  app.post('/api/v1/register', { schema: registerSchema, config: registerConfig }, async (request, reply) => {
    const params = request.zulipParams;
    const clientGravatar = params.optional('client_gravatar', jsonBoolean, true);
    const includeSubscribers = params.optional('include_subscribers', includeSubscribersParam, false);
    const capabilities = params.optional('client_capabilities', parseCapabilities, {});
    const eventTypes = params.optional('event_types', eventTypeList);
    const fetchEventTypes = params.optional('fetch_event_types', eventTypeList);
    const queueLifespanSecs = params.optional('queue_lifespan_secs', jsonInteger, 0);
    const idleQueueTimeout = params.optional('idle_queue_timeout', parseIdleQueueTimeout);
    const { queueId, lifespanSeconds, state } = await registerEventQueue(db, transactions, config, request.caller, {
      notificationDefaults: notificationDefaultsFromLookup(request.authLookupResult),
      clientGravatar,
      includeSubscribers,
      notificationSettingsNull: capabilities.notification_settings_null === true,
      userListIncomplete: capabilities.user_list_incomplete === true,
      eventTypes,
      fetchEventTypes,
      queueLifespanSecs,
      idleQueueTimeout,
    }, clientGone(reply));
    return success(request, {
      queue_id: queueId,
      // Right after queue_id, as Zulip sends it (feature level 481).
      idle_queue_timeout_secs: lifespanSeconds,
      zulip_version: config.zulipVersion,
      zulip_feature_level: FEATURE_LEVEL,
      zulip_merge_base: config.zulipVersion,
      event_queue_longpoll_timeout_seconds: config.eventQueueLongpollTimeoutSeconds,
      ...state,
      last_event_id: -1,
    });
  });

  app.get('/api/v1/events', { schema: getEventsSchema }, async (request, reply) => {
    const params = request.zulipParams;
    const lastEventId = params.optional('last_event_id', jsonInteger);
    const queueId = params.optional('queue_id', asString);
    const dontBlock = params.optional('dont_block', jsonBoolean, false);
    // Zulip reports these two without var_name, after every type error (spec §3.13 steps 2–3).
    if (queueId === undefined) throw badRequest("Missing 'queue_id' argument");
    if (lastEventId === undefined) throw badRequest("Missing 'last_event_id' argument");

    const answer = await pollEvents({ db, config, wakeups }, request.caller, {
      queueId, lastEventId, dontBlock, clientGone: clientGone(reply),
    });
    if (answer === null) return reply.hijack();
    return success(request, answer.waited ? { events: answer.events, queue_id: queueId } : { events: answer.events });
  });

  app.delete('/api/v1/events', { schema: deleteQueueSchema }, async (request) => {
    const queueId = request.zulipParams.required('queue_id', asString);
    await deleteQueue({ db, wakeups }, request.caller, queueId);
    return success(request);
  });
};
