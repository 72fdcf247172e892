import { randomUUID } from 'node:crypto';
import type { Config } from '../../config.js';
import { bindStatement, queryStatement } from '../../db/reusable-statement.js';
import { REALM_MEMBERSHIP_LOCK_NAMESPACE, REALM_MEMBERSHIP_LOCK_SHARED, type Transactions } from '../../db/transactions.js';
import { type AuthLookup, AuthLookupQuery, type Caller } from '../../http/auth.js';
import type { Values } from '../../http/params.js';
import type { Departure } from '../../lib/departure.js';
import { largeReads } from '../../lib/keyed-queue.js';
import { forEachInSlices, JsonTextList } from '../../lib/slices.js';
import { isStorableText } from '../../lib/text.js';
import { type NavigationView, selectNavigationViews } from '../navigation-views/navigation-views.repository.js';
import { selectActiveSubscriptions } from '../subscriptions/subscriptions.repository.js';
import { serializeSubscription, type SubscriptionObject } from '../subscriptions/subscriptions.serializers.js';
import { canAccessUser, isRestrictedViewer } from '../users/users.access.js';
import { canBuildUsersInSql, selectRealmUsersJson, userJsonTexts } from '../users/users.json.js';
import { realmUserRecord, selectRealmUsers } from '../users/users.repository.js';
import { type ApiUser, buildInaccessibleUserPlaceholder, buildUserObject, type UserObjectOptions } from '../users/users.serializers.js';
import { createEventQueue } from './event-queues.repository.js';
import type { registerSchema } from './events.schemas.js';

/** POST /api/v1/register (docs/api.md §3.12): a new queue and the initial state, consistent with each other. */

/** The parameters, and the caller's own defaults for clients without notification_settings_null. */
type RegisterRequest = Values<typeof registerSchema> & { notificationDefaults: NotificationDefaults | undefined };

export interface InitialState {
  realm_users?: ApiUser[] | JsonTextList;
  realm_non_active_users?: ApiUser[] | JsonTextList;
  subscriptions?: SubscriptionObject[];
  navigation_views?: NavigationView[];
}

/** The user-level stream notification settings a subscription's null stands for, read with the authentication row. */
type NotificationDefaults = Record<'audible_default' | 'desktop_default' | 'email_default' | 'push_default', boolean>;

export const notificationDefaultsQuery = new AuthLookupQuery<NotificationDefaults>('caller-notification-defaults', (account) =>
  account.select([
    'caller.enable_stream_audible_notifications as audible_default',
    'caller.enable_stream_desktop_notifications as desktop_default',
    'caller.enable_stream_email_notifications as email_default',
    'caller.enable_stream_push_notifications as push_default',
  ]),
);
export const notificationDefaultsLookup: AuthLookup<NotificationDefaults> = { query: notificationDefaultsQuery, argument: 0 };

type RegisterConfig = Pick<Config, 'queueDefaultLifespanSeconds' | 'queueMaxLifespanSeconds' | 'queueMaxPerUser'> &
  Parameters<typeof buildUserObject>[3];

/** What idle_queue_timeout="mobile" means: Zulip's documented 12 hours. */
const MOBILE_IDLE_QUEUE_TIMEOUT_SECONDS = 12 * 60 * 60;

/**
 * The queue's idle lifetime: idle_queue_timeout when given, else queue_lifespan_secs (≤ 0 means
 * the default), else the default; anything longer than the maximum is capped, as Zulip's
 * "after applying defaults and server-side limits" says.
 */
function queueLifespanSeconds(request: RegisterRequest, config: RegisterConfig): number {
  const { idle_queue_timeout: idleQueueTimeout, queue_lifespan_secs: queueLifespanSecs } = request;
  const lifespan =
    idleQueueTimeout === 'mobile'
      ? MOBILE_IDLE_QUEUE_TIMEOUT_SECONDS
      : (idleQueueTimeout ?? (queueLifespanSecs <= 0 ? config.queueDefaultLifespanSeconds : queueLifespanSecs));
  return Math.min(lifespan, config.queueMaxLifespanSeconds);
}

/**
 * Creates the queue and reads the wanted state in the caller's transaction, sent together (one
 * round trip): a concurrent change commits either before (its result is in the state, and it had
 * no queue for its event) or after (the queue gets its event). The caller's lock keeps out the
 * caller's own writes; the organization's membership lock, taken shared first, every user-management
 * or subscription change of the organization (REALM_MEMBERSHIP_LOCK_NAMESPACE).
 */
export async function registerEventQueue(
  transactions: Transactions,
  config: RegisterConfig,
  caller: Caller,
  request: RegisterRequest,
  departure?: Departure,
): Promise<{ queueId: string; lifespanSeconds: number; state: InitialState }> {
  const queueId = randomUUID();
  // notificationDefaultsLookup's row: register always runs it.
  const defaults = request.notificationDefaults;
  if (!defaults) throw new Error('register ran without its notification defaults lookup');
  // A section is wanted when fetch_event_types names it, else when event_types does, else always.
  const sections = request.fetch_event_types ?? request.event_types;
  const wanted = (name: string) => sections === undefined || sections.includes(name);
  const queue = {
    id: queueId,
    realmId: caller.realmId,
    userId: caller.id,
    // No event type contains NUL, which PostgreSQL text cannot hold: dropping such names keeps
    // exactly the types the queue can ever accept.
    eventTypes: request.event_types?.filter(isStorableText) ?? null,
    lifespanSeconds: queueLifespanSeconds(request, config),
    userListIncomplete: request.client_capabilities.user_list_incomplete === true,
  };
  const userOptions = { clientGravatar: request.client_gravatar, includeCustomProfileFields: true, omitIsActive: true };
  // Every user is accessible to this caller: their JSON built by PostgreSQL (users.json.ts).
  const usersInSql = canBuildUsersInSql(caller, config);
  const state: InitialState = {};
  const readState = async () => {
    const [, , users, userTexts, subscriptions, views] = await transactions.run(
      caller.id,
      [
        bindStatement(REALM_MEMBERSHIP_LOCK_SHARED, [REALM_MEMBERSHIP_LOCK_NAMESPACE, caller.realmId]),
        queryStatement((db) => createEventQueue(db, queue, config.queueMaxPerUser)),
        wanted('realm_user') && !usersInSql
          ? queryStatement((db) =>
              selectRealmUsers(db, caller.realmId, {
                withProfileData: true,
                ...(isRestrictedViewer(caller) && { sharedChannelsWithUserId: caller.id }),
              }),
            )
          : undefined,
        wanted('realm_user') && usersInSql
          ? queryStatement((db) => selectRealmUsersJson(db, caller, userOptions, config, { split: true }))
          : undefined,
        wanted('subscription') ? queryStatement((db) => selectActiveSubscriptions(db, caller, request.include_subscribers)) : undefined,
        wanted('navigation_views') ? queryStatement((db) => selectNavigationViews(db, caller.realmId, caller.id)) : undefined,
      ],
      departure,
      // Large: it reads the whole organization's users.
      'large',
      // The organization's queue in this process, shared, before its lock (RealmQueue).
      { realmId: caller.realmId, mode: 'shared' },
    );
    // The objects are built once the transaction is over: building a large organization's users
    // takes many turns of the event loop, which must not hold the connection and the user's lock.
    if (users) Object.assign(state, await realmUserSections(users, config, caller, userOptions, queue.userListIncomplete));
    if (userTexts) {
      const { active = [], nonActive = [] } = await userJsonTexts(userTexts, caller, userOptions, config, (row) =>
        row.active ? 'active' : 'nonActive',
      );
      Object.assign(state, { realm_users: new JsonTextList(active), realm_non_active_users: new JsonTextList(nonActive) });
    }
    return { subscriptions, views };
  };
  // A whole organization's users: in the large reads' queue, keyed by the caller (src/lib/keyed-queue.ts).
  const read = await (wanted('realm_user') ? largeReads.run(caller.id, readState) : readState());
  if (read.subscriptions) {
    const objects = read.subscriptions.map(serializeSubscription);
    state.subscriptions = request.client_capabilities.notification_settings_null
      ? objects
      : objects.map((sub) => withUserDefaults(sub, defaults));
  }
  if (read.views) state.navigation_views = read.views;
  return { queueId, lifespanSeconds: queue.lifespanSeconds, state };
}

/**
 * Clients without notification_settings_null get the user's defaults in place of null
 * (wildcard_mentions_notify has no user-level default here and stays null).
 */
function withUserDefaults(sub: SubscriptionObject, defaults: NotificationDefaults): SubscriptionObject {
  return {
    ...sub,
    audible_notifications: sub.audible_notifications ?? defaults.audible_default,
    desktop_notifications: sub.desktop_notifications ?? defaults.desktop_default,
    email_notifications: sub.email_notifications ?? defaults.email_default,
    push_notifications: sub.push_notifications ?? defaults.push_default,
  };
}

/**
 * realm_users (active, plus placeholders unless user_list_incomplete) and realm_non_active_users,
 * built in slices: a whole large organization's objects would hold the event loop (src/lib/slices.ts).
 */
async function realmUserSections(
  rows: Parameters<typeof realmUserRecord>[0][],
  config: RegisterConfig,
  caller: Caller,
  options: UserObjectOptions,
  userListIncomplete: boolean,
): Promise<Pick<InitialState, 'realm_users' | 'realm_non_active_users'>> {
  const active: ApiUser[] = [];
  const nonActive: ApiUser[] = [];
  await forEachInSlices(rows, (row) => {
    const user = realmUserRecord(row);
    if (canAccessUser(caller, user)) {
      (user.isActive ? active : nonActive).push(buildUserObject(caller, user, options, config));
    } else if (!userListIncomplete) {
      active.push(buildInaccessibleUserPlaceholder(caller, user.id, config, options));
    }
  });
  return { realm_users: active, realm_non_active_users: nonActive };
}
