import { isDeepStrictEqual } from 'node:util';
import type { DatabaseHandle } from '../../src/db/database.js';
import { violation } from './outcomes.js';
import { SETTING_COLUMNS } from '../../src/modules/subscriptions/settings.js';
import type { ApiEvent, SimUser } from './seed.js';

// --- Final checks: the database against the model. ---

export async function verify(db: DatabaseHandle['db'], users: SimUser[]): Promise<number> {
  let eventsChecked = 0;
  for (const user of users) {
    const subscriptions = await db.selectFrom('subscriptions').selectAll().where('user_id', '=', user.id).execute();
    for (const row of subscriptions) {
      const expected = user.settings.get(row.stream_id)!;
      const stored = Object.fromEntries(SETTING_COLUMNS.map((column) => [column, row[column]]));
      if (!isDeepStrictEqual(stored, expected)) {
        violation(`${user.label} channel ${row.stream_id}: stored ${JSON.stringify(stored)} ≠ last accepted ${JSON.stringify(expected)}`);
      }
    }
    const views = await db
      .selectFrom('navigation_views')
      .select(['fragment', 'is_pinned', 'name'])
      .where('user_id', '=', user.id)
      .orderBy('id')
      .execute();
    if (JSON.stringify(views) !== JSON.stringify(user.views)) {
      violation(`${user.label} views: stored ${JSON.stringify(views)} ≠ ${JSON.stringify(user.views)}`);
    }
    const audit = await db
      .selectFrom('subscription_audit_log')
      .select(['stream_id', 'property', 'old_value', 'new_value'])
      .where('acting_user_id', '=', user.id)
      .orderBy('id')
      .execute();
    if (audit.length !== user.audit.length)
      violation(`${user.label} audit log: ${audit.length} rows for ${user.audit.length} accepted changes`);
    else if (!isDeepStrictEqual(audit, user.audit)) violation(`${user.label} audit log differs from the accepted changes in order`);

    const expectQueue = async (queueId: string, expected: ApiEvent[], what: string) => {
      const rows = await db.selectFrom('events').select(['id', 'payload']).where('queue_id', '=', queueId).orderBy('id').execute();
      const queue = await db.selectFrom('event_queues').select('next_event_id').where('id', '=', queueId).executeTakeFirst();
      eventsChecked += rows.length;
      if (rows.some((row, index) => row.id !== index) || queue?.next_event_id !== rows.length) {
        violation(
          `${user.label} ${what} queue: ids ${rows
            .map((row) => row.id)
            .join(',')
            .slice(0, 100)}, next ${queue?.next_event_id}`,
        );
      }
      const stored = rows.map((row) => JSON.stringify(row.payload));
      const wanted = expected.map((event) => JSON.stringify(event));
      if (stored.length !== wanted.length) violation(`${user.label} ${what} queue: ${stored.length} events for ${wanted.length} expected`);
      const firstDiff = stored.findIndex((text, index) => text !== wanted[index]);
      if (firstDiff >= 0)
        violation(`${user.label} ${what} queue: event ${firstDiff} is ${stored[firstDiff]}, expected ${wanted[firstDiff]}`);
    };
    await expectQueue(user.queues.untouched, user.events, 'untouched');
    await expectQueue(
      user.queues.viewsOnly,
      user.events.filter((event) => event.type === 'navigation_view'),
      'navigation_view-only',
    );

    const polled = user.polled.filter((event) => event.type !== 'heartbeat').map(({ id: _id, ...event }) => JSON.stringify(event));
    const wanted = user.events.map((event) => JSON.stringify(event));
    eventsChecked += polled.length;
    if (polled.length !== wanted.length || polled.some((text, index) => text !== wanted[index])) {
      violation(`${user.label} long-polled queue: ${polled.length} events received for ${wanted.length} expected, or out of order`);
    }
  }
  return eventsChecked;
}
