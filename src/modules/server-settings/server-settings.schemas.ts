import Type from 'typebox';
import { PUBLIC_ERRORS, type RouteSchema, successResponse } from '../../http/openapi.js';

// Documentation of GET /api/v1/server_settings (docs/api.md §3.1); see src/http/openapi.ts.

const ORGANIZATION_ONLY = 'Only when the Host names an active organization.';

export const serverSettingsSchema = {
  operationId: 'get-server-settings',
  summary: 'Server and organization settings',
  description: 'Discovery for clients; no authentication (an Authorization header is ignored).',
  tags: ['server'],
  security: [],
  documentedResponses: {
    200: successResponse('The settings.', {
      authentication_methods: Type.Record(Type.String(), Type.Boolean()),
      zulip_version: Type.String(),
      zulip_merge_base: Type.String(),
      zulip_feature_level: Type.Integer(),
      push_notifications_enabled: Type.Boolean(),
      is_incompatible: Type.Boolean(),
      email_auth_enabled: Type.Boolean(),
      require_email_format_usernames: Type.Boolean(),
      realm_url: Type.Optional(Type.String({ description: ORGANIZATION_ONLY })),
      realm_uri: Type.Optional(Type.String({ description: `Deprecated alias of realm_url. ${ORGANIZATION_ONLY}` })),
      realm_name: Type.Optional(Type.String({ description: ORGANIZATION_ONLY })),
      realm_icon: Type.Optional(Type.String({ description: ORGANIZATION_ONLY })),
      realm_description: Type.Optional(Type.String({ description: `HTML. ${ORGANIZATION_ONLY}` })),
      realm_web_public_access_enabled: Type.Optional(Type.Boolean({ description: ORGANIZATION_ONLY })),
      external_authentication_methods: Type.Array(Type.Unknown()),
    }),
    ...PUBLIC_ERRORS,
  },
} satisfies RouteSchema;
