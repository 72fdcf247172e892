import type { Database } from '../../db/database.js';
import type { Caller } from '../../http/auth.js';
import { type ApiError, badRequest } from '../../http/errors.js';
import { type ApiEvent, appendEvents, inUserEventTransaction } from '../events/events.repository.js';
import {
  type AuditEntry,
  type ChannelSubscriptionState,
  findChannelSubscriptionStates,
  insertSubscriptionAuditRows,
  isIdInRange,
  listActiveSubscriptionRows,
  type SettingValues,
  updateSubscriptionSettings,
} from './subscriptions.repository.js';
import { changeEvents, serializeSubscription, type SubscriptionObject } from './subscriptions.serializers.js';
import type { SettingChange, SettingColumn } from './subscriptions.validation.js';

type SettingsCaller = Pick<Caller, 'id' | 'realmId' | 'role'>;

const GUEST_ROLE = 600;

/** Checks f–g (spec §2.7) for one change; throws its error. */
function checkChannel(change: SettingChange, state: ChannelSubscriptionState | undefined, isGuest: boolean): void {
  const accessible = state !== undefined && (state.isWebPublic || state.subscribed || (!isGuest && !state.inviteOnly));
  if (!accessible) throw badRequest('Invalid channel ID');
  if (!state.subscribed) throw badRequest(`Not subscribed to channel ID ${change.streamId}`);
}

interface WritePlan {
  /** Final values per subscription (entries applied in order, last one wins). */
  updates: Map<number, SettingValues>;
  audit: AuditEntry[];
  events: ApiEvent[];
}

/**
 * Replays the changes in order over the current settings: each audit row's old value is the value
 * left by the previous change (or the stored one), and only the final values are written.
 */
function planWrites(changes: SettingChange[], states: Map<number, ChannelSubscriptionState>): WritePlan {
  const current = new Map<number, Record<string, string | boolean | null>>();
  const updates = new Map<number, SettingValues>();
  const audit: AuditEntry[] = [];
  const events: ApiEvent[] = [];
  for (const change of changes) {
    let settings = current.get(change.streamId);
    if (!settings) {
      // Checked subscribed, so the settings exist.
      settings = { ...states.get(change.streamId)!.settings! };
      current.set(change.streamId, settings);
    }
    audit.push({ streamId: change.streamId, property: change.column, oldValue: settings[change.column] ?? null, newValue: change.stored });
    settings[change.column] = change.stored;
    let values = updates.get(change.streamId);
    if (!values) updates.set(change.streamId, (values = {}));
    (values as Record<SettingColumn, string | boolean>)[change.column] = change.stored;
    for (const event of changeEvents(change)) events.push(event);
  }
  return { updates, audit, events };
}

/**
 * Applies subscription setting changes all-or-nothing (spec §3.2): the channel checks of every
 * change run inside the transaction that holds the caller's event lock, the lowest-index failure
 * wins (`shapeError` belongs to the entry right after `changes`), and on success the settings,
 * the audit rows and the events are written with one statement each.
 */
export async function applySubscriptionChanges(
  db: Database,
  caller: SettingsCaller,
  changes: SettingChange[],
  shapeError?: ApiError,
): Promise<void> {
  if (changes.length === 0) {
    if (shapeError) throw shapeError;
    return;
  }
  await inUserEventTransaction(db, caller.id, async (trx) => {
    // Ids beyond PostgreSQL's integer range cannot name a channel: they never reach the query.
    const streamIds = [...new Set(changes.map((change) => change.streamId))].filter(isIdInRange);
    const states = await findChannelSubscriptionStates(trx, caller, streamIds);
    const isGuest = caller.role === GUEST_ROLE;
    for (const change of changes) checkChannel(change, states.get(change.streamId), isGuest);
    if (shapeError) throw shapeError;

    const plan = planWrites(changes, states);
    await updateSubscriptionSettings(trx, caller, plan.updates);
    await insertSubscriptionAuditRows(trx, caller, plan.audit);
    await appendEvents(trx, caller.realmId, caller.id, plan.events);
  });
}

/**
 * The user's subscription objects (spec §2.12), sorted by channel name; shared by
 * GET /users/me/subscriptions and register.
 */
export async function listSubscriptions(
  db: Database,
  user: Pick<Caller, 'id' | 'realmId'>,
  options: { includeSubscribers: boolean },
): Promise<SubscriptionObject[]> {
  const rows = await listActiveSubscriptionRows(db, user, options.includeSubscribers);
  return rows.map(serializeSubscription);
}
