import type { FastifyPluginAsync, FastifyRequest, RouteHandlerMethod } from 'fastify';
import type { AppDeps } from '../../deps.js';
import { callerOf } from '../../http/auth.js';
import { clientGone } from '../../http/client-gone.js';
import { success } from '../../http/envelope.js';
import { parametersOf } from '../../http/params.js';
import {
  listSubscriptionsSchema,
  updateSettingByPostSchema,
  updateSettingSchema,
  updateSettingsSchema,
} from './subscriptions.schemas.js';
import { applySubscriptionChanges, listSubscriptions } from './subscriptions.service.js';
import { checkSettingChange } from './subscriptions.validation.js';

/** Subscription settings (spec §3.2–§3.4). */
export const subscriptionRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, transactions, config }) => {
  const writes = { transactions, maxPendingEvents: config.queueMaxPendingEvents };
  app.get('/api/v1/users/me/subscriptions', { schema: listSubscriptionsSchema }, async (request) => {
    const { include_subscribers } = parametersOf(request, listSubscriptionsSchema);
    const subscriptions = await listSubscriptions(db, callerOf(request), { includeSubscribers: include_subscribers });
    return success(request, { subscriptions });
  });

  app.post('/api/v1/users/me/subscriptions/properties', { schema: updateSettingsSchema }, async (request, reply) => {
    const { changes, shapeError } = parametersOf(request, updateSettingsSchema).subscription_data;
    await applySubscriptionChanges(writes, callerOf(request), changes, shapeError, clientGone(reply));
    return success(request);
  });

  // PATCH (Zulip) and POST (the brief) behave identically (spec §4 row 1).
  const updateOneSetting: RouteHandlerMethod = async (request: FastifyRequest, reply) => {
    const { stream_id, property, value } = parametersOf(request, updateSettingSchema);
    const change = checkSettingChange(stream_id, property, value);
    await applySubscriptionChanges(writes, callerOf(request), [change], undefined, clientGone(reply));
    return success(request);
  };
  // Digits only: any other segment is not this route (404 from the router).
  const singlePath = '/api/v1/users/me/subscriptions/:stream_id(^\\d+$)';
  app.patch(singlePath, { schema: updateSettingSchema }, updateOneSetting);
  app.post(singlePath, { schema: updateSettingByPostSchema }, updateOneSetting);
};
