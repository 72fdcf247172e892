import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Database } from '../src/db/database.js';
import { reusableStatement } from '../src/db/reusable-statement.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { ids, seedFixture } from './helpers/fixture.js';

describe('reusableStatement', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase();
    await seedFixture(database.db);
  });
  afterAll(async () => {
    await database.drop();
  });

  it('builds once, then runs the same SQL with each call’s values in the arguments’ places; constants stay', async () => {
    let builds = 0;
    const usersInRealm = reusableStatement(2, (db: Database, realmId: number, isStub: boolean) => {
      builds++;
      return db
        .selectFrom('users')
        .select(['id'])
        .where('realm_id', '=', realmId)
        .where('is_active', '=', true) // a constant parameter stays as it is, whatever the arguments
        .where('is_imported_stub', '=', isStub)
        .orderBy('id');
    });
    const expected = database.db
      .selectFrom('users')
      .select(['id'])
      .where('realm_id', '=', ids.R)
      .where('is_active', '=', true)
      .where('is_imported_stub', '=', false)
      .orderBy('id')
      .compile().sql;

    database.statements.length = 0;
    // D (deactivated) is never listed: the constant `true` was not taken for the `false` argument.
    expect(await usersInRealm(database.reads, ids.R, false)).toEqual([ids.O, ids.A, ids.M, ids.U, ids.V, ids.G, ids.B, ids.H].map((id) => ({ id })));
    expect(await usersInRealm(database.reads, ids.R2, false)).toEqual([{ id: ids.X }]);
    expect(await usersInRealm(database.reads, ids.R, true)).toEqual([]);
    expect(builds).toBe(1);
    expect(database.statements).toEqual(Array(3).fill(expected));
  });

  it('refuses, at its first run, a query that does not bind an argument exactly once as it was given', async () => {
    const unused = reusableStatement(2, (db: Database, userId: number, _unused: number) =>
      db.selectFrom('users').select('id').where('id', '=', userId));
    const twice = reusableStatement(1, (db: Database, userId: number) =>
      db.selectFrom('users').select('id').where('id', '=', userId).where('bot_owner_id', '=', userId));
    const transformed = reusableStatement(1, (db: Database, email: string) =>
      db.selectFrom('users').select('id').where('delivery_email', '=', String(email).toLowerCase()));
    database.statements.length = 0;
    await expect(unused(database.reads, ids.U, 0)).rejects.toThrow('argument 1 is bound 0 times (must be exactly once)');
    await expect(twice(database.reads, ids.U)).rejects.toThrow('argument 0 is bound 2 times (must be exactly once)');
    await expect(transformed(database.reads, 'u@example.com')).rejects.toThrow('argument 0 is bound 0 times (must be exactly once)');
    expect(database.statements).toEqual([]); // nothing reached the database
  });

  it('a failing statement rejects with the database error, and is counted', async () => {
    const divide = reusableStatement(1, (db: Database, divisor: number) =>
      db.selectFrom('users').select(sql<number>`1 / ${divisor}`.as('quotient')).where('id', '=', ids.U));
    database.statements.length = 0;
    await expect(divide(database.reads, 0)).rejects.toMatchObject({ code: '22012' }); // division_by_zero
    expect(database.statements).toHaveLength(1);
    expect(await divide(database.reads, 1)).toEqual([{ quotient: 1 }]);
  });

  it('runs as a named prepared statement on the connection that runs it; queries through the pool stay unnamed', async () => {
    const fullName = reusableStatement(1, (db: Database, userId: number) => db.selectFrom('users').select('full_name').where('id', '=', userId));
    const fullNameSql = database.db.selectFrom('users').select('full_name').where('id', '=', 1).compile().sql;
    const preparedHere = reusableStatement(1, (db: Database, userId: number) =>
      db.selectFrom('users').select(sql<string[]>`(SELECT array_agg(statement) FROM pg_prepared_statements)`.as('prepared')).where('id', '=', userId));

    expect(await fullName(database.reads, ids.O)).toEqual([{ full_name: 'O Owner' }]);
    const adHoc = database.db.selectFrom('realms').select('subdomain').where('id', '=', ids.R);
    await adHoc.execute(); // through the pool
    // Both read connections may have served: ask until the one that prepared it answers.
    const seen = new Set<string>();
    for (let attempt = 0; attempt < 20; attempt++) {
      const [row] = await preparedHere(database.reads, ids.O);
      for (const statement of row?.prepared ?? []) seen.add(statement);
    }
    expect(seen).toContain(fullNameSql);
    expect(seen).not.toContain(adHoc.compile().sql);
    const onPool = await sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`.execute(database.db);
    expect(onPool.rows).toEqual([]);
  });
});
