import { defineConfig } from 'vitest/config';

/** Every test file's settings. */
const common = {
  // After each file: every statement the server compiled is in src/sql-registry.ts.
  setupFiles: ['test/helpers/statements.ts'],
  pool: 'forks' as const,
  // Room for a loaded machine: a timeout only ends a test that is stuck, and tests wait for
  // conditions rather than time them (a waiting long poll's heartbeat comes after 45 s).
  testTimeout: 120_000,
  hookTimeout: 300_000,
};

/** Files that replace a module (vi.mock) or the clock: each gets its own module graph. */
const ISOLATED = ['test/openapi.test.ts', 'test/isolation.test.ts', 'test/events-steady-state.test.ts'];

export default defineConfig({
  test: {
    // Once for the run (the projects inherit what it provides): the PostgreSQL server and its templates.
    globalSetup: ['test/global-setup.ts'],
    // Four files at a time, also on 2 cores: most of a file's time is spent waiting (on PostgreSQL,
    // timeouts, spawned servers), and four overlap those waits (117 s against 141–160 s with two,
    // bench/RESULTS.md); tests wait for conditions, so a loaded machine is slower, not red.
    maxWorkers: 4,
    projects: [
      // The others share a worker's modules (the app's are imported once per worker, not per
      // file); each file still makes its own apps and databases.
      { test: { ...common, name: 'shared', include: ['test/**/*.test.ts'], exclude: ISOLATED, isolate: false } },
      { test: { ...common, name: 'isolated', include: ISOLATED } },
    ],
  },
});
