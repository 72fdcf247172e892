import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { isDeepStrictEqual } from 'node:util';
import { EXTERNAL_HOST, USER_COUNT } from './config.js';
import { expectStatus, send, state, unavailable, violation } from './outcomes.js';
import { pickOne, randomInt } from './random.js';
import { SETTING_COLUMNS } from '../../src/modules/subscriptions/settings.js';
import type { SimUser } from './seed.js';

// --- Reads, checked against the model (read-your-writes: only this user changes this data). ---

export function modelSubscriptions(user: SimUser) {
  return [...user.streams]
    .sort((a, b) => (a[1] < b[1] ? -1 : 1))
    .map(([streamId]) => {
      const settings = user.settings.get(streamId)!;
      return { stream_id: streamId, ...settings, in_home_view: !settings.is_muted };
    });
}

export function servedSubscriptions(list: unknown): unknown {
  return (list as Record<string, unknown>[]).map((sub) => ({
    stream_id: sub.stream_id,
    ...Object.fromEntries(SETTING_COLUMNS.map((column) => [column, sub[column]])),
    in_home_view: sub.in_home_view,
  }));
}

export async function readSubscriptions(port: number, user: SimUser): Promise<void> {
  const answer = await send(port, user, 'get subscriptions', { method: 'GET', path: '/api/v1/users/me/subscriptions' });
  if (!expectStatus(user, 'get subscriptions', answer, 200, '')) return;
  const served = servedSubscriptions(answer!.json!.subscriptions);
  const model = modelSubscriptions(user);
  if (!isDeepStrictEqual(served, model))
    violation(`${user.label} get subscriptions: ${JSON.stringify(served)} ≠ model ${JSON.stringify(model)}`);
}

export async function readViews(port: number, user: SimUser): Promise<void> {
  const answer = await send(port, user, 'get views', { method: 'GET', path: '/api/v1/navigation_views' });
  if (!expectStatus(user, 'get views', answer, 200, '')) return;
  if (JSON.stringify(answer!.json!.navigation_views) !== JSON.stringify(user.views)) {
    violation(`${user.label} get views: ${JSON.stringify(answer!.json!.navigation_views)} ≠ model ${JSON.stringify(user.views)}`);
  }
}

/** A register's state matches the model; its queue is then deleted again. */
export async function registerAndDelete(port: number, user: SimUser): Promise<void> {
  const answer = await send(port, user, 'register', {
    method: 'POST',
    path: '/api/v1/register',
    form: { fetch_event_types: '["subscription","navigation_views"]', client_capabilities: '{"notification_settings_null":true}' },
  });
  if (unavailable(answer)) return forgetOrphanQueues(user);
  if (!expectStatus(user, 'register', answer, 200, '')) return;
  const body = answer!.json!;
  const sameSubscriptions = isDeepStrictEqual(servedSubscriptions(body.subscriptions), modelSubscriptions(user));
  if (!sameSubscriptions || JSON.stringify(body.navigation_views) !== JSON.stringify(user.views)) {
    violation(`${user.label} register state differs from the model: ${answer!.body.slice(0, 300)}`);
  }
  const removed = await send(port, user, 'delete queue', {
    method: 'DELETE',
    path: '/api/v1/events',
    form: { queue_id: String(body.queue_id) },
  });
  if (unavailable(removed)) return forgetOrphanQueues(user);
  expectStatus(user, 'delete queue', removed, 200, '');
}

/**
 * A register or queue deletion answered 503 may have left a queue nobody knows: deleted here, so
 * that orphans never push the user's three soak queues out (QUEUE_MAX_PER_USER). Only this user's
 * client creates queues for the user, and it waits for this.
 */
export async function forgetOrphanQueues(user: SimUser): Promise<void> {
  const known = Object.values(user.queues);
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && !state.interrupted) {
    try {
      await state.checker!.deleteFrom('event_queues').where('user_id', '=', user.id).where('id', 'not in', known).execute();
      return;
    } catch {
      await sleep(250);
    }
  }
}

export async function readOthers(port: number, user: SimUser, realmUserIds: number[]): Promise<void> {
  const sameRealm = user.host === EXTERNAL_HOST;
  switch (randomInt(6)) {
    case 0: {
      const answer = await send(port, user, 'get users', { method: 'GET', path: '/api/v1/users' });
      if (expectStatus(user, 'get users', answer, 200, '')) {
        const ids = (answer!.json!.members as { user_id: number }[]).map((member) => member.user_id);
        const expected = sameRealm ? realmUserIds : [user.id];
        if (!isDeepStrictEqual(ids, expected)) violation(`${user.label} get users: ${JSON.stringify(ids)} ≠ ${JSON.stringify(expected)}`);
      }
      return;
    }
    case 1: {
      const target = pickOne(realmUserIds);
      const answer = await send(port, user, 'get user', { method: 'GET', path: `/api/v1/users/${target}` });
      expectStatus(user, 'get user', answer, sameRealm ? 200 : 400, String(target));
      return;
    }
    case 2: {
      const target = `user${randomInt(USER_COUNT)}@soak.example`;
      const answer = await send(port, user, 'get user by email', { method: 'GET', path: `/api/v1/users/${encodeURIComponent(target)}` });
      expectStatus(user, 'get user by email', answer, sameRealm ? 200 : 400, target);
      return;
    }
    case 3: {
      const answer = await send(port, undefined, 'server settings', { method: 'GET', path: '/api/v1/server_settings', host: user.host });
      if (answer?.status !== 200 && !unavailable(answer)) violation(`${user.label} server settings → ${answer?.status}`);
      return;
    }
    case 4: {
      const answer = await send(port, user, 'poll unknown queue', {
        method: 'GET',
        path: `/api/v1/events?queue_id=${randomUUID()}&last_event_id=-1&dont_block=true`,
      });
      expectStatus(user, 'poll unknown queue', answer, 400, '');
      return;
    }
    default: {
      const answer = await send(port, undefined, 'bad credentials', {
        method: 'GET',
        path: '/api/v1/users',
        host: user.host,
        authorization: `Basic ${Buffer.from(`${user.email}:${'x'.repeat(32)}`).toString('base64')}`,
      });
      if (answer?.status !== 401 && !unavailable(answer)) violation(`${user.label} bad credentials → ${answer?.status}`);
    }
  }
}
