import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createDatabase, type Database } from '../src/db/database.js';
import { reusableQuery } from '../src/lib/reusable-query.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { ids, seedFixture } from './helpers/fixture.js';

describe('reusableQuery', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase();
    await seedFixture(database.db);
  });
  afterAll(async () => {
    await database.drop();
  });

  it('builds once, then runs the same SQL with each call’s values in the markers’ places', async () => {
    let builds = 0;
    const activeUserInRealm = reusableQuery([-1, -2], (db: Database, realmId: number, userId: number) => {
      builds++;
      return db
        .selectFrom('users')
        .select(['id', 'full_name'])
        .where('realm_id', '=', realmId)
        .where('is_active', '=', true) // a constant parameter stays as it is
        .where('id', '=', userId);
    });
    const expected = database.db
      .selectFrom('users')
      .select(['id', 'full_name'])
      .where('realm_id', '=', ids.R)
      .where('is_active', '=', true)
      .where('id', '=', ids.U)
      .compile().sql;

    database.statements.length = 0;
    expect(await activeUserInRealm(database.db, ids.R, ids.U)).toEqual([{ id: ids.U, full_name: 'U Member' }]);
    expect(await activeUserInRealm(database.db, ids.R, ids.V)).toEqual([{ id: ids.V, full_name: 'V Member' }]);
    expect(await activeUserInRealm(database.db, ids.R2, ids.U)).toEqual([]); // U is not in the other realm
    expect(await activeUserInRealm(database.db, ids.R, ids.D)).toEqual([]); // D is deactivated
    expect(await activeUserInRealm(database.db, ids.R2, ids.X)).toEqual([{ id: ids.X, full_name: 'X Other' }]);
    expect(builds).toBe(1);
    expect(database.statements).toEqual(Array(5).fill(expected));
  });

  it('accepts a marker the query does not use', async () => {
    const byId = reusableQuery([-1, -2], (db: Database, userId: number, _unused: number) =>
      db.selectFrom('users').select('email_address_visibility').where('id', '=', userId));
    expect(await byId(database.db, ids.V, 7)).toEqual([{ email_address_visibility: 1 }]);
  });

  it('inside a transaction runs in that transaction, and its writes are not seen outside it', async () => {
    const fullName = reusableQuery([-1], (db: Database, userId: number) =>
      db.selectFrom('users').select('full_name').where('id', '=', userId));
    const rolledBack = new Error('roll back');
    const outcome = database.db.transaction().execute(async (trx) => {
      await trx.updateTable('users').set({ full_name: 'Renamed' }).where('id', '=', ids.U).execute();
      expect(await fullName(trx, ids.U)).toEqual([{ full_name: 'Renamed' }]); // its own uncommitted write
      expect(await fullName(database.db, ids.U)).toEqual([{ full_name: 'U Member' }]); // not seen elsewhere
      throw rolledBack;
    });
    await expect(outcome).rejects.toBe(rolledBack);
    expect(await fullName(database.db, ids.U)).toEqual([{ full_name: 'U Member' }]);
  });

  it('a failing statement rejects with the database error, and is counted', async () => {
    const divide = reusableQuery([-1], (db: Database, divisor: number) =>
      db.selectFrom('users').select(sql<number>`1 / ${divisor}`.as('quotient')).where('id', '=', ids.U));
    database.statements.length = 0;
    await expect(divide(database.db, 0)).rejects.toMatchObject({ code: '22012' }); // division_by_zero
    expect(database.statements).toHaveLength(1);
    expect(await divide(database.db, 1)).toEqual([{ quotient: 1 }]);
  });

  it('runs as a named prepared statement, on the read connection and in transactions; other queries stay unnamed', async () => {
    const oneConnection = createDatabase(database.url, { poolMax: 1, readConnections: 1 });
    try {
      const fullName = reusableQuery([-1], (db: Database, userId: number) =>
        db.selectFrom('users').select('full_name').where('id', '=', userId));
      const fullNameSql = database.db.selectFrom('users').select('full_name').where('id', '=', 1).compile().sql;
      // What the session that runs it has prepared (on the root instance: the read connection).
      const preparedInSession = reusableQuery([-1], (db: Database, userId: number) =>
        db.selectFrom('users').select(sql<string[]>`(SELECT array_agg(statement) FROM pg_prepared_statements)`.as('prepared')).where('id', '=', userId));
      const preparedOnPool = async () =>
        (await sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`.execute(oneConnection.db)).rows.map((row) => row.statement);

      expect(await fullName(oneConnection.db, ids.O)).toEqual([{ full_name: 'O Owner' }]);
      const adHoc = oneConnection.db.selectFrom('realms').select('subdomain').where('id', '=', ids.R);
      await adHoc.execute(); // through the pool
      const [{ prepared } = { prepared: [] }] = await preparedInSession(oneConnection.db, ids.O);
      expect(prepared).toContain(fullNameSql);
      expect(prepared).not.toContain(adHoc.compile().sql);
      expect(await preparedOnPool()).toEqual([]); // the pool's connection ran nothing by name

      // In a transaction the statement runs on the transaction's connection, prepared there too.
      expect(await oneConnection.db.transaction().execute((trx) => fullName(trx, ids.A))).toEqual([{ full_name: 'A Admin' }]);
      expect(await preparedOnPool()).toEqual([fullNameSql]);
      // Executions after the first reuse the statement on each connection.
      expect(await fullName(oneConnection.db, ids.A)).toEqual([{ full_name: 'A Admin' }]);
      expect(await oneConnection.db.transaction().execute((trx) => fullName(trx, ids.O))).toEqual([{ full_name: 'O Owner' }]);
    } finally {
      await oneConnection.close();
    }
  });
});
