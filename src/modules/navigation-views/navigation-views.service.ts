import { writeRefusal } from '../../db/errors.js';
import type { Caller } from '../../http/auth.js';
import type { Departure } from '../../lib/departure.js';
import { ApiError, badRequest } from '../../http/errors.js';
import { isStorableText } from '../../lib/text.js';
import type { ApiEvent, EventWrites } from '../event-log/event-log.repository.js';
import {
  addViewStatement,
  type NavigationView,
  removeViewStatement,
  updateViewStatement,
  VIEW_EXISTS,
  VIEW_MISSING,
} from './navigation-views.repository.js';

/** Fragments of the views every client knows (exact, case-sensitive; docs/api.md §2.9). */
const BUILT_IN_FRAGMENTS: ReadonlySet<string> = new Set([
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

const EXISTS_MESSAGE = 'Navigation view already exists.';
const MISSING_MESSAGE = 'Navigation view does not exist.';

export interface NewNavigationView {
  fragment: string;
  is_pinned: boolean;
  name: string | undefined;
}

/**
 * Runs a view statement, which also appends its event, in one round trip; its refusals roll back.
 * `missing` is a missing view's error (docs/api.md §4 row 7: PATCH and DELETE differ only in the code).
 */
async function writeView(
  writes: EventWrites,
  caller: Caller,
  statement: typeof addViewStatement,
  args: { fragment: string | null; isPinned?: boolean; name?: string },
  event: ApiEvent,
  missing: () => ApiError,
  departure: Departure | undefined,
): Promise<void> {
  const values = {
    userId: caller.id,
    realmId: caller.realmId,
    events: JSON.stringify([event]),
    fragment: args.fragment,
    isPinned: args.isPinned ?? null,
    name: args.name ?? null,
    maxPendingEvents: writes.maxPendingEvents,
  };
  try {
    await writes.transactions.run(caller.id, [statement.with(values)], departure);
  } catch (error) {
    const refusal = writeRefusal(error)?.reason;
    if (refusal === VIEW_EXISTS) throw badRequest(EXISTS_MESSAGE);
    if (refusal === VIEW_MISSING) throw missing();
    // Backstop for a writer that bypassed the lock: the table's unique constraints still hold.
    const { code, table } = (error ?? {}) as { code?: unknown; table?: unknown };
    if (code === '23505' && table === 'navigation_views') throw badRequest(EXISTS_MESSAGE);
    throw error;
  }
}

/** POST /navigation_views: checks of docs/api.md §3.9 in order, then the row and its event. */
export async function addNavigationView(
  writes: EventWrites,
  caller: Caller,
  input: NewNavigationView,
  departure?: Departure,
): Promise<void> {
  const builtIn = BUILT_IN_FRAGMENTS.has(input.fragment);
  if (builtIn && input.name !== undefined) throw badRequest('Built-in views cannot have a custom name');
  if (!builtIn && input.name === undefined) throw badRequest('Custom views must have a valid name.');
  const view: NavigationView = { fragment: input.fragment, is_pinned: input.is_pinned, name: input.name ?? null };
  const event = { type: 'navigation_view', op: 'add', navigation_view: view };
  const args = { fragment: view.fragment, isPinned: view.is_pinned, ...(input.name !== undefined && { name: input.name }) };
  await writeView(writes, caller, addViewStatement, args, event, () => badRequest(EXISTS_MESSAGE), departure);
}

/** PATCH /navigation_views/{fragment}: checks of docs/api.md §3.10 in order, then the change and its event. */
export async function changeNavigationView(
  writes: EventWrites,
  caller: Caller,
  fragment: string,
  changes: { name?: string; is_pinned?: boolean },
  departure?: Departure,
): Promise<void> {
  if (BUILT_IN_FRAGMENTS.has(fragment) && changes.name !== undefined) {
    throw badRequest('Built-in views cannot have a custom name');
  }
  const args = {
    fragment: isStorableText(fragment) ? fragment : null,
    ...(changes.is_pinned !== undefined && { isPinned: changes.is_pinned }),
    ...(changes.name !== undefined && { name: changes.name }),
  };
  // Event data: name then is_pinned, only the supplied ones (as the route builds `changes`).
  const event = { type: 'navigation_view', op: 'update', fragment, data: changes };
  await writeView(writes, caller, updateViewStatement, args, event, () => new ApiError(404, MISSING_MESSAGE, 'NOT_FOUND'), departure);
}

/** DELETE /navigation_views/{fragment} (docs/api.md §3.11). */
export async function removeNavigationView(writes: EventWrites, caller: Caller, fragment: string, departure?: Departure): Promise<void> {
  const missing = () => new ApiError(404, MISSING_MESSAGE, 'BAD_REQUEST');
  if (!isStorableText(fragment)) throw missing();
  const event = { type: 'navigation_view', op: 'remove', fragment };
  await writeView(writes, caller, removeViewStatement, { fragment }, event, missing, departure);
}
