import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // After each file: every statement the server compiled is in src/sql-registry.ts.
    setupFiles: ['test/helpers/statements.ts'],
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // The CLI and real-port tests spawn processes; keep the 2-core machines responsive.
    maxWorkers: 2,
  },
});
