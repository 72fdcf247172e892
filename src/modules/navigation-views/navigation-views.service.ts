import type { Transaction } from 'kysely';
import type { Database } from '../../db/database.js';
import type { DB } from '../../db/types.js';
import type { Caller } from '../../http/auth.js';
import { ApiError, badRequest } from '../../http/errors.js';
import { isStorableText } from '../../lib/text.js';
import { type ApiEvent, appendEvents, inUserEventTransaction } from '../events/events.repository.js';
import {
  deleteNavigationView,
  findViewsWithFragmentOrName,
  insertNavigationView,
  type NavigationView,
  type NavigationViewChanges,
  updateNavigationView,
} from './navigation-views.repository.js';

/** Fragments of the views every client knows (exact, case-sensitive; spec §2.9). */
export const BUILT_IN_FRAGMENTS: ReadonlySet<string> = new Set([
  'inbox',
  'recent',
  'feed',
  'drafts',
  'narrow/has/reaction/sender/me',
  'narrow/is/mentioned',
  'narrow/is/starred',
  'scheduled',
  'reminders',
]);

const VIEW_EXISTS = 'Navigation view already exists.';
const VIEW_MISSING = 'Navigation view does not exist.';
// PATCH and DELETE of a missing view differ only in the code (spec §4 row 7).
const updateMissing = (): ApiError => new ApiError(404, VIEW_MISSING, 'NOT_FOUND');
const removeMissing = (): ApiError => new ApiError(404, VIEW_MISSING, 'BAD_REQUEST');
const UNIQUE_VIOLATION = '23505';


export interface NewNavigationView {
  fragment: string;
  is_pinned: boolean;
  name: string | undefined;
}

/** POST /navigation_views: checks of spec §3.9 in order, then the row and its event. */
export async function addNavigationView(db: Database, caller: Caller, input: NewNavigationView): Promise<void> {
  const builtIn = BUILT_IN_FRAGMENTS.has(input.fragment);
  if (builtIn && input.name !== undefined) throw badRequest('Built-in views cannot have a custom name');
  if (!builtIn && input.name === undefined) throw badRequest('Custom views must have a valid name.');
  const view: NavigationView = { fragment: input.fragment, is_pinned: input.is_pinned, name: input.name ?? null };
  await inUserTransaction(db, caller, async (trx) => {
    // Under the caller's lock no other write to their views can slip in between check and insert.
    const clashes = await findViewsWithFragmentOrName(trx, caller.realmId, caller.id, view.fragment, input.name);
    if (clashes.length > 0) throw badRequest(VIEW_EXISTS);
    await insertNavigationView(trx, caller.realmId, caller.id, view);
    return [{ type: 'navigation_view', op: 'add', navigation_view: view }];
  });
}

/** PATCH /navigation_views/{fragment}: checks of spec §3.10 in order, then the change and its event. */
export async function changeNavigationView(
  db: Database,
  caller: Caller,
  fragment: string,
  changes: NavigationViewChanges,
): Promise<void> {
  if (BUILT_IN_FRAGMENTS.has(fragment) && changes.name !== undefined) {
    throw badRequest('Built-in views cannot have a custom name');
  }
  // Event data: name then is_pinned, only the supplied ones.
  const data: NavigationViewChanges = {
    ...(changes.name !== undefined && { name: changes.name }),
    ...(changes.is_pinned !== undefined && { is_pinned: changes.is_pinned }),
  };
  await inUserTransaction(db, caller, async (trx) => {
    const lookup = isStorableText(fragment) ? fragment : null;
    const matches = await findViewsWithFragmentOrName(trx, caller.realmId, caller.id, lookup, changes.name);
    // A clash with the view's own current name counts too (spec §3.10 check 2).
    if (changes.name !== undefined && matches.some((view) => view.name === changes.name)) throw badRequest(VIEW_EXISTS);
    if (!matches.some((view) => view.fragment === fragment)) throw updateMissing();
    if (Object.keys(data).length > 0) await updateNavigationView(trx, caller.realmId, caller.id, fragment, data);
    return [{ type: 'navigation_view', op: 'update', fragment, data }];
  });
}

/** DELETE /navigation_views/{fragment} (spec §3.11). */
export async function removeNavigationView(db: Database, caller: Caller, fragment: string): Promise<void> {
  if (!isStorableText(fragment)) throw removeMissing();
  await inUserTransaction(db, caller, async (trx) => {
    const deleted = await deleteNavigationView(trx, caller.realmId, caller.id, fragment);
    if (!deleted) throw removeMissing();
    return [{ type: 'navigation_view', op: 'remove', fragment }];
  });
}

/**
 * Runs a write and stores the events it returns in one transaction under the caller's event lock.
 * Errors thrown inside roll everything back, so a refused request leaves no row and no event.
 */
async function inUserTransaction(
  db: Database,
  caller: Caller,
  write: (trx: Transaction<DB>) => Promise<ApiEvent[]>,
): Promise<void> {
  try {
    await inUserEventTransaction(db, caller.id, async (trx) => {
      const events = await write(trx);
      await appendEvents(trx, caller.realmId, caller.id, events);
    });
  } catch (error) {
    // Backstop for a writer that bypassed the lock: the table's unique constraints still hold.
    if (isNavigationViewUniqueViolation(error)) throw badRequest(VIEW_EXISTS);
    throw error;
  }
}

function isNavigationViewUniqueViolation(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const { code, table } = error as { code?: unknown; table?: unknown };
  return code === UNIQUE_VIOLATION && table === 'navigation_views';
}
