import { createHash } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';
import type { AppDeps } from '../../deps.js';
import { requestSubdomain } from '../../http/auth.js';
import { success } from '../../http/envelope.js';
import { realmUrl } from '../../lib/hosts.js';
import { ZULIP_FEATURE_LEVEL } from '../../zulip.js';
import { findActiveRealmBySubdomain } from './server-settings.repository.js';
import { serverSettingsSchema } from './server-settings.schemas.js';

const AUTHENTICATION_METHODS = Object.fromEntries(
  [
    'password',
    'dev',
    'email',
    'ldap',
    'remoteuser',
    'github',
    'azuread',
    'gitlab',
    'apple',
    'google',
    'saml',
    'openid connect',
    'discord',
  ].map((method) => [method, false]),
);

/** GET /api/v1/server_settings: discovery, no authentication (docs/api.md §3.1). */
export const serverSettingsRoutes: FastifyPluginAsync<AppDeps> = async (app, { db, config }) => {
  app.get('/api/v1/server_settings', { config: { auth: false }, schema: serverSettingsSchema }, async (request) => {
    const realm = await findActiveRealmBySubdomain(db, requestSubdomain(request, config));
    const url = realm ? realmUrl(realm.subdomain, config) : undefined;
    return success(request, {
      authentication_methods: AUTHENTICATION_METHODS,
      zulip_version: config.zulipVersion,
      zulip_merge_base: config.zulipVersion,
      zulip_feature_level: ZULIP_FEATURE_LEVEL,
      push_notifications_enabled: false,
      is_incompatible: false,
      email_auth_enabled: false,
      require_email_format_usernames: true,
      ...(realm && {
        realm_url: url,
        realm_uri: url,
        realm_name: realm.name,
        realm_icon: config.enableGravatar
          ? `https://secure.gravatar.com/avatar/${createHash('md5').update(String(realm.id)).digest('hex')}?d=identicon`
          : `${config.defaultAvatarUri}?version=0`,
        realm_description: realm.rendered_description,
        realm_web_public_access_enabled: false,
      }),
      external_authentication_methods: [],
    });
  });
};
