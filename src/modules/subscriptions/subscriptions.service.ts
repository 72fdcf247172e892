import type { Database } from '../../db/database.js';
import { writeRefusal } from '../../db/errors.js';
import type { Caller } from '../../http/auth.js';
import type { Departure } from '../../lib/departure.js';
import { type ApiError, badRequest } from '../../http/errors.js';
import { isIdInRange, ROLES } from '../../zulip.js';
import type { ApiEvent, EventWrites } from '../event-log/event-log.repository.js';
import type { SettingColumn, SettingValues } from './settings.js';
import { INVALID_CHANNEL, NOT_SUBSCRIBED, selectActiveSubscriptions, writeSettingsStatement } from './subscriptions.repository.js';
import { changeEvents, serializeSubscription, type SubscriptionObject } from './subscriptions.serializers.js';
import type { SettingChange } from './subscriptions.validation.js';

type SettingsCaller = Pick<Caller, 'id' | 'realmId' | 'role'>;

/** Larger updates run on a connection of their own (see TransactionSize): a few milliseconds at most on a shared one. */
const SMALL_UPDATE_CHANGES = 100;

// Ids beyond PostgreSQL's integer range cannot name a channel: 0 names none either.
const storableStreamId = (id: number) => (isIdInRange(id) ? id : 0);

/** The changes as the statement takes them, the final values per subscription (the last change wins) and the events, in order. */
function planWrites(changes: SettingChange[]) {
  const updates = new Map<number, SettingValues>();
  const entries: [number, SettingColumn, string | boolean][] = [];
  const events: ApiEvent[] = [];
  for (const change of changes) {
    let values = updates.get(change.streamId);
    if (!values) updates.set(change.streamId, (values = {}));
    const set = values as Record<SettingColumn, string | boolean>;
    entries.push([storableStreamId(change.streamId), change.column, change.stored]);
    set[change.column] = change.stored;
    for (const event of changeEvents(change)) events.push(event);
  }
  const finalValues = [...updates]
    .filter(([streamId]) => isIdInRange(streamId))
    .map(([streamId, values]) => ({ stream_id: streamId, ...values }));
  return { entries, finalValues, events };
}

/** The API error of a refused settings statement (its detail: "<1-based index>:<stream id>"). */
function channelError(error: unknown, changes: SettingChange[]): ApiError | undefined {
  const refusal = writeRefusal(error);
  if (!refusal) return undefined;
  const change = changes[Number(refusal.detail.split(':')[0]) - 1]!;
  if (refusal.reason === INVALID_CHANNEL) return badRequest('Invalid channel ID');
  if (refusal.reason === NOT_SUBSCRIBED) return badRequest(`Not subscribed to channel ID ${change.streamId}`);
  return undefined;
}

/**
 * Applies subscription setting changes all-or-nothing (docs/api.md §3.2) in the caller's transaction,
 * one round trip: the channel checks f–g of every change, the settings, the audit rows and the
 * events, in one statement. The lowest-index failure wins: a channel failure of a change
 * before `shapeError`'s entry (which belongs to the entry right after `changes`), else the shape
 * error, for which the channels are only checked and nothing is written.
 */
export async function applySubscriptionChanges(
  writes: EventWrites,
  caller: SettingsCaller,
  changes: SettingChange[],
  shapeError?: ApiError,
  departure?: Departure,
): Promise<void> {
  if (changes.length === 0) {
    if (shapeError) throw shapeError;
    return;
  }
  const { entries, finalValues, events } = planWrites(changes);
  const args = {
    userId: caller.id,
    realmId: caller.realmId,
    isGuest: caller.role === ROLES.guest,
    entries: JSON.stringify(entries),
    updates: JSON.stringify(finalValues),
    // One array literal in one text parameter: node-postgres would escape each element of a JS array.
    streamIds: `{${[...new Set(changes.map((change) => storableStreamId(change.streamId)))].join(',')}}`,
    write: shapeError === undefined,
    events: JSON.stringify(shapeError === undefined ? events : []),
    maxPendingEvents: writes.maxPendingEvents,
  };
  try {
    await writes.transactions.run(
      caller.id,
      [writeSettingsStatement.with(args)],
      departure,
      changes.length > SMALL_UPDATE_CHANGES ? 'large' : 'small',
    );
  } catch (error) {
    throw channelError(error, changes) ?? error;
  }
  if (shapeError) throw shapeError;
}

/**
 * The user's subscription objects (docs/api.md §2.12), sorted by channel name; shared by
 * GET /users/me/subscriptions and register.
 */
export async function listSubscriptions(
  db: Database,
  user: Pick<Caller, 'id' | 'realmId'>,
  options: { includeSubscribers: boolean },
): Promise<SubscriptionObject[]> {
  const rows = await selectActiveSubscriptions(db, user, options.includeSubscribers).execute();
  return rows.map(serializeSubscription);
}
