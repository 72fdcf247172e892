import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { createDatabase } from '../src/db/database.js';
import { sweepOnce } from '../src/modules/maintenance/sweeper.js';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { createQueue, ids } from './helpers/fixture.js';
import { waitFor } from './helpers/wait.js';

// The periodic sweep: audit-log retention (AUDIT_LOG_RETENTION_DAYS) and expired queues, in bounded
// batches. Queue expiry as clients see it is case 172 (test/events-lifecycle.test.ts).

let ctx: TestContext | undefined;
afterEach(async () => {
  await ctx?.close();
  ctx = undefined;
});

/** `count` audit rows of U on P, created `daysAgo` days ago. */
async function auditRows(context: TestContext, count: number, daysAgo: number): Promise<void> {
  await sql`
    INSERT INTO subscription_audit_log (realm_id, acting_user_id, modified_user_id, stream_id, property, old_value, new_value, created_at)
    SELECT 1, ${ids.U}, ${ids.U}, ${ids.P}, 'pin_to_top', 'false', 'true', now() - make_interval(days => ${daysAgo})
    FROM generate_series(1, ${count})
  `.execute(context.db);
}

const ageCounts = async (context: TestContext) =>
  (
    await sql<{ old: number; recent: number }>`
    SELECT count(*) FILTER (WHERE created_at < now() - interval '30 days')::int AS old,
           count(*) FILTER (WHERE created_at >= now() - interval '30 days')::int AS recent
    FROM subscription_audit_log
  `.execute(context.db)
  ).rows[0];

describe('audit-log retention', () => {
  it('deletes the rows older than AUDIT_LOG_RETENTION_DAYS, in batches, and keeps the rest', async () => {
    ctx = await createTestContext({ env: { AUDIT_LOG_RETENTION_DAYS: '30' } });
    await auditRows(ctx, 12_000, 31); // more than two batches
    await auditRows(ctx, 5, 29);
    // An audit row written through the API is recent.
    await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/users/me/subscriptions/properties',
      as: 'U',
      form: { subscription_data: JSON.stringify([{ stream_id: ids.P, property: 'pin_to_top', value: true }]) },
    });
    ctx.database.statements.length = 0;
    expect(await sweepOnce(ctx.db, ctx.config)).toEqual({ queues: 0, auditRows: 12_000 });
    expect(await ageCounts(ctx)).toEqual({ old: 0, recent: 6 });
    // 5,000 rows per statement: three deletes, and one more look for expired queues.
    expect(ctx.database.statements.filter((text) => text.startsWith('delete from "subscription_audit_log"'))).toHaveLength(3);
    expect(await sweepOnce(ctx.db, ctx.config)).toEqual({ queues: 0, auditRows: 0 });
  });

  it('runs by itself every QUEUE_SWEEP_INTERVAL_SECONDS (default retention: 365 days)', async () => {
    ctx = await createTestContext({ env: { QUEUE_SWEEP_INTERVAL_SECONDS: '1' } });
    expect(ctx.config.auditLogRetentionDays).toBe(365);
    await auditRows(ctx, 3, 366);
    await auditRows(ctx, 2, 364);
    await waitFor(async () => expect((await ctx!.db.selectFrom('subscription_audit_log').select('id').execute()).length).toBe(2));
  });
});

describe('expired queues', () => {
  it('are deleted in batches with their events; queues still alive are kept', async () => {
    ctx = await createTestContext();
    // Made directly: register would keep at most QUEUE_MAX_PER_USER of them.
    await sql`
      INSERT INTO event_queues (id, realm_id, user_id, lifespan_seconds, last_active_at)
      SELECT gen_random_uuid(), 1, ${ids.U}, 600, now() - interval '1 hour' FROM generate_series(1, 1200)
    `.execute(ctx.db);
    const alive = await createQueue(ctx.db, 'V');
    await sql`INSERT INTO events (queue_id, id, realm_id, payload) SELECT id, 0, 1, '{"type":"heartbeat"}' FROM event_queues`.execute(
      ctx.db,
    );
    expect(await sweepOnce(ctx.db, ctx.config)).toEqual({ queues: 1200, auditRows: 0 });
    expect((await ctx.db.selectFrom('event_queues').select('id').execute()).map((row) => row.id)).toEqual([alive]);
    expect((await ctx.db.selectFrom('events').select('queue_id').execute()).map((row) => row.queue_id)).toEqual([alive]);
  });

  it('a queue a transaction holds (a write appending to it) is left for the next sweep, not waited for', async () => {
    ctx = await createTestContext();
    const expired = (user: 'U' | 'V') =>
      sql<{ id: string }>`
      INSERT INTO event_queues (id, realm_id, user_id, lifespan_seconds, last_active_at)
      VALUES (gen_random_uuid(), 1, ${ids[user]}, 600, now() - interval '1 hour') RETURNING id::text AS id
    `.execute(ctx!.db);
    const held = (await expired('U')).rows[0]!.id;
    await expired('V'); // free: swept at once
    const holder = createDatabase(ctx.database.url, { poolMax: 1 });
    try {
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let holding!: () => void;
      const isHeld = new Promise<void>((resolve) => (holding = resolve));
      const transaction = holder.db.transaction().execute(async (tx) => {
        await tx
          .updateTable('event_queues')
          .set((eb) => ({ next_event_id: eb('next_event_id', '+', 1) }))
          .where('id', '=', held)
          .execute();
        holding();
        await released;
      });
      await isHeld;
      expect(await sweepOnce(ctx.db, ctx.config)).toEqual({ queues: 1, auditRows: 0 });
      expect((await ctx.db.selectFrom('event_queues').select('id').execute()).map((row) => row.id)).toEqual([held]);
      release();
      await transaction;
    } finally {
      await holder.close();
    }
    expect(await sweepOnce(ctx.db, ctx.config)).toEqual({ queues: 1, auditRows: 0 });
    expect(await ctx.db.selectFrom('event_queues').select('id').execute()).toEqual([]);
  });
});
