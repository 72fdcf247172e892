import { describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { createFixtureDatabase } from './helpers/database.js';
import { api, createTestContext, FIXTURE_ENV, useTestContext } from './helpers/app.js';

const EXAMPLE = {
  result: 'success',
  msg: '',
  authentication_methods: {
    password: false,
    dev: false,
    email: false,
    ldap: false,
    remoteuser: false,
    github: false,
    azuread: false,
    gitlab: false,
    apple: false,
    google: false,
    saml: false,
    'openid connect': false,
    discord: false,
  },
  zulip_version: '12.0-dev',
  zulip_merge_base: '12.0-dev',
  zulip_feature_level: 490,
  push_notifications_enabled: false,
  is_incompatible: false,
  email_auth_enabled: false,
  require_email_format_usernames: true,
  realm_url: 'https://chat.example.com',
  realm_uri: 'https://chat.example.com',
  realm_name: 'Example',
  realm_icon: 'https://secure.gravatar.com/avatar/c4ca4238a0b923820dcc509a6f75849b?d=identicon',
  realm_description: '<p>Our team</p>',
  realm_web_public_access_enabled: false,
  external_authentication_methods: [],
};

const ctx = useTestContext(createTestContext, 'all');

describe('GET /api/v1/server_settings', () => {
  it('case 38: answers the example body, keys in order, without credentials', async () => {
    const res = await api(ctx.app, { url: '/api/v1/server_settings' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    expect(res.body).toBe(JSON.stringify(EXAMPLE));
    expect(res.headers['x-ratelimit-limit']).toBeUndefined();
  });

  it('case 39: an unknown organization host gets no realm keys', async () => {
    const res = await api(ctx.app, { url: '/api/v1/server_settings', host: 'nosuch.chat.example.com' });
    expect(res.statusCode).toBe(200);
    const { realm_url, realm_uri, realm_name, realm_icon, realm_description, realm_web_public_access_enabled, ...rest } = EXAMPLE;
    expect(res.body).toBe(JSON.stringify(rest));
  });

  it('names the subdomain organization', async () => {
    const res = await api(ctx.app, { url: '/api/v1/server_settings', host: 'other.chat.example.com' });
    expect(res.json()).toMatchObject({ realm_url: 'https://other.chat.example.com', realm_name: 'Other', realm_description: '' });
  });

  it('case 40: ignores any Authorization header', async () => {
    const res = await api(ctx.app, { url: '/api/v1/server_settings', headers: { authorization: 'Bearer junk' } });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(JSON.stringify(EXAMPLE));
  });

  it('case 41: POST is 405', async () => {
    const res = await api(ctx.app, { method: 'POST', url: '/api/v1/server_settings' });
    expect(res.statusCode).toBe(405);
    expect(res.headers.allow).toBe('GET, HEAD');
    expect(res.json()).toEqual({ result: 'error', msg: 'Method Not Allowed', allowed_methods: ['GET', 'HEAD'] });
  });

  it('case 42: reports unknown parameters last', async () => {
    const res = await api(ctx.app, { url: '/api/v1/server_settings?foo=1&client=x' });
    expect(res.body).toBe(JSON.stringify({ ...EXAMPLE, ignored_parameters_unsupported: ['foo'] }));
  });

  it('uses the default avatar URI for the icon when Gravatar is off', async () => {
    const other = await createTestContext({ env: { ENABLE_GRAVATAR: 'false' } });
    try {
      const res = await api(other.app, { url: '/api/v1/server_settings' });
      expect(res.json().realm_icon).toBe('/static/images/default-avatar.png?version=0');
    } finally {
      await other.close();
    }
  });
});

describe('the embedded default with no EXTERNAL_HOST (npm start on this machine)', () => {
  // The configuration of `PORT=33001 npm start`: no DATABASE_URL, no EXTERNAL_HOST (src/config.ts).
  const local = useTestContext(async () => {
    const { EXTERNAL_HOST, ...env } = FIXTURE_ENV;
    const config = loadConfig({ ...env, PORT: '33001' });
    const database = await createFixtureDatabase();
    const app = await buildApp({ config: { ...config, databaseUrl: database.url }, ...database });
    return {
      app,
      close: async () => {
        await app.close();
        await database.drop();
      },
    };
  }, 'all');

  it('names the organizations at localhost:<PORT> over http, in server_settings and the OpenAPI document', async () => {
    const root = await api(local.app, { url: '/api/v1/server_settings', host: 'localhost:33001' });
    expect(root.json()).toMatchObject({ realm_url: 'http://localhost:33001', realm_uri: 'http://localhost:33001', realm_name: 'Example' });
    const other = await api(local.app, { url: '/api/v1/server_settings', host: 'other.localhost:33001' });
    expect(other.json()).toMatchObject({ realm_url: 'http://other.localhost:33001', realm_name: 'Other' });
    const openapi = await local.app.inject({ url: '/api/openapi.json', headers: { host: 'localhost:33001' } });
    expect(openapi.json().servers).toEqual([{ url: 'http://localhost:33001', description: 'The root organization' }]);
  });

  it('reaches a subdomain organization at <subdomain>.localhost:<PORT>, and only there', async () => {
    const there = await api(local.app, { url: '/api/v1/users/me', as: 'X', host: 'other.localhost:33001' });
    expect(there.statusCode).toBe(200);
    expect(there.json()).toMatchObject({ result: 'success', email: expect.any(String) });
    const root = await api(local.app, { url: '/api/v1/users/me', as: 'X', host: 'localhost:33001' });
    expect(root.statusCode).toBe(401);
    expect(root.json()).toEqual({ result: 'error', msg: 'Account is not associated with this subdomain', code: 'UNAUTHORIZED' });
  });
});
