import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // After each file: every statement the server compiled is in src/sql-registry.ts.
    setupFiles: ['test/helpers/statements.ts'],
    pool: 'forks',
    // Room for a loaded machine: a timeout only ends a test that is stuck, and tests wait for
    // conditions rather than time them (a waiting long poll's heartbeat comes after 45 s).
    testTimeout: 120_000,
    hookTimeout: 300_000,
    // Two files at a time: the spawned processes and PostgreSQL share the 2-core machines.
    maxWorkers: 2,
  },
});
