import type { FastifyPluginAsync, FastifyRequest, RouteHandlerMethod } from 'fastify';
import type { AppDeps } from '../../deps.js';
import { callerOf } from '../../http/auth.js';
import { clientGone } from '../../http/client-gone.js';
import { success } from '../../http/envelope.js';
import { badRequest } from '../../http/errors.js';
import { parametersOf, routePath } from '../../http/params.js';
import { isStorableText } from '../../lib/text.js';
import { listSubscriptionsSchema, updateSettingByPostSchema, updateSettingSchema, updateSettingsSchema } from './subscriptions.schemas.js';
import { applySubscriptionChanges, listSubscriptions } from './subscriptions.service.js';
import { checkSettingChange } from './subscriptions.validation.js';
import { channelMembersSchema, subscribeSchema, subscriptionStatusSchema, unsubscribeSchema } from './membership.schemas.js';
import { channelMembers, isSubscribed } from './membership.reads.js';
import { subscribeUsers, unsubscribeUsers } from './membership.service.js';
import { stripName } from './membership.validation.js';
import { channelObject, channelSources, selectChannels } from './channels.repository.js';
import { channelIdSchema, getChannelSchema, listChannelsSchema } from './channels.schemas.js';

/** Subscription settings (docs/api.md §3.2–§3.4), membership and channels (docs/management-api.md). */
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

  // PATCH (Zulip) and POST (an addition of this server) behave identically (docs/api.md §4 row 1).
  const updateOneSetting: RouteHandlerMethod = async (request: FastifyRequest, reply) => {
    const { stream_id, property, value } = parametersOf(request, updateSettingSchema);
    const change = checkSettingChange(stream_id, property, value);
    await applySubscriptionChanges(writes, callerOf(request), [change], undefined, clientGone(reply));
    return success(request);
  };
  // Digits only (routePath): any other segment is not this route (404 from the router).
  const singlePath = routePath('/api/v1/users/me/subscriptions/:stream_id', updateSettingSchema);
  app.patch(singlePath, { schema: updateSettingSchema }, updateOneSetting);
  app.post(singlePath, { schema: updateSettingByPostSchema }, updateOneSetting);

  // Membership (docs/management-api.md, "Subscriptions").
  const membership = { ...writes, config };
  app.post('/api/v1/users/me/subscriptions', { schema: subscribeSchema }, async (request, reply) => {
    const result = await subscribeUsers(membership, callerOf(request), parametersOf(request, subscribeSchema), clientGone(reply));
    return success(request, result);
  });

  app.delete('/api/v1/users/me/subscriptions', { schema: unsubscribeSchema }, async (request, reply) => {
    const { subscriptions, principals } = parametersOf(request, unsubscribeSchema);
    return success(request, await unsubscribeUsers(membership, callerOf(request), { names: subscriptions, principals }, clientGone(reply)));
  });

  const statusPath = routePath('/api/v1/users/:user_id/subscriptions/:stream_id', subscriptionStatusSchema);
  app.get(statusPath, { schema: subscriptionStatusSchema }, async (request) => {
    const { user_id, stream_id } = parametersOf(request, subscriptionStatusSchema);
    return success(request, { is_subscribed: await isSubscribed(db, callerOf(request), user_id, stream_id) });
  });

  app.get(routePath('/api/v1/streams/:stream_id/members', channelMembersSchema), { schema: channelMembersSchema }, async (request) => {
    const { stream_id } = parametersOf(request, channelMembersSchema);
    return success(request, { subscribers: await channelMembers(db, callerOf(request), stream_id) });
  });

  // Channels (docs/management-api.md, "Channels"): Zulip's get_streams_backend, get_stream_backend, json_get_stream_id.
  app.get('/api/v1/streams', { schema: listChannelsSchema }, async (request) => {
    const flags = parametersOf(request, listChannelsSchema);
    const caller = callerOf(request);
    const sources = channelSources(flags, caller);
    const rows =
      sources.length === 0 ? [] : await selectChannels(db, caller, { sources, excludeArchived: flags.exclude_archived }).execute();
    const streams = rows.map(channelObject);
    if (flags.include_default) for (const stream of streams) stream.is_default = false;
    return success(request, { streams });
  });

  app.get(routePath('/api/v1/streams/:stream_id', getChannelSchema), { schema: getChannelSchema }, async (request) => {
    const { stream_id } = parametersOf(request, getChannelSchema);
    const query = { sources: ['metadata'] as const, excludeArchived: true, streamId: stream_id };
    const row = await selectChannels(db, callerOf(request), query).executeTakeFirst();
    if (!row) throw badRequest('Invalid channel ID');
    return success(request, { stream: channelObject(row) });
  });

  app.get('/api/v1/get_stream_id', { schema: channelIdSchema }, async (request) => {
    const { stream } = parametersOf(request, channelIdSchema);
    const name = stripName(stream);
    const query = { sources: ['content'] as const, excludeArchived: true, name };
    const row = isStorableText(name) ? await selectChannels(db, callerOf(request), query).executeTakeFirst() : undefined;
    if (!row) throw badRequest(`Invalid channel name '${stream}'`);
    return success(request, { stream_id: row.stream_id });
  });
};
