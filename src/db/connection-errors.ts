import pg from 'pg';
import type { BaseLogger } from 'pino';
import { type Config, ConfigError, redactedUrl } from '../config.js';
import { DatabaseUnavailable } from './errors.js';

/**
 * Where the errors of connections no statement was waiting on go (createDatabase's
 * onConnectionError): to stderr until the app's logger exists, to the logger after. Never a throw.
 */
export class ConnectionErrorReporter {
  private logger: Pick<BaseLogger, 'warn'> | undefined;

  /** From now on, report to this logger. */
  logTo(logger: Pick<BaseLogger, 'warn'>): void {
    this.logger = logger;
  }

  readonly report = (error: Error): void => {
    if (this.logger) this.logger.warn({ err: error }, 'database connection failed');
    else console.warn(`database connection failed: ${error.message}`);
  };
}

/** Network failures in the words of the start-up message. */
const NETWORK_REASONS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'host not found',
  EAI_AGAIN: 'host not found',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ECONNRESET: 'connection reset',
};

/**
 * Why no connection could be made, when `error` (or a cause) is such a failure: the server's words
 * when it refused (a wrong password), else the network's. Undefined for any other error.
 */
function connectionFailureReason(error: unknown, connectTimeoutMs: number): string | undefined {
  let current: unknown = error;
  while (current instanceof Error && !(current instanceof DatabaseUnavailable)) current = current.cause;
  if (!(current instanceof DatabaseUnavailable)) return undefined;
  const cause = current.cause;
  if (cause instanceof pg.DatabaseError) return cause.message;
  const code = (cause as { code?: unknown } | undefined)?.code;
  if (typeof code === 'string' && NETWORK_REASONS[code]) return NETWORK_REASONS[code];
  const message = cause instanceof Error ? cause.message : String(cause);
  // pg's words for connectionTimeoutMillis running out.
  if (/timeout/i.test(message)) return `no answer within ${connectTimeoutMs} ms (DB_CONNECT_TIMEOUT_MS)`;
  return message;
}

/**
 * A failure to reach DATABASE_URL as the start-up line naming it and the cause (a ConfigError);
 * any other error as it is. Not retried: a refused port is for the process manager's restart.
 */
export function namingDatabaseUrl(error: unknown, config: Pick<Config, 'databaseUrl' | 'dbConnectTimeoutMs'>): unknown {
  const reason = config.databaseUrl === undefined ? undefined : connectionFailureReason(error, config.dbConnectTimeoutMs);
  return reason === undefined ? error : new ConfigError(`DATABASE_URL (${redactedUrl(config.databaseUrl!)}): ${reason}`);
}
