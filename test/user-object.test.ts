import { describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.js';
import { renderMarkdown } from '../src/lib/markdown.js';
import { canAccessUser, canSeeDeliveryEmail, type UserViewer } from '../src/modules/users/users.access.js';
import {
  avatarUrl,
  buildInaccessibleUserPlaceholder,
  buildProfileData,
  buildUserObject,
  formatDateJoined,
  uploadedAvatarHash,
  type UserRecord,
} from '../src/modules/users/users.serializers.js';
import { dummyAddressDigits, parseUserId } from '../src/modules/users/users.service.js';
import { FIXTURE_ENV } from './helpers/app.js';
import { placeholderObject } from './helpers/users.js';

/** The pure parts of the user endpoints: docs/api.md §2.3–§2.6 and docs/api.md §2.11, without HTTP or a database. */

const config = loadConfig({ ...FIXTURE_ENV });
const viewer = (role: number, id = 13, restricted = false): UserViewer => ({
  id,
  role,
  realmSubdomain: '',
  realmCanAccessAllUsersGroup: restricted ? 'members' : 'everyone',
});
const V: UserRecord = {
  id: 14,
  realmId: 1,
  deliveryEmail: 'v@example.com',
  fullName: 'V Member',
  dateJoined: new Date('2024-01-02T03:04:05Z'),
  isActive: true,
  role: 400,
  botType: null,
  botOwnerId: null,
  timezone: '',
  avatarSource: 'G',
  avatarVersion: 1,
  emailAddressVisibility: 1,
  isImportedStub: false,
  isDeleted: false,
};
const defaults = { clientGravatar: true, includeCustomProfileFields: false };

describe('buildUserObject', () => {
  it('builds the docs/api.md §3.5 example with keys in order', () => {
    expect(JSON.stringify(buildUserObject(viewer(400), V, defaults, config))).toBe(
      JSON.stringify({
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
      }),
    );
  });

  it('omitIsActive leaves is_active out and keeps the rest in order', () => {
    const keys = Object.keys(
      buildUserObject(
        viewer(400),
        { ...V, isDeleted: true, isActive: false, profileValues: [] },
        { ...defaults, includeCustomProfileFields: true, omitIsActive: true },
        config,
      ),
    );
    expect(keys).toEqual([
      'email',
      'user_id',
      'avatar_version',
      'is_admin',
      'is_owner',
      'is_guest',
      'role',
      'is_bot',
      'full_name',
      'timezone',
      'date_joined',
      'delivery_email',
      'avatar_url',
      'is_imported_stub',
      'is_deleted',
      'profile_data',
    ]);
  });

  it('bots get bot keys after is_deleted and never profile_data', () => {
    const bot = { ...V, id: 16, botType: 3, botOwnerId: null, isDeleted: true, isActive: false, emailAddressVisibility: 4 };
    const user = buildUserObject(viewer(600), bot, { ...defaults, includeCustomProfileFields: true }, config);
    expect(Object.keys(user).slice(-4)).toEqual(['is_imported_stub', 'is_deleted', 'bot_type', 'bot_owner_id']);
    expect(user).toMatchObject({ email: 'v@example.com', delivery_email: 'v@example.com', bot_type: 3, bot_owner_id: null, is_bot: true });
  });

  it('a missing profile value list counts as no values', () => {
    expect(buildUserObject(viewer(400), V, { ...defaults, includeCustomProfileFields: true }, config).profile_data).toEqual({});
  });
});

describe('buildProfileData', () => {
  it('keys by field id as a string, rendered_value only for types 1 and 2', () => {
    const data = buildProfileData([
      { fieldId: 12, fieldType: 2, value: 'b', renderedValue: '<p>b</p>' },
      { fieldId: 3, fieldType: 5, value: 'https://x.example', renderedValue: null },
      { fieldId: 7, fieldType: 6, value: '[13]', renderedValue: '<p>ignored</p>' },
      { fieldId: 1, fieldType: 1, value: '*a*', renderedValue: null },
    ]);
    expect(JSON.stringify(data)).toBe(
      JSON.stringify({
        1: { value: '*a*', rendered_value: '<p><em>a</em></p>' },
        3: { value: 'https://x.example' },
        7: { value: '[13]' },
        12: { value: 'b', rendered_value: '<p>b</p>' },
      }),
    );
  });
});

describe('placeholder', () => {
  it('matches docs/api.md §2.11 exactly, with is_active omitted on request', () => {
    expect(JSON.stringify(buildInaccessibleUserPlaceholder(viewer(600), 10, config))).toBe(JSON.stringify(placeholderObject(10, true)));
    expect(JSON.stringify(buildInaccessibleUserPlaceholder(viewer(600), 10, config, { omitIsActive: true }))).toBe(
      JSON.stringify(placeholderObject(10, false)),
    );
    const other = buildInaccessibleUserPlaceholder({ ...viewer(600), realmSubdomain: 'other' }, 10, config);
    expect(other.email).toBe('user10@other.chat.example.com');
  });
});

describe('formatDateJoined', () => {
  it('is UTC truncated to minutes', () => {
    expect(formatDateJoined(new Date('2024-01-02T03:04:59.999Z'))).toBe('2024-01-02T03:04+00:00');
    expect(formatDateJoined(new Date('2024-06-30T23:30:00-05:00'))).toBe('2024-07-01T04:30+00:00');
    expect(formatDateJoined(new Date('0999-12-31T23:59:00Z'))).toBe('0999-12-31T23:59+00:00');
    expect(formatDateJoined(new Date('2025-10-09T10:09:00Z'))).toBe('2025-10-09T10:09+00:00');
  });
});

describe('avatars (docs/api.md §2.5)', () => {
  const gravatarOff = { ...config, enableGravatar: false };
  it('applies the rows in order', () => {
    expect(avatarUrl(V, true, true, config)).toBeNull();
    expect(avatarUrl(V, true, false, config)).toBe(
      'https://secure.gravatar.com/avatar/19eb9884e5d9ee1df522e134f90f6cea?d=identicon&version=1',
    );
    expect(avatarUrl({ ...V, avatarSource: 'U' }, true, true, config)).toBe('/user_avatars/1/fd0d7ed260c31dfffddb45a43fe12ceeb335119b.png');
    expect(avatarUrl({ ...V, avatarVersion: 4 }, true, true, gravatarOff)).toBe('/static/images/default-avatar.png?version=4');
    expect(avatarUrl(V, false, true, { ...gravatarOff, defaultAvatarUri: '/a.png?s=1' })).toBe('/a.png?s=1&version=1');
    expect(uploadedAvatarHash(14, 1, 'test-salt')).toBe('fd0d7ed260c31dfffddb45a43fe12ceeb335119b');
  });
});

describe('email visibility (docs/api.md §2.3)', () => {
  const table: [string, number, number[]][] = [
    ['owner', 100, [1, 2, 3, 5]],
    ['admin', 200, [1, 2, 3, 5]],
    ['moderator', 300, [1, 2, 5]],
    ['member', 400, [1, 2]],
    ['guest', 600, [1]],
  ];
  for (const [name, role, visible] of table) {
    it(`${name} sees visibilities ${visible.join(', ')}`, () => {
      for (const visibility of [1, 2, 3, 4, 5]) {
        const target = { ...V, emailAddressVisibility: visibility };
        expect([visibility, canSeeDeliveryEmail(viewer(role), target)]).toEqual([visibility, visible.includes(visibility)]);
        // The target itself always sees its address; bots' addresses are public.
        expect(canSeeDeliveryEmail(viewer(role, 14), target)).toBe(true);
        expect(canSeeDeliveryEmail(viewer(role), { ...target, botType: 1 })).toBe(true);
        const user = buildUserObject(viewer(role), target, defaults, config);
        expect(user.email).toBe(visibility === 1 ? 'v@example.com' : 'user14@chat.example.com');
        expect(user.delivery_email).toBe(visible.includes(visibility) ? 'v@example.com' : null);
      }
    });
  }
});

describe('access (docs/api.md §2.4)', () => {
  const guest = viewer(600, 15, true);
  it('restricts only guests of restricted organizations, except for bots, themselves and channel mates', () => {
    expect(canAccessUser(guest, { ...V, sharesActiveChannelWithViewer: false })).toBe(false);
    expect(canAccessUser(guest, V)).toBe(false);
    expect(canAccessUser(guest, { ...V, sharesActiveChannelWithViewer: true })).toBe(true);
    expect(canAccessUser(guest, { ...V, isActive: false, sharesActiveChannelWithViewer: true })).toBe(false);
    expect(canAccessUser(guest, { ...V, botType: 1, isActive: false })).toBe(true);
    expect(canAccessUser(guest, { ...V, id: 15 })).toBe(true);
    expect(canAccessUser(viewer(600, 15, false), V)).toBe(true);
    expect(canAccessUser(viewer(400, 13, true), V)).toBe(true);
  });
});

describe('path values', () => {
  it('parses ids within PostgreSQL integer range only', () => {
    expect(parseUserId('007')).toBe(7);
    expect(parseUserId('2147483647')).toBe(2147483647);
    expect(parseUserId('2147483648')).toBeUndefined();
    expect(parseUserId('0')).toBeUndefined();
    expect(parseUserId('9'.repeat(400))).toBeUndefined();
  });
  it('recognizes dummy addresses exactly, with the domain escaped', () => {
    expect(dummyAddressDigits('user14@chat.example.com', 'chat.example.com')).toBe('14');
    expect(dummyAddressDigits('user14@chatxexample.com', 'chat.example.com')).toBeUndefined();
    expect(dummyAddressDigits('USER14@chat.example.com', 'chat.example.com')).toBeUndefined();
    expect(dummyAddressDigits('user14@chat.example.com\n', 'chat.example.com')).toBeUndefined();
    expect(dummyAddressDigits('user١٤@chat.example.com', 'chat.example.com')).toBeUndefined();
  });
});

describe('renderMarkdown (docs/api.md §2.6 table)', () => {
  const table: [string, string][] = [
    ['hello', '<p>hello</p>'],
    ['**Lead**', '<p><strong>Lead</strong></p>'],
    ['line1\nline2 <b>x</b>', '<p>line1<br>\nline2 &lt;b&gt;x&lt;/b&gt;</p>'],
    ['<script>alert(1)</script>', '<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>'],
    ['[x](javascript:alert(1))', '<p>[x](javascript:alert(1))</p>'],
    ['see https://example.com', '<p>see <a href="https://example.com">https://example.com</a></p>'],
    ['', ''],
  ];
  for (const [source, html] of table) {
    it(`renders ${JSON.stringify(source)}`, () => expect(renderMarkdown(source)).toBe(html));
  }
  it('never lets raw HTML or script URLs through', () => {
    for (const source of [
      '<img src=x onerror=alert(1)>',
      '<a href="javascript:alert(1)">x</a>',
      '![x](javascript:alert(1))',
      '[m](mailto:a@b.example)',
    ]) {
      const html = renderMarkdown(source);
      // Escaped text may mention anything; what must not exist is a live tag or attribute.
      expect(html).not.toMatch(/<(img|script|iframe)\b|<[a-z][^>]*\s(on\w+|style)\s*=|(href|src)="(?!https?:|mailto:)/i);
    }
    expect(renderMarkdown('[m](mailto:a@b.example)')).toBe('<p><a href="mailto:a@b.example">m</a></p>');
  });
});
