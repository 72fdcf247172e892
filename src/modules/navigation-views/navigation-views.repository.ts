import type { Kysely, Transaction } from 'kysely';
import type { DB } from '../../db/types.js';

type Executor = Kysely<DB> | Transaction<DB>;

/** A navigation view in its API shape and key order (spec §2.9). */
export interface NavigationView {
  fragment: string;
  is_pinned: boolean;
  name: string | null;
}

/** Fields a PATCH may change; absent keys stay as they are. */
export interface NavigationViewChanges {
  name?: string;
  is_pinned?: boolean;
}

/** The user's views in creation order, in the API shape (also served by register). */
export function listNavigationViews(db: Executor, realmId: number, userId: number): Promise<NavigationView[]> {
  return db
    .selectFrom('navigation_views')
    .select(['fragment', 'is_pinned', 'name'])
    .where('realm_id', '=', realmId)
    .where('user_id', '=', userId)
    .orderBy('id')
    .execute();
}

/**
 * The user's views that have this fragment or (when given) this name: everything the add and
 * update checks need, in one query. A null fragment matches no view.
 */
export async function findViewsWithFragmentOrName(
  db: Executor,
  realmId: number,
  userId: number,
  fragment: string | null,
  name: string | undefined,
): Promise<Pick<NavigationView, 'fragment' | 'name'>[]> {
  if (fragment === null && name === undefined) return [];
  return db
    .selectFrom('navigation_views')
    .select(['fragment', 'name'])
    .where('realm_id', '=', realmId)
    .where('user_id', '=', userId)
    .where((eb) => eb.or([
      ...(fragment === null ? [] : [eb('fragment', '=', fragment)]),
      ...(name === undefined ? [] : [eb('name', '=', name)]),
    ]))
    .execute();
}

export async function insertNavigationView(db: Executor, realmId: number, userId: number, view: NavigationView): Promise<void> {
  await db
    .insertInto('navigation_views')
    .values({ realm_id: realmId, user_id: userId, fragment: view.fragment, is_pinned: view.is_pinned, name: view.name })
    .execute();
}

export async function updateNavigationView(
  db: Executor,
  realmId: number,
  userId: number,
  fragment: string,
  changes: NavigationViewChanges,
): Promise<void> {
  await db
    .updateTable('navigation_views')
    .set(changes)
    .where('realm_id', '=', realmId)
    .where('user_id', '=', userId)
    .where('fragment', '=', fragment)
    .execute();
}

/** Deletes the user's view with this fragment; false when there was none. */
export async function deleteNavigationView(db: Executor, realmId: number, userId: number, fragment: string): Promise<boolean> {
  const result = await db
    .deleteFrom('navigation_views')
    .where('realm_id', '=', realmId)
    .where('user_id', '=', userId)
    .where('fragment', '=', fragment)
    .executeTakeFirst();
  return result.numDeletedRows > 0n;
}
