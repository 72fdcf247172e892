import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { compiledStatements, reusableStatement, statementName } from '../src/db/reusable-statement.js';
import { AuthLookupQuery } from '../src/http/auth.repository.js';
import { registeredStatements, unregisteredStatements } from '../scripts/lib/sql-registry.js';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { errorBody } from './helpers/envelope.js';
import { forgetStatement } from './helpers/statements.js';

// Every named statement is in scripts/lib/sql-registry.ts, whose sql/ files reviewers read and
// CI checks against the code (npm run sql:check); the setup file test/helpers/statements.ts fails
// any test file that makes the server compile a statement the registry lacks.

const registeredText = (file: string) => registeredStatements.find((entry) => entry.file === file)!.statement().text;

describe('the registry', () => {
  it('has one file and one name per statement, the name a hash of the text, and its file under sql/ says so', () => {
    const compiled = registeredStatements.map((entry) => ({ file: entry.file, ...entry.statement() }));
    expect(compiled.length).toBeGreaterThanOrEqual(24);
    expect(new Set(compiled.map((entry) => entry.file)).size).toBe(compiled.length);
    expect(new Set(compiled.map((entry) => entry.name)).size).toBe(compiled.length);
    for (const { file, name, text } of compiled) {
      expect(file).toMatch(/^[a-z-]+\/[a-z.-]+\.sql$/);
      expect(name).toBe(statementName(text));
      expect(compiledStatements.get(name)).toBe(text);
      expect(readFileSync(`sql/${file}`, 'utf8')).toContain(`-- Prepared as ${name},`);
    }
  });

  it('reports a statement compiled at run time that it does not list, and only that one', () => {
    // The statements of an earlier file's own (the worker keeps its modules) are not this test's.
    const earlier = new Set(unregisteredStatements(new Set()).map(([name]) => name));
    const unlisted = reusableStatement<{ userId: number }, { timezone: string }>(['userId'], (db, args) =>
      db.selectFrom('users').select('timezone').where('id', '=', args.userId),
    );
    const { name, text } = unlisted.statement();
    expect(unregisteredStatements(earlier)).toEqual([[name, text]]);
    expect(unregisteredStatements(new Set([...earlier, name]))).toEqual([]);
    forgetStatement(name);
    expect(unregisteredStatements(earlier)).toEqual([]);
  });
});

describe('lookup keys', () => {
  it('are the names of the compiled statements: two lookups share one only when they build the same SQL', () => {
    const timezone = new AuthLookupQuery<object>('a', (account) => account.select('caller.timezone'));
    const sameSql = new AuthLookupQuery<object>('b', (account) => account.select('caller.timezone'));
    const other = new AuthLookupQuery<object>('a', (account) => account.select('caller.full_name'));
    expect(timezone.key).toBe(timezone.statement(false).name);
    expect(sameSql.key).toBe(timezone.key);
    // The same name by hand, another query: another key.
    expect(other.key).not.toBe(timezone.key);
    for (const query of [timezone, other]) forgetStatement(query.key);
  });
});

/** Each route's authentication statement, as the app runs it: the registered text, per lookup. */
describe.each([
  { rateLimited: false, suffix: '' },
  { rateLimited: true, suffix: '.rate-limited' },
])('the authentication statements the app runs, rate limiting $rateLimited', ({ rateLimited, suffix }) => {
  const requests = [
    { file: 'caller', request: { url: '/api/v1/users/me/subscriptions' }, status: 200 },
    { file: 'user-by-id', request: { url: '/api/v1/users/14' }, status: 200 },
    { file: 'user-by-id-with-profile-data', request: { url: '/api/v1/users/14?include_custom_profile_fields=true' }, status: 200 },
    { file: 'caller-notification-defaults', request: { method: 'POST' as const, url: '/api/v1/register' }, status: 200 },
    {
      file: 'caller-can-create-users',
      request: {
        method: 'POST' as const,
        url: '/api/v1/users',
        form: { email: 'new@example.com', password: 'long enough', full_name: 'New' },
      },
      status: 400,
    },
  ];

  it('are the registered ones, one per lookup', async () => {
    const ctx: TestContext = await createTestContext({ env: { RATE_LIMITING: String(rateLimited), RATE_LIMIT_MAX_REQUESTS: '100000' } });
    try {
      for (const { file, request, status } of requests) {
        ctx.database.statements.length = 0;
        const res = await api(ctx.app, { as: 'O', ...request });
        expect(res.statusCode, res.body).toBe(status);
        if (status === 400) expect(res.body).toBe(errorBody('User not authorized to create users'));
        const batches = ctx.database.statements.filter((text) => text.includes('jsonb_to_recordset'));
        expect(batches).toEqual([registeredText(`auth/${file}${suffix}.sql`)]);
      }
    } finally {
      await ctx.close();
    }
  });
});
