import { describe, expect, it } from 'vitest';
import { api, useTestContext } from './helpers/app.js';
import { errorBody, OK, success } from './helpers/envelope.js';
import { ids } from './helpers/fixture.js';
import {
  allViewRows,
  BUILT_IN_NAMED,
  createViewsContext,
  eventsOf,
  EXISTS,
  expectRefused,
  list,
  patch,
  post,
  remove,
  REMOVE_MISSING,
  seedViews,
  storedViews,
  UPDATE_MISSING,
} from './helpers/navigation-views.js';
import { waitForLockWaiter } from './helpers/database.js';

const ctx = useTestContext(createViewsContext);

const updateEvent = (fragment: string, data: Record<string, unknown>, id: number) => ({
  type: 'navigation_view',
  op: 'update',
  fragment,
  data,
  id,
});
const removeEvent = (fragment: string, id: number) => ({ type: 'navigation_view', op: 'remove', fragment, id });

const ALERTED = { fragment: 'narrow/is/alerted', is_pinned: true, name: 'Alert Words' };
const ATTACHMENT = { fragment: 'narrow/is/attachment', is_pinned: true, name: 'Attachments' };
const INBOX = { fragment: 'inbox', is_pinned: true, name: null };
const RECENT = { fragment: 'recent', is_pinned: true, name: null };

describe('PATCH /api/v1/navigation_views/{fragment}', () => {
  it('case 133: unpins a built-in view', async () => {
    await seedViews(ctx, 'U', [INBOX]);
    const res = await patch(ctx, 'inbox', { is_pinned: 'false' });
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    expect((await list(ctx)).json().navigation_views).toEqual([{ fragment: 'inbox', is_pinned: false, name: null }]);
    expect(JSON.stringify(await eventsOf(ctx, ctx.queueU))).toBe(JSON.stringify([updateEvent('inbox', { is_pinned: false }, 0)]));
  });

  it('case 134: a built-in view cannot be given a name', async () => {
    await seedViews(ctx, 'U', [INBOX]);
    await expectRefused(ctx, () => patch(ctx, 'inbox', { is_pinned: 'true', name: 'Inbox View' }), 400, BUILT_IN_NAMED);
  });

  for (const [label, path] of [
    ['case 135', 'narrow/is/alerted'],
    ['case 136: percent-encoded slashes', 'narrow%2Fis%2Falerted'],
  ]) {
    it(`${label}: renames and unpins a custom view; data holds name then is_pinned`, async () => {
      await seedViews(ctx, 'U', [ALERTED]);
      // Parameters in the opposite order on the wire: the event's order is fixed.
      const res = await api(ctx.app, {
        method: 'PATCH',
        url: `/api/v1/navigation_views/${path}`,
        as: 'U',
        form: [
          ['is_pinned', 'false'],
          ['name', 'Watched Phrases'],
        ],
      });
      expect(res.body).toBe(OK);
      expect((await list(ctx)).json().navigation_views).toEqual([
        { fragment: 'narrow/is/alerted', is_pinned: false, name: 'Watched Phrases' },
      ]);
      expect(JSON.stringify(await eventsOf(ctx, ctx.queueU))).toBe(
        JSON.stringify([updateEvent('narrow/is/alerted', { name: 'Watched Phrases', is_pinned: false }, 0)]),
      );
    });
  }

  it("case 137: a name another of the caller's views has is refused", async () => {
    await seedViews(ctx, 'U', [ALERTED, ATTACHMENT]);
    expect((await patch(ctx, 'narrow/is/alerted', { name: 'Watched Phrases' })).statusCode).toBe(200);
    await expectRefused(ctx, () => patch(ctx, 'narrow/is/attachment', { name: 'Watched Phrases' }), 400, EXISTS);
    // Compared after trimming, exactly.
    await expectRefused(ctx, () => patch(ctx, 'narrow/is/attachment', { name: ' Watched Phrases ' }), 400, EXISTS);
    expect((await patch(ctx, 'narrow/is/attachment', { name: 'watched phrases' })).statusCode).toBe(200);
  });

  it("case 138: the view's own current name is refused too", async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    await expectRefused(ctx, () => patch(ctx, 'narrow/is/alerted', { name: 'Alert Words' }), 400, EXISTS);
  });

  it('case 139: a missing view is 404 NOT_FOUND', async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    await expectRefused(ctx, () => patch(ctx, 'nonexistent', { is_pinned: 'false' }), 404, UPDATE_MISSING);
  });

  it('case 140: the built-in name check comes before the 404', async () => {
    await expectRefused(ctx, () => patch(ctx, 'inbox', { name: 'x' }), 400, BUILT_IN_NAMED);
    await expectRefused(ctx, () => patch(ctx, 'inbox', { is_pinned: 'true' }), 404, UPDATE_MISSING);
  });

  it('case 141: the name clash comes before the 404', async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    await expectRefused(ctx, () => patch(ctx, 'nonexistent', { name: 'Alert Words' }), 400, EXISTS);
    await expectRefused(ctx, () => patch(ctx, 'nonexistent', { name: 'Free Name' }), 404, UPDATE_MISSING);
  });

  it('case 142: no parameters changes nothing and still announces an empty update', async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    const before = await allViewRows(ctx);
    const res = await patch(ctx, 'narrow/is/alerted');
    expect(res.body).toBe(OK);
    expect(await allViewRows(ctx)).toEqual(before);
    expect(JSON.stringify(await eventsOf(ctx, ctx.queueU))).toBe(JSON.stringify([updateEvent('narrow/is/alerted', {}, 0)]));
  });

  it('case 143: a blank name is refused', async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    await expectRefused(ctx, () => patch(ctx, 'narrow/is/alerted', { name: ' ' }), 400, errorBody('name cannot be blank'));
  });

  it('parameters are parsed in table order and validated', async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    await expectRefused(
      ctx,
      () => patch(ctx, 'narrow/is/alerted', { name: '', is_pinned: 'yes' }),
      400,
      errorBody('is_pinned is not valid JSON'),
    );
    await expectRefused(ctx, () => patch(ctx, 'narrow/is/alerted', { is_pinned: 'null' }), 400, errorBody('is_pinned is not a boolean'));
    await expectRefused(
      ctx,
      () => patch(ctx, 'narrow/is/alerted', { name: 'n'.repeat(501) }),
      400,
      errorBody('name is too long (limit: 500 characters)'),
    );
    await expectRefused(
      ctx,
      () => patch(ctx, 'narrow/is/alerted', { name: 'a\u0000' }),
      400,
      errorBody('name cannot contain NUL characters'),
    );
  });

  it('changes only the supplied field; the name is stored trimmed', async () => {
    await seedViews(ctx, 'U', [ALERTED, { fragment: 'Inbox', is_pinned: false, name: 'Mine' }]);
    expect((await patch(ctx, 'narrow/is/alerted', { name: '  Renamed ' })).body).toBe(OK);
    // `Inbox` is not the built-in `inbox`: it may be renamed.
    expect((await patch(ctx, 'Inbox', { name: 'Still mine' })).body).toBe(OK);
    expect(await storedViews(ctx, 'U')).toEqual([
      { ...ALERTED, name: 'Renamed' },
      { fragment: 'Inbox', is_pinned: false, name: 'Still mine' },
    ]);
    expect(JSON.stringify(await eventsOf(ctx, ctx.queueU))).toBe(
      JSON.stringify([updateEvent('narrow/is/alerted', { name: 'Renamed' }, 0), updateEvent('Inbox', { name: 'Still mine' }, 1)]),
    );
  });

  it('the path fragment is used verbatim: not trimmed, + kept, %20 decoded, slashes kept (repeated ones collapse, docs/api.md §1.1)', async () => {
    await seedViews(ctx, 'U', [
      RECENT,
      { fragment: 'a+b c', is_pinned: true, name: 'Plus' },
      { fragment: 'narrow/x/', is_pinned: true, name: 'Slashes' },
    ]);
    await expectRefused(ctx, () => patch(ctx, '%20recent', { is_pinned: 'false' }), 404, UPDATE_MISSING);
    await expectRefused(ctx, () => patch(ctx, 'a%20b%20c', { is_pinned: 'false' }), 404, UPDATE_MISSING);
    expect((await patch(ctx, 'a+b%20c', { is_pinned: 'false' })).body).toBe(OK);
    expect((await patch(ctx, 'narrow//x/', { is_pinned: 'false' })).body).toBe(OK);
    expect((await storedViews(ctx, 'U')).map((view) => view.is_pinned)).toEqual([true, false, false]);
  });

  it('a path fragment with NUL names no view (404, never a 500), after the name check', async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    await expectRefused(ctx, () => patch(ctx, 'a%00b', { is_pinned: 'false' }), 404, UPDATE_MISSING);
    await expectRefused(ctx, () => patch(ctx, 'a%00b', { name: 'Alert Words' }), 400, EXISTS);
    await expectRefused(ctx, () => remove(ctx, 'a%00b'), 404, REMOVE_MISSING);
  });

  it('path parameters are not parameters; unknown ones are reported', async () => {
    await seedViews(ctx, 'U', [RECENT]);
    const res = await api(ctx.app, {
      method: 'PATCH',
      url: '/api/v1/navigation_views/recent?fragment=recent',
      as: 'U',
      form: { is_pinned: 'false', client: 'c', b: '1' },
    });
    expect(res.body).toBe(success({ ignored_parameters_unsupported: ['b', 'fragment'] }));
  });

  it("case 144 (PATCH): another user's view counts as missing, in any organization", async () => {
    await seedViews(ctx, 'U', [RECENT, ALERTED]);
    await expectRefused(ctx, () => patch(ctx, 'recent', { is_pinned: 'false' }, 'V'), 404, UPDATE_MISSING);
    // U's names do not clash for V either.
    await expectRefused(ctx, () => patch(ctx, 'narrow/x', { name: 'Alert Words' }, 'V'), 404, UPDATE_MISSING);
    const x = () =>
      api(ctx.app, {
        method: 'PATCH',
        url: '/api/v1/navigation_views/recent',
        as: 'X',
        host: 'other.chat.example.com',
        form: { is_pinned: 'false' },
      });
    await expectRefused(ctx, x, 404, UPDATE_MISSING);
    expect(await storedViews(ctx, 'U')).toEqual([RECENT, ALERTED]);
  });

  it('round trips: a constant number of statements whatever the input', async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    // auth; then BEGIN, the lock, the checked update with its event and COMMIT, sent in one burst
    const forms: Record<string, string>[] = [{ is_pinned: 'false', name: 'n'.repeat(500) }, { is_pinned: 'true' }, {}];
    for (const form of forms) {
      ctx.database.statements.length = 0;
      expect((await patch(ctx, 'narrow/is/alerted', form)).statusCode).toBe(200);
      expect(ctx.database.statements).toHaveLength(5);
      expect(ctx.database.statements.slice(1, 3)).toEqual(['BEGIN', 'SELECT user_lock_now($1, $2)']); // a small write's: refused, not waited for, when held
    }
    ctx.database.statements.length = 0;
    expect((await patch(ctx, 'nonexistent', { name: 'free' })).statusCode).toBe(404);
    // The same statements: the update refuses, and its transaction rolls back.
    expect(ctx.database.statements).toHaveLength(5);
  });

  it('a unique violation from the database on rename becomes "already exists"', async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    let pending: ReturnType<typeof patch> | undefined;
    await ctx.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('navigation_views')
        .values({ realm_id: ids.R, user_id: ids.U, fragment: 'narrow/raw', is_pinned: true, name: 'dup' })
        .execute();
      pending = patch(ctx, 'narrow/is/alerted', { name: 'dup' });
      await waitForLockWaiter(ctx.db);
    });
    const res = await pending!;
    expect(res.statusCode).toBe(400);
    expect(res.body).toBe(EXISTS);
    expect(await storedViews(ctx, 'U')).toEqual([ALERTED, { fragment: 'narrow/raw', is_pinned: true, name: 'dup' }]);
    expect(await eventsOf(ctx, ctx.queueU)).toEqual([]);
  });
});

describe('DELETE /api/v1/navigation_views/{fragment}', () => {
  it('case 145: removes a built-in view and announces it', async () => {
    await seedViews(ctx, 'U', [RECENT, INBOX]);
    const res = await remove(ctx, 'recent');
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe(OK);
    expect((await list(ctx)).json().navigation_views).toEqual([INBOX]);
    expect(JSON.stringify(await eventsOf(ctx, ctx.queueU))).toBe(JSON.stringify([removeEvent('recent', 0)]));
  });

  it('case 146: a missing view is 404 with code BAD_REQUEST', async () => {
    await seedViews(ctx, 'U', [RECENT]);
    await expectRefused(ctx, () => remove(ctx, 'nonexistent'), 404, REMOVE_MISSING);
    await expectRefused(ctx, () => remove(ctx, 'Recent'), 404, REMOVE_MISSING);
    await expectRefused(ctx, () => remove(ctx, 'recent%20'), 404, REMOVE_MISSING);
  });

  it("case 144: another user can neither change nor remove the caller's view", async () => {
    await seedViews(ctx, 'U', [RECENT]);
    await expectRefused(ctx, () => patch(ctx, 'recent', { is_pinned: 'false' }, 'V'), 404, UPDATE_MISSING);
    await expectRefused(ctx, () => remove(ctx, 'recent', 'V'), 404, REMOVE_MISSING);
    const x = () => api(ctx.app, { method: 'DELETE', url: '/api/v1/navigation_views/recent', as: 'X', host: 'other.chat.example.com' });
    await expectRefused(ctx, x, 404, REMOVE_MISSING);
    expect(await storedViews(ctx, 'U')).toEqual([RECENT]);
    expect(await eventsOf(ctx, ctx.queueU)).toEqual([]);
    expect(await eventsOf(ctx, ctx.queueV)).toEqual([]);
  });

  it("removes only the caller's row when others have the same fragment", async () => {
    await seedViews(ctx, 'V', [RECENT]);
    await seedViews(ctx, 'U', [RECENT]);
    expect((await remove(ctx, 'recent')).body).toBe(OK);
    expect(await storedViews(ctx, 'U')).toEqual([]);
    expect(await storedViews(ctx, 'V')).toEqual([RECENT]);
  });

  it('targets fragments with slashes, encoded or not, and reports unknown parameters', async () => {
    await seedViews(ctx, 'U', [ALERTED, ATTACHMENT]);
    expect((await remove(ctx, 'narrow%2Fis%2Falerted')).body).toBe(OK);
    const res = await api(ctx.app, {
      method: 'DELETE',
      url: '/api/v1/navigation_views/narrow/is/attachment?x=1',
      as: 'U',
      form: { fragment: 'f' },
    });
    expect(res.body).toBe(success({ ignored_parameters_unsupported: ['fragment', 'x'] }));
    expect(await storedViews(ctx, 'U')).toEqual([]);
    expect(JSON.stringify(await eventsOf(ctx, ctx.queueU))).toBe(
      JSON.stringify([removeEvent('narrow/is/alerted', 0), removeEvent('narrow/is/attachment', 1)]),
    );
  });

  it('round trips: a constant number of statements', async () => {
    await seedViews(ctx, 'U', [ALERTED]);
    ctx.database.statements.length = 0;
    expect((await remove(ctx, 'narrow/is/alerted')).statusCode).toBe(200);
    // auth; then BEGIN, the lock, the checked delete with its event and COMMIT, sent in one burst
    expect(ctx.database.statements).toHaveLength(5);
    expect(ctx.database.statements.slice(1, 3)).toEqual(['BEGIN', 'SELECT user_lock_now($1, $2)']); // a small write's: refused, not waited for, when held
    ctx.database.statements.length = 0;
    expect((await remove(ctx, `narrow/${'x'.repeat(2000)}`)).statusCode).toBe(404);
    // The same statements: the delete refuses, and its transaction rolls back.
    expect(ctx.database.statements).toHaveLength(5);
  });
});

describe('navigation view events', () => {
  it("case 148: add, update and remove reach only the acting user's queues", async () => {
    expect((await post(ctx, { fragment: 'recent', is_pinned: 'true' })).statusCode).toBe(200);
    expect((await patch(ctx, 'recent', { is_pinned: 'false' })).statusCode).toBe(200);
    expect((await remove(ctx, 'recent')).statusCode).toBe(200);
    expect(JSON.stringify(await eventsOf(ctx, ctx.queueU))).toBe(
      JSON.stringify([
        { type: 'navigation_view', op: 'add', navigation_view: { fragment: 'recent', is_pinned: true, name: null }, id: 0 },
        updateEvent('recent', { is_pinned: false }, 1),
        removeEvent('recent', 2),
      ]),
    );
    expect(await eventsOf(ctx, ctx.queueV)).toEqual([]);
  });
});
