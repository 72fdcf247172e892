import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { register } from './helpers/events.js';
import { ids, queueEvents } from './helpers/fixture.js';

/** User management against concurrent requests: the organization's lock keeps the last owner and register consistent. */

let ctx: TestContext;
beforeAll(async () => {
  ctx = await createTestContext();
  await ctx.db.updateTable('users').set({ can_create_users: true }).where('id', '=', ids.A).execute();
});
afterAll(() => ctx.close());

const activeHumanOwners = async () =>
  (
    await ctx.db
      .selectFrom('users')
      .select('id')
      .where('realm_id', '=', 1)
      .where('is_active', '=', true)
      .where('role', '=', 100)
      .where('bot_type', 'is', null)
      .execute()
  ).map((row) => row.id);

describe('concurrent user management', () => {
  it('two owners demoting each other at once: one succeeds, an owner always remains (10 runs)', async () => {
    for (let run = 0; run < 10; run++) {
      await ctx.db.updateTable('users').set({ role: 100, is_active: true }).where('id', 'in', [ids.O, ids.A]).execute();
      const [first, second] = await Promise.all([
        api(ctx.app, { method: 'PATCH', url: `/api/v1/users/${ids.A}`, as: 'O', form: { role: '400' } }),
        api(ctx.app, { method: 'PATCH', url: `/api/v1/users/${ids.O}`, as: 'A', form: { role: '400' } }),
      ]);
      expect(
        [first.statusCode, second.statusCode].filter((status) => status === 200),
        `${first.body} ${second.body}`,
      ).toHaveLength(1);
      const refused = first.statusCode === 200 ? second : first;
      // Refused by the statement's own check, or (A demoted first) by A's lost ownership.
      expect(['The owner permission cannot be removed from the only organization owner.', 'Must be an organization owner']).toContain(
        refused.json().msg,
      );
      expect(await activeHumanOwners()).toHaveLength(1);
    }
  });

  it('two owners deactivating each other at once: an owner always remains (10 runs)', async () => {
    for (let run = 0; run < 10; run++) {
      await ctx.db.updateTable('users').set({ role: 100, is_active: true }).where('id', 'in', [ids.O, ids.A]).execute();
      const results = await Promise.all([
        api(ctx.app, { method: 'DELETE', url: `/api/v1/users/${ids.A}`, as: 'O' }),
        api(ctx.app, { method: 'DELETE', url: `/api/v1/users/${ids.O}`, as: 'A' }),
      ]);
      expect(results.filter((res) => res.statusCode === 200)).toHaveLength(1);
      expect(await activeHumanOwners()).toHaveLength(1);
    }
  });

  it('register racing a user creation: the new user is in the state or in the queue, exactly once (20 runs)', async () => {
    await ctx.db.updateTable('users').set({ role: 200, is_active: true }).where('id', '=', ids.A).execute();
    for (let run = 0; run < 20; run++) {
      const [created, registered] = await Promise.all([
        api(ctx.app, {
          method: 'POST',
          url: '/api/v1/users',
          as: 'A',
          form: { email: `race${run}@example.com`, password: 'secret-enough', full_name: `Race ${run}` },
        }),
        register(ctx.app, { fetch_event_types: '["realm_user"]', event_types: '["realm_user"]' }, 'U'),
      ]);
      expect(created.statusCode, created.body).toBe(200);
      const userId = created.json().user_id as number;
      const state = registered.json<{ queue_id: string; realm_users: { user_id: number }[] }>();
      const inState = state.realm_users.some((user) => user.user_id === userId);
      const inQueue = (await queueEvents(ctx.db, state.queue_id)).some((event) => (event.person as { user_id: number }).user_id === userId);
      expect(inState !== inQueue, `run ${run}: in state ${inState}, in queue ${inQueue}`).toBe(true);
    }
  });
});
