import { freePort } from '../../src/lib/free-port.js';
import { type RunningProcess, startServer } from '../lib/processes.js';
import { EXTERNAL_HOST, SERVER_APPLICATION_NAME } from './config.js';

// --- The server (everything started is stopped by runCleanups, in reverse order). ---

export async function startSoakServer(databaseUrl: string): Promise<RunningProcess> {
  return startServer({
    name: 'the server',
    args: ['--import', 'tsx', 'src/server.ts'],
    env: {
      DATABASE_URL: databaseUrl,
      HOST: '127.0.0.1',
      EXTERNAL_HOST,
      AVATAR_SALT: 'soak',
      // The production path (every request also records its rate-limit decision), with a rule
      // no client reaches.
      RATE_LIMITING: 'true',
      RATE_LIMIT_MAX_REQUESTS: '1000000',
      LOG_LEVEL: 'warn',
      PGAPPNAME: SERVER_APPLICATION_NAME,
      // The untouched queue is never polled and must keep every event of the run.
      QUEUE_MAX_PENDING_EVENTS: '1000000000',
      // Long polls answer with a heartbeat within 3 s, so the pollers stop promptly at the end.
      HEARTBEAT_SECONDS: '2',
      HEARTBEAT_JITTER_SECONDS: '1',
      EVENT_QUEUE_LONGPOLL_TIMEOUT_SECONDS: '10',
    },
    port: await freePort(),
    readyPath: '/ready',
    readyTimeoutMs: 90_000,
  });
}
