import type { BaseLogger } from 'pino';

/**
 * Where the errors of connections no statement was waiting on go (createDatabase's
 * onConnectionError): to stderr until the app and its logger exist (while the migrations run and
 * the app is built), to the logger after. Never a throw: such an error must not end the process.
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
