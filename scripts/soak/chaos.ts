import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { EmbeddedDatabase } from '../../src/db/embedded.js';
import { LISTENER_APPLICATION_NAME } from '../../src/db/event-listener.js';
import { log, SERVER_APPLICATION_NAME } from './config.js';
import { call } from './http.js';
import { state } from './outcomes.js';
import { randomInt } from './random.js';

// --- Chaos: the server's connections terminated again and again, PostgreSQL restarted once. ---

export interface ChaosReport {
  terminations: number;
  backendsTerminated: number;
  restarts: number;
}

/**
 * Until `until`: every 300–900 ms terminates every backend of the server (its pool, its pipelined
 * reads, its LISTEN connection), and once, a third of the way in, stops PostgreSQL for a second
 * and starts it again on the same port and files. `restart` swaps the running database in.
 */
export async function runChaos(database: () => EmbeddedDatabase, restart: () => Promise<void>, until: number): Promise<ChaosReport> {
  const report: ChaosReport = { terminations: 0, backendsTerminated: 0, restarts: 0 };
  const restartAt = Date.now() + (until - Date.now()) / 3;
  while (Date.now() < until && !state.interrupted) {
    await sleep(300 + randomInt(600));
    if (report.restarts === 0 && Date.now() >= restartAt) {
      log('chaos: restarting PostgreSQL');
      await restart();
      report.restarts++;
      continue;
    }
    const client = new pg.Client({ connectionString: database().url });
    client.on('error', () => undefined);
    try {
      await client.connect();
      const { rows } = await client.query<{ terminated: number }>(
        `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int AS terminated FROM pg_stat_activity
         WHERE pid <> pg_backend_pid() AND application_name IN ($1, $2)`,
        [SERVER_APPLICATION_NAME, LISTENER_APPLICATION_NAME],
      );
      report.terminations++;
      report.backendsTerminated += rows[0]!.terminated;
    } catch {
      // PostgreSQL is on its way back up: try again next round.
    } finally {
      await client.end().catch(() => undefined);
    }
  }
  return report;
}

/** After the chaos: the server answers /ready again within 30 s. */
export async function waitUntilReady(port: number): Promise<boolean> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const ready = await call({ method: 'GET', path: '/ready', port, timeoutMs: 2000 }).catch(() => undefined);
    if (ready?.status === 200) return true;
    await sleep(250);
  }
  return false;
}
