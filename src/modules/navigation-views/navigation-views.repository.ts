import { type QueryCreator, sql } from 'kysely';
import type { Database } from '../../db/database.js';
import { reusableStatement } from '../../db/reusable-statement.js';
import { EVENT_APPEND_ARGUMENTS, type EventAppendArgs, withEventAppend } from '../event-log/event-log.repository.js';
import type { DB } from '../../db/types.js';

/** A navigation view in its API shape and key order (docs/api.md §2.9). */
export interface NavigationView {
  fragment: string;
  is_pinned: boolean;
  name: string | null;
}

/** The user's views in creation order, in the API shape (also served by register). */
export function selectNavigationViews(db: Database, realmId: number, userId: number) {
  return db
    .selectFrom('navigation_views')
    .select(['fragment', 'is_pinned', 'name'])
    .where('realm_id', '=', realmId)
    .where('user_id', '=', userId)
    .orderBy('id');
}

/** How the view statements refuse (refuse_write's reason, migration 0006). */
export const VIEW_EXISTS = 'view exists';
export const VIEW_MISSING = 'view missing';

interface ViewWriteArgs extends EventAppendArgs {
  /** null: a fragment PostgreSQL text cannot hold (NUL), which names no view. */
  fragment: string | null;
  isPinned: boolean | null;
  name: string | null;
}

const VIEW_ARGUMENTS = [...EVENT_APPEND_ARGUMENTS, 'fragment', 'isPinned', 'name'] as const;

/** The user's views that have the fragment or the name (typed parameters: either may be null). */
const matchingViews = (db: QueryCreator<DB>, args: ViewWriteArgs) =>
  db
    .selectFrom('navigation_views as v')
    .where('v.user_id', '=', args.userId)
    .where('v.realm_id', '=', args.realmId)
    .where((eb) => eb.or([eb('v.fragment', '=', sql<string>`${args.fragment}::text`), eb('v.name', '=', sql<string>`${args.name}::text`)]));

/** POST /navigation_views (docs/api.md §3.9 checks 3–4): inserts the view, or refuses VIEW_EXISTS on a taken fragment or name. */
export const addViewStatement = reusableStatement<ViewWriteArgs, { refused: boolean | null }>(VIEW_ARGUMENTS, (db, args) =>
  withEventAppend(db, args)
    .with('clash', () => matchingViews(db, args).select('v.id').limit(sql.lit(1)))
    .with('inserted', (db) =>
      db
        .insertInto('navigation_views')
        .columns(['realm_id', 'user_id', 'fragment', 'is_pinned', 'name'])
        .expression(
          db
            .selectNoFrom([
              sql<number>`${args.realmId}::integer`.as('realm_id'),
              sql<number>`${args.userId}::integer`.as('user_id'),
              sql<string>`${args.fragment}::text`.as('fragment'),
              sql<boolean>`${args.isPinned}::boolean`.as('is_pinned'),
              sql<string | null>`${args.name}::text`.as('name'),
            ])
            .where((eb) => eb.not(eb.exists(eb.selectFrom('clash').select('id')))),
        )
        .returning('id'),
    )
    .selectNoFrom((eb) => [
      eb
        .selectFrom('clash')
        .select(sql<boolean>`refuse_write(${sql.lit(VIEW_EXISTS)}, '')`.as('refused'))
        .as('refused'),
    ]),
);

/**
 * PATCH /navigation_views/{fragment} (docs/api.md §3.10 checks 2–3, in order): refuses VIEW_EXISTS when
 * any view (this one included) has the new name, then VIEW_MISSING; otherwise changes the given fields.
 */
export const updateViewStatement = reusableStatement<ViewWriteArgs, { refused: boolean | null }>(VIEW_ARGUMENTS, (db, args) =>
  withEventAppend(db, args)
    .with('mine', () =>
      matchingViews(db, args).select((eb) => [
        'v.id',
        eb('v.fragment', '=', sql<string>`${args.fragment}::text`).as('is_target'),
        eb('v.name', '=', sql<string>`${args.name}::text`).as('has_name'),
      ]),
    )
    .with('updated', (db) =>
      db
        .updateTable('navigation_views as v')
        .set({
          name: sql<string>`COALESCE(${args.name}::text, v.name)`,
          is_pinned: sql<boolean>`COALESCE(${args.isPinned}::boolean, v.is_pinned)`,
        })
        .where('v.id', 'in', (eb) => eb.selectFrom('mine').select('id').where('is_target', '=', sql.lit(true)))
        .where(sql<boolean>`(${args.name}::text IS NOT NULL OR ${args.isPinned}::boolean IS NOT NULL)`)
        .where((eb) => eb.not(eb.exists(eb.selectFrom('mine').select('id').where('has_name', '=', sql.lit(true)))))
        .returning('v.id'),
    )
    .selectNoFrom((eb) => [
      eb
        .case()
        .when(eb.exists(eb.selectFrom('mine').select('id').where('has_name', '=', sql.lit(true))))
        .then(sql<boolean>`refuse_write(${sql.lit(VIEW_EXISTS)}, '')`)
        .when(eb.not(eb.exists(eb.selectFrom('mine').select('id').where('is_target', '=', sql.lit(true)))))
        .then(sql<boolean>`refuse_write(${sql.lit(VIEW_MISSING)}, '')`)
        .end()
        .as('refused'),
    ]),
);

/** DELETE /navigation_views/{fragment} (docs/api.md §3.11): deletes the user's view, or refuses VIEW_MISSING. */
export const removeViewStatement = reusableStatement<ViewWriteArgs, { refused: boolean | null }>(
  [...EVENT_APPEND_ARGUMENTS, 'fragment'],
  (db, args) =>
    withEventAppend(db, args)
      .with('deleted', (db) =>
        db
          .deleteFrom('navigation_views')
          .where('user_id', '=', args.userId)
          .where('realm_id', '=', args.realmId)
          .where('fragment', '=', args.fragment)
          .returning('id'),
      )
      .selectNoFrom((eb) => [
        eb
          .case()
          .when(eb.not(eb.exists(eb.selectFrom('deleted').select('id'))))
          .then(sql<boolean>`refuse_write(${sql.lit(VIEW_MISSING)}, '')`)
          .end()
          .as('refused'),
      ]),
);
