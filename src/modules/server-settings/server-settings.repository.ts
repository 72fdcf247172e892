import type { Database } from '../../db/database.js';

export function findActiveRealmBySubdomain(db: Database, subdomain: string) {
  return db
    .selectFrom('realms')
    .select(['id', 'subdomain', 'name', 'rendered_description'])
    .where('subdomain', '=', subdomain)
    .where('deactivated', '=', false)
    .executeTakeFirst();
}
