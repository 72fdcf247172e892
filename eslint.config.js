// Type-aware linting: typescript-eslint's recommended rules that use the type checker, over the
// files tsc checks. Formatting is Prettier's job (.prettierrc.json), not ESLint's.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

// The fences of src/ (the README's Layout): the driver only under src/db/, Fastify only in
// the app, src/http/, src/metrics/ and the route files; the rest reaches them through those (a
// type re-exported from src/db/, a route schema type from src/http/openapi.ts).
const PG = {
  paths: [{ name: 'pg', message: 'pg only under src/db/: use or re-export what is needed from there.' }],
  patterns: [{ group: ['pg/*', 'pg-*'], message: 'The driver only under src/db/.' }],
};
const FASTIFY = {
  paths: [{ name: 'fastify', message: 'Fastify only in src/app.ts, src/http/, src/metrics/ and *.routes.ts files.' }],
  patterns: [{ group: ['@fastify/*'], message: 'Fastify only in src/app.ts, src/http/, src/metrics/ and *.routes.ts files.' }],
};
const DB = ['src/db/**'];
const WEB = ['src/app.ts', 'src/http/**', 'src/metrics/**', 'src/**/*.routes.ts'];
// Nothing below the modules (src/db/, src/lib/, src/http/, src/metrics/, config, Zulip's facts) imports one.
const MODULES = {
  paths: [],
  patterns: [{ group: ['**/modules/**'], message: 'src/modules/ stands above src/db/, src/lib/, src/http/ and src/metrics/.' }],
};
const fence = (...kept) => ({
  'no-restricted-imports': ['error', { paths: kept.flatMap((k) => k.paths), patterns: kept.flatMap((k) => k.patterns) }],
});
// The modules' floors, bottom to top (docs/architecture.md): a module imports only from its own
// floor or below, so the event log, which every write uses, never reaches register or polls.
const FLOORS = ['event-log', 'users', 'server-settings', 'subscriptions', 'navigation-views', 'user-management', 'events', 'maintenance'];
const above = (floor) => ({
  paths: [],
  patterns: FLOORS.slice(FLOORS.indexOf(floor) + 1).map((higher) => ({
    group: [`**/modules/${higher}/*`, `../${higher}/*`],
    message: `src/modules/${floor}/ stands below ${higher}/: move what both need down, not the import up.`,
  })),
});
const floorFences = FLOORS.flatMap((floor) => [
  { files: [`src/modules/${floor}/**`], ignores: WEB, rules: fence(PG, FASTIFY, above(floor)) },
  { files: [`src/modules/${floor}/*.routes.ts`], rules: fence(PG, above(floor)) },
]);

export default tseslint.config(
  { ignores: ['dist/', '.tmp/', 'node_modules/', 'coverage/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Fastify plugins and hooks are async by contract (the plugin's promise is its "done"), with
      // or without an await inside.
      '@typescript-eslint/require-await': 'off',
      // A name starting with _ is unused on purpose (a destructured field left out, a parameter a
      // signature needs).
      // A caught value is `unknown` and is passed on as it came.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
    },
  },
  {
    // A response body in a test is JSON.parse's `any`: the tests assert it whole against the exact
    // expected body, which is the check these rules would stand in for.
    files: ['test/**/*.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  { files: ['src/**/*.ts'], ignores: [...DB, ...WEB], rules: fence(PG, FASTIFY) },
  { files: ['src/lib/**', 'src/config.ts', 'src/zulip.ts'], rules: fence(PG, FASTIFY, MODULES) },
  { files: DB, rules: fence(FASTIFY, MODULES) },
  { files: WEB, rules: fence(PG) },
  { files: ['src/http/**', 'src/metrics/**'], rules: fence(PG, MODULES) },
  ...floorFences,
  {
    // A parameter is read through its route's schema (parametersOf, src/http/params.ts), never by hand.
    files: ['src/modules/**'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: "MemberExpression[object.name='request'][property.name=/^(query|params|body)$/]",
          message: 'Read parameters with parametersOf(request, schema) (src/http/params.ts).',
        },
      ],
    },
  },
  { files: ['**/*.js', '**/*.mjs'], ...tseslint.configs.disableTypeChecked },
  { files: ['**/*.mjs'], languageOptions: { globals: { process: 'readonly', console: 'readonly' } } },
);
