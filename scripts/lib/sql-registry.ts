import { compiledStatements, type Statement } from '../../src/db/reusable-statement.js';
import { type AuthLookupQuery, NO_LOOKUP } from '../../src/http/auth.repository.js';
import { notificationDefaultsQuery } from '../../src/modules/events/register.service.js';
import {
  addViewStatement,
  removeViewStatement,
  updateViewStatement,
} from '../../src/modules/navigation-views/navigation-views.repository.js';
import { MEMBERSHIP_READ, writeMembershipStatement } from '../../src/modules/subscriptions/membership.repository.js';
import { writeSettingsStatement } from '../../src/modules/subscriptions/subscriptions.repository.js';
import { canCreateUsersQuery } from '../../src/modules/user-management/users-admin.routes.js';
import { userByIdLookupQueries, userByIdStatements } from '../../src/modules/users/users.repository.js';
import { CREATE_USER, DEACTIVATE_USER, REACTIVATE_USER, UPDATE_USER } from '../../src/modules/user-management/users.writes.js';

/**
 * Every named (prepared) statement the server runs, each with the file of sql/ that shows its SQL
 * to reviewers (`npm run sql` writes them, `npm run sql:check` in CI fails when they differ from
 * what the code compiles). Compiled without a database: Kysely's compiler only. The tests fail when
 * a statement the code compiles at run time is missing here (test/helpers/registered-statements.ts).
 */
export interface RegisteredStatement {
  /** Its file, under sql/. */
  file: string;
  /** Where it is built. */
  source: string;
  /** Its text and name, compiled on first call. */
  statement: () => Required<Statement>;
}

/** The authentication statement with each lookup, with the rate-limit decision and without (src/http/auth.repository.ts). */
const AUTH_LOOKUPS: readonly [AuthLookupQuery<object>, string][] = [
  [NO_LOOKUP, 'src/http/auth.repository.ts'],
  [canCreateUsersQuery, 'src/modules/user-management/users-admin.routes.ts'],
  [notificationDefaultsQuery, 'src/modules/events/register.service.ts'],
  [userByIdLookupQueries.plain, 'src/modules/users/users.repository.ts'],
  [userByIdLookupQueries.withProfileData, 'src/modules/users/users.repository.ts'],
];

const constant = (statement: Required<Statement>) => () => statement;

export const registeredStatements: readonly RegisteredStatement[] = [
  ...AUTH_LOOKUPS.flatMap(([query, source]) =>
    [false, true].map((rateLimited) => ({
      file: `auth/${query.name}${rateLimited ? '.rate-limited' : ''}.sql`,
      source: query === NO_LOOKUP ? source : `src/http/auth.repository.ts with the lookup of ${source}`,
      statement: () => query.statement(rateLimited),
    })),
  ),
  ...(
    [
      ['user-by-id', userByIdStatements.plain],
      ['user-by-id.profile-data', userByIdStatements.withProfileData],
      ['user-by-id.restricted', userByIdStatements.restricted],
      ['user-by-id.restricted.profile-data', userByIdStatements.restrictedWithProfileData],
    ] as const
  ).map(([name, statement]) => ({
    file: `users/${name}.sql`,
    source: 'src/modules/users/users.repository.ts',
    statement: statement.statement,
  })),
  ...(
    [
      ['create', CREATE_USER],
      ['deactivate', DEACTIVATE_USER],
      ['reactivate', REACTIVATE_USER],
      ['update', UPDATE_USER],
    ] as const
  ).map(([name, statement]) => ({
    file: `users/${name}.sql`,
    source: 'src/modules/user-management/users.writes.ts',
    statement: constant(statement),
  })),
  ...(
    [
      ['add', addViewStatement],
      ['update', updateViewStatement],
      ['remove', removeViewStatement],
    ] as const
  ).map(([name, statement]) => ({
    file: `navigation-views/${name}.sql`,
    source: 'src/modules/navigation-views/navigation-views.repository.ts',
    statement: statement.statement,
  })),
  {
    file: 'subscriptions/write-settings.sql',
    source: 'src/modules/subscriptions/subscriptions.repository.ts',
    statement: writeSettingsStatement.statement,
  },
  {
    file: 'subscriptions/membership-read.sql',
    source: 'src/modules/subscriptions/membership.repository.ts',
    statement: constant(MEMBERSHIP_READ),
  },
  {
    file: 'subscriptions/membership-write.sql',
    source: 'src/modules/subscriptions/membership.repository.ts',
    statement: writeMembershipStatement.statement,
  },
];

/**
 * The statements this process compiled that the registry does not hold (name and text), except
 * those named in `ignored` (statements a test builds for itself).
 */
export function unregisteredStatements(ignored: ReadonlySet<string>): [string, string][] {
  const registered = new Set(registeredStatements.map((entry) => entry.statement().name));
  return [...compiledStatements].filter(([name]) => !registered.has(name) && !ignored.has(name));
}
