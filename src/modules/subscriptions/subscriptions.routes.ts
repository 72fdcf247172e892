import type { FastifyPluginAsync, RouteHandlerMethod } from 'fastify';
import type { AppDeps } from '../../app.js';
import { clientGone } from '../../http/client-gone.js';
import { success } from '../../http/envelope.js';
import { asString, checkBoolean, jsonListOfAtMost, parseJson, type Parser } from '../../http/params.js';
import {
  listSubscriptionsSchema,
  updateSettingByPostSchema,
  updateSettingSchema,
  updateSettingsSchema,
} from './subscriptions.schemas.js';
import { applySubscriptionChanges, listSubscriptions } from './subscriptions.service.js';
import {
  checkBulkEntries,
  checkSettingChange,
  parseChannelIdSegment,
  parseSingleValue,
} from './subscriptions.validation.js';

/** Entries of one bulk update (spec §3.2): bounds the work and the rows one request can cause. */
export const MAX_SUBSCRIPTION_CHANGES = 10_000;
const subscriptionData = jsonListOfAtMost(MAX_SUBSCRIPTION_CHANGES);

/**
 * include_subscribers: a JSON boolean, or `partial` (feature level 412), which lets the server send
 * only part of large channels' subscribers; this server sends every channel's whole list, as Zulip
 * itself does for channels under 250 subscribers.
 */
export const includeSubscribersParam: Parser<boolean> = (raw, name) => {
  // The word as Zulip's documentation lists it, and as a JSON string, which a client may send.
  if (raw === 'partial') return true;
  const value = parseJson(raw, name);
  return value === 'partial' || checkBoolean(value, name);
};

/** Subscription settings (spec §3.2–§3.4). */
export const subscriptionRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, transactions }) => {
  app.get('/api/v1/users/me/subscriptions', { schema: listSubscriptionsSchema }, async (request) => {
    const params = request.zulipParams;
    const includeSubscribers = params.optional('include_subscribers', includeSubscribersParam, false);
    const subscriptions = await listSubscriptions(db, request.caller, { includeSubscribers });
    return success(request, { subscriptions });
  });

  app.post('/api/v1/users/me/subscriptions/properties', { schema: updateSettingsSchema }, async (request, reply) => {
    const params = request.zulipParams;
    const entries = params.required('subscription_data', subscriptionData);
    const { changes, shapeError } = checkBulkEntries(entries);
    await applySubscriptionChanges(transactions, request.caller, changes, shapeError, clientGone(reply));
    return success(request);
  });

  // PATCH (Zulip) and POST (the brief) behave identically (spec §4 row 1).
  const updateOneSetting: RouteHandlerMethod = async (request, reply) => {
    const { stream_id: digits } = request.params as { stream_id: string };
    const params = request.zulipParams;
    const property = params.required('property', asString);
    const value = params.required('value', parseSingleValue);
    const change = checkSettingChange(parseChannelIdSegment(digits), property, value);
    await applySubscriptionChanges(transactions, request.caller, [change], undefined, clientGone(reply));
    return success(request);
  };
  // Digits only: any other segment is not this route (404 from the router).
  const singlePath = '/api/v1/users/me/subscriptions/:stream_id(^\\d+$)';
  app.patch(singlePath, { schema: updateSettingSchema }, updateOneSetting);
  app.post(singlePath, { schema: updateSettingByPostSchema }, updateOneSetting);
};
