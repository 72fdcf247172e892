import type { FastifyPluginAsync } from 'fastify';
import type { AppDeps } from '../../deps.js';
import { callerOf } from '../../http/auth.js';
import { success } from '../../http/envelope.js';
import { badRequest } from '../../http/errors.js';
import { parametersOf, routePath } from '../../http/params.js';
import { isStorableText } from '../../lib/text.js';
import { isIdInRange, ROLES } from '../../zulip.js';
import { stripName } from '../subscriptions/membership.validation.js';
import { type ChannelCaller, channelObject, type ChannelSource, selectChannels } from './channels.repository.js';
import { channelIdSchema, getChannelSchema, listChannelsSchema } from './channels.schemas.js';

type ListFlags = ReturnType<typeof parametersOf<typeof listChannelsSchema>>;

/** Zulip's get_streams_for_user: include_all and include_can_access_content replace the sources they cover. */
function sourcesOf(flags: ListFlags, caller: ChannelCaller): ChannelSource[] {
  if (flags.include_all || flags.include_all_active) return ['metadata'];
  const content = flags.include_can_access_content;
  const sources: [boolean, ChannelSource][] = [
    [content, 'content'],
    [!content && flags.include_subscribed, 'subscribed'],
    // Guests cannot access public channels as such (Zulip's can_access_public_streams).
    [!content && flags.include_public && caller.role !== ROLES.guest, 'public'],
    [!content && flags.include_web_public, 'webPublic'],
    [flags.include_owner_subscribed && caller.botType !== null, 'ownerSubscribed'],
  ];
  return sources.filter(([wanted]) => wanted).map(([, from]) => from);
}

/** Channel reads (docs/management-api.md, "Channels"): Zulip's get_streams_backend, get_stream_backend, json_get_stream_id. */
export const channelRoutes: FastifyPluginAsync<AppDeps> = async (app, { db }) => {
  app.get('/api/v1/streams', { schema: listChannelsSchema }, async (request) => {
    const flags = parametersOf(request, listChannelsSchema);
    const caller = callerOf(request);
    const sources = sourcesOf(flags, caller);
    const rows =
      sources.length === 0 ? [] : await selectChannels(db, caller, { sources, excludeArchived: flags.exclude_archived }).execute();
    const streams = rows.map(channelObject);
    if (flags.include_default) for (const stream of streams) stream.is_default = false;
    return success(request, { streams });
  });

  app.get(routePath('/api/v1/streams/:stream_id', getChannelSchema), { schema: getChannelSchema }, async (request) => {
    const { stream_id } = parametersOf(request, getChannelSchema);
    const query = { sources: ['metadata'] as const, excludeArchived: true, streamId: isIdInRange(stream_id) ? stream_id : 0 };
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
