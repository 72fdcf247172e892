/**
 * `npm run soak`: drives every endpoint concurrently for a bounded time against a real server
 * process on an embedded PostgreSQL (127.0.0.1 only), then checks the database against the
 * requests the server accepted:
 *
 * - no 5xx, and every answer is the one the client's own model predicts (each simulated user's
 *   requests are issued in order by one virtual client, and nobody else touches that user's data);
 * - per user and channel, the last accepted value of every setting is the stored one;
 * - every accepted navigation-view add/update/remove is reflected, in creation order;
 * - the audit log has exactly one row per (channel, setting) of each accepted request, in order, old → new;
 * - each user's queues hold exactly the events of that user's accepted requests, complete, in
 *   order, with consecutive ids: an untouched queue (read from the database at the end), a queue
 *   long-polled throughout (heartbeats aside), and a queue registered for navigation_view only.
 *
 * With SOAK_CHAOS=1 the database misbehaves under the load: every ~0.6 s the server's connections
 * are terminated (pg_terminate_backend), and once PostgreSQL is stopped and started again. Then a
 * 503 is an acceptable answer anywhere, and so is a 504 for a write whose connection was lost
 * during its commit (a 504 may or may not have been applied: the client finds out from the
 * database, through the user's never-polled queue, before it goes on; a 503 must not have been),
 * any other 5xx or a lost connection is still a violation, the server must still be running at the
 * end, `/ready` must recover, and the database must still match the accepted requests exactly.
 *
 * Environment: SOAK_SECONDS (30), SOAK_USERS (6, plus one user of a second organization),
 * SOAK_CHAOS (unset). Prints a short report; exits 1 on any violation. Every loop is bounded by count and time, and
 * every process started here is stopped on the way out (Ctrl-C included).
 */
import { onCleanup, runCleanups } from '../lib/processes.js';
import { startScratchDatabase } from '../lib/scratch-database.js';
import { runChaos, waitUntilReady } from './chaos.js';
import { registerQueues, runClient, runPoller } from './clients.js';
import { CHAOS, log, SOAK_SECONDS, USER_COUNT, WATCHDOG_MS } from './config.js';
import { operationCounts, state, statusCounts, violation, violations } from './outcomes.js';
import { seed } from './seed.js';
import { startSoakServer } from './server.js';
import { verify } from './verify.js';

// --- Main. ---

async function main(): Promise<number> {
  const started = Date.now();
  log(
    `${SOAK_SECONDS} s, ${USER_COUNT} users (+1 in a second organization)${CHAOS ? ', chaos: backends terminated, PostgreSQL restarted' : ''}`,
  );
  // Kept on disk (the work directory goes at the end) so that the chaos run can restart it.
  const scratch = await startScratchDatabase({
    prefix: 'zulip-soak-',
    persistent: true,
    applicationName: 'soak-state.checker',
    handle: { poolMax: 4, onConnectionError: () => undefined },
    onCleanup,
  });
  const { handle } = scratch;
  state.checker = handle.db;
  const { users, realmUserIds } = await seed(handle);
  const server = await startSoakServer(scratch.url);
  onCleanup(() => server.stop());
  log(`PostgreSQL and the server (port ${server.port}) are up after ${((Date.now() - started) / 1000).toFixed(1)} s`);

  for (const user of users) await registerQueues(server.port, user);
  let stopPolling = false;
  const pollers = users.map((user) => runPoller(server.port, user, () => stopPolling));
  const loadStart = Date.now();
  const loadEnd = loadStart + SOAK_SECONDS * 1000;
  const chaos = CHAOS ? runChaos(scratch.postgres, scratch.restart, loadEnd - 2000) : undefined;
  await Promise.all(users.map((user) => runClient(server.port, user, realmUserIds, loadEnd)));
  const loadSeconds = (Date.now() - loadStart) / 1000;
  if (chaos) {
    const report = await chaos;
    log(
      `chaos: ${report.terminations} rounds terminated ${report.backendsTerminated} backends; ${report.restarts} restart(s) of PostgreSQL`,
    );
    if (report.restarts !== 1 || report.backendsTerminated === 0)
      violation('the chaos did not happen as planned (run longer: SOAK_SECONDS)');
    if (!(await waitUntilReady(server.port))) violation('/ready did not answer 200 within 30 s after the chaos');
  }
  const requestsDone = state.requestCount;
  stopPolling = true;
  await Promise.all(pollers);
  if (!server.alive()) violation(`the server died:\n${server.output()}`);

  const eventsChecked = await verify(handle.db, users);
  const accepted = users.reduce((sum, user) => sum + user.audit.length, 0);
  const viewCount = users.reduce((sum, user) => sum + user.views.length, 0);
  const rate = (requestsDone / loadSeconds).toFixed(0);
  log(`${requestsDone} requests in ${loadSeconds.toFixed(1)} s (${rate}/s) by ${users.length} clients + ${users.length} long-pollers`);
  log(`statuses ${JSON.stringify(Object.fromEntries([...statusCounts].sort()))}`);
  log(`operations ${JSON.stringify(Object.fromEntries([...operationCounts].sort()))}`);
  log(`checked: ${accepted} accepted setting changes (audit rows), ${viewCount} surviving views, ${eventsChecked} queued/polled events`);
  if (violations.length > 0) {
    log(`FAILED: ${violations.length} violation(s)${violations.length > 20 ? ' (first 20 shown above)' : ''}`);
    return 1;
  }
  log(`OK: no 5xx${CHAOS ? ' but 503 and 504' : ''}, every answer as predicted, database and queues match the accepted requests`);
  return 0;
}

const watchdog = setTimeout(() => {
  log(`watchdog: still running after ${WATCHDOG_MS / 1000} s, stopping`);
  void runCleanups(log).finally(() => process.exit(1));
}, WATCHDOG_MS);
watchdog.unref();

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    state.interrupted = true;
    log(`${signal}: stopping`);
    void runCleanups(log).finally(() => process.exit(130));
  });
}

void main()
  .catch((error: unknown) => {
    if (!state.interrupted) log(`error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return 1;
  })
  .then(async (code) => {
    await runCleanups(log);
    process.exit(code);
  });
