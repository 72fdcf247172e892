import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { AppDeps } from '../../deps.js';
import { callerOf, lookupRowOf } from '../../http/auth.js';
import { clientGone } from '../../http/client-gone.js';
import { sendSuccessInSlices, success } from '../../http/envelope.js';
import { parametersOf, peekParameter } from '../../http/params.js';
import { ZULIP_FEATURE_LEVEL } from '../../zulip.js';
import { deleteQueueSchema, getEventsSchema, registerSchema } from './events.schemas.js';
import { deleteQueue, pollEvents } from './events.service.js';
import { LongPolling } from './long-polling.js';
import { notificationDefaultsLookup, registerEventQueue } from './register.service.js';

/**
 * Register and the event queue endpoints (docs/api.md §3.12–§3.14). The instance's long polls
 * (`polling`) are started when the app is ready and answered before its server closes.
 */
export const eventRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, transactions, config }) => {
  const { metrics } = app;
  const polling = new LongPolling({ db, transactions, config, log: app.log, metrics });
  const { wakeups, gathering } = polling;

  app.addHook('onReady', () => polling.start());
  // preClose runs before the HTTP server waits for in-flight requests: waiting polls answer now.
  app.addHook('preClose', () => polling.answerAll());
  app.addHook('onClose', () => polling.close());

  const registerConfig = { authLookup: () => notificationDefaultsLookup };
  app.post('/api/v1/register', { schema: registerSchema, config: registerConfig }, async (request, reply) => {
    const notificationDefaults = lookupRowOf(request, notificationDefaultsLookup);
    const { queueId, lifespanSeconds, state } = await registerEventQueue(
      transactions,
      config,
      callerOf(request),
      { ...parametersOf(request, registerSchema), notificationDefaults },
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
  // wait (an invalid value waits: its 400 comes after authentication).
  const gather = async (request: FastifyRequest) => {
    if (peekParameter(request, getEventsSchema, 'dont_block') !== true) await gathering.wait();
  };
  // Not async: a waiting poll holds no suspended handler (LongPoll in events.service.ts); the
  // answer is sent when it comes.
  app.get('/api/v1/events', { schema: getEventsSchema, preValidation: gather }, (request, reply) => {
    const { queue_id: queueId, last_event_id: lastEventId, dont_block: dontBlock } = parametersOf(request, getEventsSchema);
    const poll = { queueId, lastEventId, dontBlock, clientGone: clientGone(reply) };
    pollEvents(polling.deps, callerOf(request), poll, (error, answer) => {
      if (error) return void reply.send(error);
      if (answer === null) return void reply.hijack();
      try {
        polling.countAnswer(answer);
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
