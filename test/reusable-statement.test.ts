import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reusableStatement, statementName } from '../src/db/reusable-statement.js';
import { createFixtureDatabase, type TestDatabase } from './helpers/database.js';
import { ids } from './helpers/fixture.js';
import { testStatement } from './helpers/statements.js';

describe('reusableStatement', () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createFixtureDatabase();
  });
  afterAll(async () => {
    await database.drop();
  });

  it('builds once, then runs the same SQL with each call’s values in the arguments’ places; constants stay', async () => {
    let builds = 0;
    const usersInRealm = testStatement<{ realmId: number; isStub: boolean }, { id: number }>(['realmId', 'isStub'], (db, args) => {
      builds++;
      return db
        .selectFrom('users')
        .select(['id'])
        .where('realm_id', '=', args.realmId)
        .where('is_active', '=', true) // a constant parameter stays as it is, whatever the arguments
        .where('is_imported_stub', '=', args.isStub)
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
    expect(await usersInRealm(database.shortStatements, { realmId: ids.R, isStub: false })).toEqual(
      [ids.O, ids.A, ids.M, ids.U, ids.V, ids.G, ids.B, ids.H].map((id) => ({ id })),
    );
    expect(await usersInRealm(database.shortStatements, { realmId: ids.R2, isStub: false })).toEqual([{ id: ids.X }]);
    expect(await usersInRealm(database.shortStatements, { realmId: ids.R, isStub: true })).toEqual([]);
    expect(builds).toBe(1);
    expect(database.statements).toEqual(Array(3).fill(expected));
  });

  it('refuses, at its first run, a query that does not bind each declared argument as it was given, or binds an undeclared one', async () => {
    const unused = reusableStatement<{ userId: number; other: number }, { id: number }>(['userId', 'other'], (db, args) =>
      db.selectFrom('users').select('id').where('id', '=', args.userId),
    );
    const transformed = reusableStatement<{ email: string }, { id: number }>(['email'], (db, args) =>
      db.selectFrom('users').select('id').where('delivery_email', '=', String(args.email).toLowerCase()),
    );
    const undeclared = reusableStatement<{ userId: number; realmId: number }, { id: number }>(['userId'], (db, args) =>
      db.selectFrom('users').select('id').where('id', '=', args.userId).where('realm_id', '=', args.realmId),
    );
    database.statements.length = 0;
    await expect(unused(database.shortStatements, { userId: ids.U, other: 0 })).rejects.toThrow('argument other is not bound');
    await expect(transformed(database.shortStatements, { email: 'u@example.com' })).rejects.toThrow('argument email is not bound');
    await expect(undeclared(database.shortStatements, { userId: ids.U, realmId: ids.R })).rejects.toThrow('a parameter is undefined');
    expect(database.statements).toEqual([]); // nothing reached the database
  });

  it('an argument used in several places is one parameter, referenced each time', async () => {
    const sent: { text: string; values: readonly unknown[] }[] = [];
    const recording = {
      run: <R>(statement: { text: string }, values: readonly unknown[]) => {
        sent.push({ text: statement.text, values });
        return database.shortStatements.run<R>(statement, values);
      },
    };
    const ownedBots = testStatement<{ userId: number; active: boolean }, { id: number }>(['userId', 'active'], (db, args) =>
      db
        .selectFrom('users')
        .select('id')
        .where('bot_owner_id', '=', args.userId)
        .where('is_active', '=', args.active)
        .where('id', '<>', args.userId)
        .where('bot_type', '=', 1)
        .orderBy('id'),
    );
    expect(await ownedBots(recording, { userId: ids.U, active: true })).toEqual([{ id: ids.B }]);
    // userId twice as $1, active as $2, the constant 1 as $3: Kysely's four parameters become three.
    expect(sent[0]!.text).toMatch(/"bot_owner_id" = \$1 and "is_active" = \$2 and "id" <> \$1 and "bot_type" = \$3/);
    expect(sent[0]!.values).toEqual([ids.U, true, 1]);
  });

  it('a failing statement rejects with the database error, and is counted', async () => {
    const divide = testStatement<{ divisor: number }, { quotient: number }>(['divisor'], (db, args) =>
      db
        .selectFrom('users')
        .select(sql<number>`1 / ${args.divisor}`.as('quotient'))
        .where('id', '=', ids.U),
    );
    database.statements.length = 0;
    await expect(divide(database.shortStatements, { divisor: 0 })).rejects.toMatchObject({ code: '22012' }); // division_by_zero
    expect(database.statements).toHaveLength(1);
    expect(await divide(database.shortStatements, { divisor: 1 })).toEqual([{ quotient: 1 }]);
  });

  it('runs as a named prepared statement on the connection that runs it; queries through the pool stay unnamed', async () => {
    const fullName = testStatement<{ userId: number }, { full_name: string }>(['userId'], (db, args) =>
      db.selectFrom('users').select('full_name').where('id', '=', args.userId),
    );
    const fullNameSql = database.db.selectFrom('users').select('full_name').where('id', '=', 1).compile().sql;
    const preparedHere = testStatement<{ userId: number }, { prepared: string[]; names: string[] }>(['userId'], (db, args) =>
      db
        .selectFrom('users')
        .select(sql<string[]>`(SELECT array_agg(statement) FROM pg_prepared_statements)`.as('prepared'))
        .select(sql<string[]>`(SELECT array_agg(name) FROM pg_prepared_statements)`.as('names'))
        .where('id', '=', args.userId),
    );
    // The same text built a second time: one name, one preparation per connection.
    const fullNameAgain = testStatement<{ userId: number }, { full_name: string }>(['userId'], (db, args) =>
      db.selectFrom('users').select('full_name').where('id', '=', args.userId),
    );

    expect(await fullName(database.shortStatements, { userId: ids.O })).toEqual([{ full_name: 'O Owner' }]);
    expect(await fullNameAgain(database.shortStatements, { userId: ids.U })).toEqual([{ full_name: 'U Member' }]);
    const adHoc = database.db.selectFrom('realms').select('subdomain').where('id', '=', ids.R);
    await adHoc.execute(); // through the pool
    // Both short-statement connections may have served: ask until the one that prepared it answers.
    const seen = new Set<string>();
    const names = new Set<string>();
    for (let attempt = 0; attempt < 20; attempt++) {
      const [row] = await preparedHere(database.shortStatements, { userId: ids.O });
      for (const statement of row?.prepared ?? []) seen.add(statement);
      for (const name of row?.names ?? []) names.add(name);
    }
    expect(seen).toContain(fullNameSql);
    // Named by a hash of the text: the name does not depend on which statement came first.
    expect(names).toContain(statementName(fullNameSql));
    expect(statementName(fullNameSql)).toMatch(/^s_[0-9a-f]{32}$/);
    expect(seen).not.toContain(adHoc.compile().sql);
    const onPool = await sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`.execute(database.db);
    expect(onPool.rows).toEqual([]);
  });
});
