// --- The run's settings (from the environment), its limits and its log. ---

export const SOAK_SECONDS = positiveInteger('SOAK_SECONDS', 30);
export const CHAOS = process.env.SOAK_CHAOS === '1';
/** application_name of the server's pooled and pipelined connections (the chaos loop's targets). */
export const SERVER_APPLICATION_NAME = 'soak-server';
export const USER_COUNT = positiveInteger('SOAK_USERS', 6);
export const EXTERNAL_HOST = 'soak.test';
/** Hard limits besides the clock: requests per virtual client, and the whole run. */
export const MAX_REQUESTS_PER_CLIENT = 200_000;
export const WATCHDOG_MS = (SOAK_SECONDS + 240) * 1000;
export const REQUEST_TIMEOUT_MS = 30_000;

export function positiveInteger(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  return value;
}

export const log = (line: string) => console.log(`[soak] ${line}`);
