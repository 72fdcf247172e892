const CONNECTION_ERROR_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH',
]);
// admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300']);
const CONNECTION_MESSAGES = [
  'timeout exceeded when trying to connect',
  'Connection terminated',
  'Client has encountered a connection error',
  'connection error',
  'Cannot use a pool after calling end',
];

/** Whether an error means "the database cannot be reached right now" (answered with 503). */
export function isDatabaseUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (error instanceof AggregateError && error.errors.some(isDatabaseUnavailable)) return true;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string') {
    if (CONNECTION_ERROR_CODES.has(code) || UNAVAILABLE_SQLSTATES.has(code)) return true;
    if (/^08[0-9A-Z]{3}$/.test(code)) return true;
  }
  if (CONNECTION_MESSAGES.some((text) => error.message.includes(text))) return true;
  return error.cause !== undefined && error.cause !== error && isDatabaseUnavailable(error.cause);
}
