import SwaggerParser from '@apidevtools/swagger-parser';
import type { RouteOptions } from 'fastify';
import type { OpenAPIV3 } from 'openapi-types';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { checkDocumentedResponse } from './helpers/documented-responses.js';
import { basicAuth } from './helpers/fixture.js';

// Every route the app registers, seen by an onRoute hook installed on the instance buildApp
// creates (before any route exists), independently of the OpenAPI generator.
const registered = vi.hoisted(() => [] as Array<{ method: string; url: string }>);
vi.mock('fastify', async (importOriginal) => {
  const fastify = await importOriginal<typeof import('fastify')>();
  const create = ((options: Parameters<typeof fastify.default>[0]) => {
    const app = fastify.default(options);
    app.addHook('onRoute', (route: RouteOptions) => {
      for (const method of [route.method].flat()) registered.push({ method, url: route.url });
    });
    return app;
  }) as unknown as typeof fastify.default;
  return { ...fastify, default: create };
});

let ctx: TestContext;
let document: OpenAPIV3.Document;
beforeAll(async () => {
  ctx = await createTestContext();
  const res = await api(ctx.app, { url: '/api/openapi.json' });
  expect(res.statusCode).toBe(200);
  document = res.json();
});
afterAll(() => ctx.close());

/** Fastify route syntax → OpenAPI path: `:name(regex)` → `{name}`; a final `*` is the navigation view fragment. */
const openApiPath = (url: string) => url.replace(/:(\w+)(\((?:[^()]|\([^()]*\))*\))?/g, '{$1}').replace(/\*$/, '{fragment}');

type Operation = OpenAPIV3.OperationObject;
function operations(): Array<{ key: string; path: string; method: string; operation: Operation }> {
  return Object.entries(document.paths).flatMap(([path, item]) =>
    Object.entries(item ?? {}).map(([method, operation]) => ({
      key: `${method.toUpperCase()} ${path}`,
      path,
      method: method.toUpperCase(),
      operation: operation as Operation,
    })),
  );
}

interface ParameterLists {
  query?: string[];
  body?: string[];
  path?: string[];
  /** Names that must be given (path parameters always are). */
  required?: string[];
}

function documentedParameters(operation: Operation): ParameterLists {
  const parameters = (operation.parameters ?? []) as OpenAPIV3.ParameterObject[];
  const names = (where: string) => parameters.filter((parameter) => parameter.in === where).map((parameter) => parameter.name);
  const form = (operation.requestBody as OpenAPIV3.RequestBodyObject | undefined)?.content['application/x-www-form-urlencoded'];
  const formSchema = form?.schema as OpenAPIV3.SchemaObject | undefined;
  const result: ParameterLists = {};
  if (names('query').length > 0) result.query = names('query');
  if (formSchema) result.body = Object.keys(formSchema.properties ?? {});
  if (names('path').length > 0) result.path = names('path');
  const required = [
    ...parameters.filter((parameter) => parameter.in !== 'path' && parameter.required).map((parameter) => parameter.name),
    ...(formSchema?.required ?? []),
  ];
  if (required.length > 0) result.required = required;
  return result;
}

// The parameter tables of docs/api.md (§3), in table order.
const USER_QUERY = ['client_gravatar', 'include_custom_profile_fields'];
const SINGLE_SETTING: ParameterLists = { body: ['property', 'value'], path: ['stream_id'], required: ['property', 'value'] };
const EXPECTED: Record<string, ParameterLists> = {
  'GET /api/v1/server_settings': {},
  'GET /api/v1/users': { query: [...USER_QUERY, 'user_ids'] },
  'GET /api/v1/users/{user}': { query: USER_QUERY, path: ['user'] },
  'GET /api/v1/users/me': {},
  'POST /api/v1/users': { body: ['email', 'password', 'full_name'], required: ['email', 'password', 'full_name'] },
  'PATCH /api/v1/users/{user}': { body: ['full_name', 'role', 'profile_data', 'new_email'], path: ['user'] },
  'DELETE /api/v1/users/{user}': { body: ['actions', 'deactivation_notification_comment'], path: ['user'] },
  'DELETE /api/v1/users/me': {},
  'POST /api/v1/users/{user_id}/reactivate': { path: ['user_id'] },
  'GET /api/v1/users/me/subscriptions': { query: ['include_subscribers'] },
  'POST /api/v1/users/me/subscriptions/properties': { body: ['subscription_data'], required: ['subscription_data'] },
  'PATCH /api/v1/users/me/subscriptions/{stream_id}': SINGLE_SETTING,
  'POST /api/v1/users/me/subscriptions/{stream_id}': SINGLE_SETTING,
  'GET /api/v1/navigation_views': {},
  'POST /api/v1/navigation_views': { body: ['fragment', 'is_pinned', 'name'], required: ['fragment', 'is_pinned'] },
  'PATCH /api/v1/navigation_views/{fragment}': { body: ['is_pinned', 'name'], path: ['fragment'] },
  'DELETE /api/v1/navigation_views/{fragment}': { path: ['fragment'] },
  'POST /api/v1/register': {
    body: [
      'client_gravatar',
      'include_subscribers',
      'client_capabilities',
      'event_types',
      'fetch_event_types',
      'queue_lifespan_secs',
      'idle_queue_timeout',
    ],
  },
  'GET /api/v1/events': { query: ['last_event_id', 'queue_id', 'dont_block'], required: ['last_event_id', 'queue_id'] },
  'DELETE /api/v1/events': { body: ['queue_id'], required: ['queue_id'] },
  // Subscriptions (membership).
  'POST /api/v1/users/me/subscriptions': {
    body: [
      'subscriptions',
      'principals',
      'authorization_errors_fatal',
      'invite_only',
      'is_web_public',
      'history_public_to_subscribers',
      'send_new_subscription_messages',
    ],
    required: ['subscriptions'],
  },
  'DELETE /api/v1/users/me/subscriptions': { body: ['subscriptions', 'principals'], required: ['subscriptions'] },
  'GET /api/v1/users/{user_id}/subscriptions/{stream_id}': { path: ['user_id', 'stream_id'] },
  'GET /api/v1/streams/{stream_id}/members': { path: ['stream_id'] },
  // Channels (docs/management-api.md, "Channels").
  'GET /api/v1/streams': {
    query: [
      'include_public',
      'include_web_public',
      'include_subscribed',
      'exclude_archived',
      'include_all',
      'include_all_active',
      'include_default',
      'include_owner_subscribed',
      'include_can_access_content',
    ],
  },
  'GET /api/v1/streams/{stream_id}': { path: ['stream_id'] },
  'GET /api/v1/get_stream_id': { query: ['stream'], required: ['stream'] },
};

describe('GET /api/openapi.json', () => {
  it('is a valid OpenAPI 3 document, served without authentication outside the Zulip API', async () => {
    expect(document.openapi).toBe('3.0.3');
    expect(document.info.license).toEqual({ name: 'Apache-2.0', url: 'https://www.apache.org/licenses/LICENSE-2.0' });
    await SwaggerParser.validate(structuredClone(document) as never);
    const withBadCredentials = await api(ctx.app, {
      url: '/api/openapi.json',
      headers: { authorization: basicAuth('u@example.com', 'x'.repeat(32)) },
    });
    expect(withBadCredentials.statusCode).toBe(200);
    expect(withBadCredentials.headers['content-type']).toMatch(/^application\/json/);
    expect(withBadCredentials.json()).toEqual(document);
    // The document does not describe itself.
    expect(document.paths['/api/openapi.json']).toBeUndefined();
  });

  it("names each path once: no two paths differ only in their parameters' names (redocly's no-identical-paths)", () => {
    const shapes = Object.keys(document.paths).map((path) => path.replace(/\{[^}]+\}/g, '{}'));
    expect(shapes.length).toBeGreaterThan(10);
    expect(shapes.filter((shape, index) => shapes.indexOf(shape) !== index)).toEqual([]);
  });

  it('documents exactly the registered routes (HEAD is implied by GET)', () => {
    const routes = registered
      .filter(({ method, url }) => method !== 'HEAD' && (url.startsWith('/api/v1/') || url === '/health' || url === '/ready'))
      .map(({ method, url }) => `${method} ${openApiPath(url)}`);
    expect(routes.length).toBeGreaterThanOrEqual(Object.keys(EXPECTED).length);
    expect(
      operations()
        .map((entry) => entry.key)
        .sort(),
    ).toEqual([...new Set(routes)].sort());
  });

  it("lists each endpoint's parameters as the docs/api.md tables declare them", () => {
    const apiOperations = operations().filter((entry) => entry.path.startsWith('/api/v1/'));
    const documented = Object.fromEntries(apiOperations.map((entry) => [entry.key, documentedParameters(entry.operation)]));
    expect(documented).toEqual(EXPECTED);
    // JSON-valued form fields say so, as in Zulip's own document.
    const properties = document.paths['/api/v1/users/me/subscriptions/properties']!.post!.requestBody as OpenAPIV3.RequestBodyObject;
    for (const media of ['application/x-www-form-urlencoded', 'multipart/form-data']) {
      expect(properties.content[media]!.encoding).toEqual({ subscription_data: { contentType: 'application/json' } });
    }
    const register = document.paths['/api/v1/register']!.post!.requestBody as OpenAPIV3.RequestBodyObject;
    expect(register.required).toBe(false);
    expect(Object.keys(register.content['multipart/form-data']!.encoding ?? {})).toEqual([
      'client_capabilities',
      'event_types',
      'fetch_event_types',
      'idle_queue_timeout',
    ]);
  });

  it('declares HTTP basic authentication, and responses with the Zulip envelopes', () => {
    expect(document.components?.securitySchemes).toEqual({
      basicAuth: { type: 'http', scheme: 'basic', description: expect.any(String) },
    });
    expect(document.security).toEqual([{ basicAuth: [] }]);
    for (const { key, path, operation } of operations()) {
      const open = path === '/api/v1/server_settings' || !path.startsWith('/api/v1/');
      expect(operation.security, key).toEqual(open ? [] : undefined);
      expect(operation.operationId, key).toEqual(expect.any(String));
      expect(operation.tags, key).toHaveLength(1);
      if (!path.startsWith('/api/v1/')) continue;
      const ok = (operation.responses['200'] as OpenAPIV3.ResponseObject).content!['application/json']!.schema as OpenAPIV3.SchemaObject;
      expect(Object.keys(ok.properties ?? {}).slice(0, 2), key).toEqual(['result', 'msg']);
      expect(Object.keys(ok.properties ?? {}).at(-1), key).toBe('ignored_parameters_unsupported');
      expect(Object.keys(operation.responses).sort(), key).toEqual(
        open ? ['200', '503'] : expect.arrayContaining(['200', '400', '401', '429', '503']),
      );
    }
  });

  // The document and the decoder read the same declarations (src/http/params.ts): every documented
  // parameter, sent with a valid value, is decoded, none is reported ignored.
  it('every documented parameter is accepted by its endpoint (real successful requests)', async () => {
    const queue = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/register',
      as: 'U',
      form: {
        client_gravatar: 'false',
        include_subscribers: 'true',
        client_capabilities: '{"notification_settings_null":true}',
        event_types: '["navigation_view"]',
        fetch_event_types: '["navigation_views"]',
        queue_lifespan_secs: '60',
        idle_queue_timeout: '"mobile"',
      },
    });
    const queueId = queue.json().queue_id as string;
    const requests: Array<[string, Parameters<typeof api>[1]]> = [
      ['GET /api/v1/server_settings', { url: '/api/v1/server_settings' }],
      ['GET /api/v1/users', { url: '/api/v1/users?client_gravatar=false&include_custom_profile_fields=true&user_ids=%5B14%5D', as: 'U' }],
      ['GET /api/v1/users/{user}', { url: '/api/v1/users/14?client_gravatar=false&include_custom_profile_fields=true', as: 'U' }],
      ['GET /api/v1/users/me', { url: '/api/v1/users/me', as: 'U' }],
      ['POST /api/v1/users/{user_id}/reactivate', { method: 'POST', url: '/api/v1/users/18/reactivate', as: 'O' }],
      [
        'DELETE /api/v1/users/{user}',
        {
          method: 'DELETE',
          url: '/api/v1/users/18',
          as: 'O',
          form: { actions: '{"delete_profile":true}', deactivation_notification_comment: 'x' },
        },
      ],
      ['GET /api/v1/users/me/subscriptions', { url: '/api/v1/users/me/subscriptions?include_subscribers=true', as: 'U' }],
      [
        'POST /api/v1/users/me/subscriptions/properties',
        {
          method: 'POST',
          url: '/api/v1/users/me/subscriptions/properties',
          as: 'U',
          form: { subscription_data: '[{"stream_id":100,"property":"pin_to_top","value":true}]' },
        },
      ],
      [
        'PATCH /api/v1/users/me/subscriptions/{stream_id}',
        { method: 'PATCH', url: '/api/v1/users/me/subscriptions/100', as: 'U', form: { property: 'is_muted', value: 'true' } },
      ],
      [
        'POST /api/v1/users/me/subscriptions/{stream_id}',
        { method: 'POST', url: '/api/v1/users/me/subscriptions/100', as: 'U', form: { property: 'color', value: '#ff0000' } },
      ],
      ['GET /api/v1/navigation_views', { url: '/api/v1/navigation_views', as: 'U' }],
      [
        'POST /api/v1/navigation_views',
        {
          method: 'POST',
          url: '/api/v1/navigation_views',
          as: 'U',
          form: { fragment: 'narrow/channel/100-P', is_pinned: 'true', name: 'Channel P' },
        },
      ],
      [
        'PATCH /api/v1/navigation_views/{fragment}',
        { method: 'PATCH', url: '/api/v1/navigation_views/narrow%2Fchannel%2F100-P', as: 'U', form: { is_pinned: 'false', name: 'P' } },
      ],
      [
        'DELETE /api/v1/navigation_views/{fragment}',
        { method: 'DELETE', url: '/api/v1/navigation_views/narrow%2Fchannel%2F100-P', as: 'U' },
      ],
      ['GET /api/v1/events', { url: `/api/v1/events?last_event_id=-1&queue_id=${queueId}&dont_block=true`, as: 'U' }],
      ['DELETE /api/v1/events', { method: 'DELETE', url: '/api/v1/events', as: 'U', form: { queue_id: queueId } }],
      [
        'POST /api/v1/users',
        { method: 'POST', url: '/api/v1/users', as: 'A', form: { email: 'new@example.com', password: 'secret-enough', full_name: 'New' } },
      ],
      // new_email is decoded, and refused: no one holds can_change_user_emails here.
      [
        'PATCH /api/v1/users/{user}',
        {
          method: 'PATCH',
          url: '/api/v1/users/14',
          as: 'O',
          form: { full_name: 'V Renamed', role: '300', profile_data: '[{"id":1,"value":"x"}]', new_email: 'v2@example.com' },
        },
      ],
      ['DELETE /api/v1/users/me', { method: 'DELETE', url: '/api/v1/users/me', as: 'M' }],
      // Subscriptions (membership).
      [
        'POST /api/v1/users/me/subscriptions',
        {
          method: 'POST',
          url: '/api/v1/users/me/subscriptions',
          as: 'U',
          form: {
            subscriptions: '[{"name":"Q"}]',
            principals: '[13]',
            authorization_errors_fatal: 'false',
            invite_only: 'false',
            is_web_public: 'false',
            history_public_to_subscribers: 'false',
            send_new_subscription_messages: 'true',
          },
        },
      ],
      [
        'DELETE /api/v1/users/me/subscriptions',
        { method: 'DELETE', url: '/api/v1/users/me/subscriptions', as: 'U', form: { subscriptions: '["Q"]', principals: '[13]' } },
      ],
      ['GET /api/v1/users/{user_id}/subscriptions/{stream_id}', { url: '/api/v1/users/13/subscriptions/100', as: 'U' }],
      ['GET /api/v1/streams/{stream_id}/members', { url: '/api/v1/streams/100/members', as: 'U' }],
      // Channels.
      [
        'GET /api/v1/streams',
        {
          url:
            '/api/v1/streams?include_public=true&include_web_public=true&include_subscribed=true&exclude_archived=false&include_all=false' +
            '&include_all_active=false&include_default=true&include_owner_subscribed=true&include_can_access_content=false',
          as: 'U',
        },
      ],
      ['GET /api/v1/streams/{stream_id}', { url: '/api/v1/streams/100', as: 'U' }],
      ['GET /api/v1/get_stream_id', { url: '/api/v1/get_stream_id?stream=P', as: 'U' }],
    ];
    const refusedAsDocumented: Record<string, string> = { 'PATCH /api/v1/users/{user}': 'User not authorized to change user emails' };
    await ctx.db.updateTable('users').set({ can_create_users: true }).where('id', '=', 11).execute();
    const documented = Object.fromEntries(operations().map((entry) => [entry.key, documentedParameters(entry.operation)]));
    const registerBody = [
      'client_gravatar',
      'include_subscribers',
      'client_capabilities',
      'event_types',
      'fetch_event_types',
      'queue_lifespan_secs',
      'idle_queue_timeout',
    ];
    expect(registerBody).toEqual(documented['POST /api/v1/register']!.body);
    for (const [key, request] of requests) {
      const { query = [], body = [] } = documented[key]!;
      const sent = [...new URL(request.url, 'http://x').searchParams.keys(), ...Object.keys(request.form ?? {})];
      expect(sent, key).toEqual([...query, ...body]);
      const res = await api(ctx.app, request);
      if (refusedAsDocumented[key]) {
        expect(res.json(), key).toMatchObject({ result: 'error', msg: refusedAsDocumented[key] });
        continue;
      }
      expect(res.statusCode, `${key}: ${res.body}`).toBe(200);
      expect(res.json(), key).not.toHaveProperty('ignored_parameters_unsupported');
    }
    expect(requests.length + 1).toBe(Object.keys(EXPECTED).length);
  });

  it('route schemas neither validate, coerce nor serialize: the API answers exactly as before', async () => {
    const cases: Array<[Parameters<typeof api>[1], number, object]> = [
      [
        { url: '/api/v1/users?client_gravatar=yes', as: 'U' },
        400,
        { result: 'error', msg: 'client_gravatar is not valid JSON', code: 'BAD_REQUEST' },
      ],
      [
        { url: '/api/v1/users/me/subscriptions?include_subscribers=1', as: 'U' },
        400,
        { result: 'error', msg: 'include_subscribers is not a boolean', code: 'BAD_REQUEST' },
      ],
      [
        { method: 'PATCH', url: '/api/v1/users/me/subscriptions/100', as: 'U', form: { value: 'true' } },
        400,
        { result: 'error', msg: "Missing 'property' argument", var_name: 'property', code: 'REQUEST_VARIABLE_MISSING' },
      ],
      [
        { url: '/api/v1/events?last_event_id=-1', as: 'U' },
        400,
        { result: 'error', msg: "Missing 'queue_id' argument", code: 'BAD_REQUEST' },
      ],
      [
        { method: 'POST', url: '/api/v1/register', as: 'U', form: { queue_lifespan_secs: '"60"' } },
        400,
        { result: 'error', msg: 'queue_lifespan_secs is not an integer', code: 'BAD_REQUEST' },
      ],
    ];
    for (const [request, status, body] of cases) {
      const res = await api(ctx.app, request);
      expect(res.statusCode, request.url).toBe(status);
      expect(res.body, request.url).toBe(JSON.stringify(body));
    }
    // Success bodies keep every key in the handler's order (docs/api.md §3.5 example).
    const user = await api(ctx.app, { url: '/api/v1/users/14', as: 'U' });
    expect(user.body).toBe(
      JSON.stringify({
        result: 'success',
        msg: '',
        user: {
          email: 'v@example.com',
          user_id: 14,
          avatar_version: 1,
          is_admin: false,
          is_owner: false,
          is_guest: false,
          role: 400,
          is_bot: false,
          full_name: 'V Member',
          timezone: '',
          is_active: true,
          date_joined: '2024-01-02T03:04+00:00',
          delivery_email: 'v@example.com',
          avatar_url: null,
          is_imported_stub: false,
        },
      }),
    );
    // Path parameters stay what the router matched (no integer coercion of `stream_id`, no renaming of `*`).
    const unknown = await api(ctx.app, { method: 'PATCH', url: '/api/v1/navigation_views/a%2Fb', as: 'U', form: { is_pinned: 'true' } });
    expect(unknown.body).toBe(JSON.stringify({ result: 'error', msg: 'Navigation view does not exist.', code: 'NOT_FOUND' }));
  });

  // test/helpers/documented-responses.ts: api() checks every 200 body against the document.
  it("the test helper refuses a 200 body that is not the route's documented response", async () => {
    const real = await api(ctx.app, { url: '/api/v1/users/me/subscriptions', as: 'U' });
    const answer = (body: object) => ({ ...real, body: JSON.stringify(body) });
    const listed = real.json<{ subscriptions: Record<string, unknown>[] }>();
    const subscription = listed.subscriptions[0]!;
    const check = (url: string, body: object) => () => checkDocumentedResponse(ctx.app, 'GET', url, answer(body));
    expect(check('/api/v1/users/me/subscriptions', listed)).not.toThrow();
    // A wrong type, a missing field, an undocumented one.
    expect(
      check('/api/v1/users/me/subscriptions', { result: 'success', msg: '', subscriptions: [{ ...subscription, pin_to_top: 'yes' }] }),
    ).toThrow('/subscriptions/0/pin_to_top');
    expect(check('/api/v1/users/me/subscriptions', { result: 'success', msg: '' })).toThrow('does not match');
    expect(check('/api/v1/users/me/subscriptions', { ...listed, extra: 1 })).toThrow('does not match');
    // The route is found through the router's parameters.
    expect(check('/api/v1/users/14', { result: 'success', msg: '', user: {} })).toThrow('of /api/v1/users/{user}');
  });
});
