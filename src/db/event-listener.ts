import type { BaseLogger } from 'pino';
import pg from 'pg';

/** Name of the listening session in pg_stat_activity (tests and operators can find it). */
export const LISTENER_APPLICATION_NAME = 'zulip-events-listener';

const FIRST_RETRY_MS = 250;
const MAX_RETRY_MS = 5000;

export interface EventListenerOptions {
  connectionString: string | undefined;
  connectTimeoutMs: number;
  log: Pick<BaseLogger, 'warn'>;
  /** The channel listened on. */
  channel: string;
  /** A notification on the channel, with its payload (when it has one). */
  onNotified(payload: string): void;
  /** Notifications may have been missed (the connection was lost, or it just came back). */
  onGap(): void;
  /** The connection was opened again after it had been lost (the metrics' reconnects). */
  onReconnected?: () => void;
}

/**
 * One connection per app instance that LISTENs on a channel (the events', docs/api.md §2.10
 * Wake-up), reconnecting with backoff. Losing it and getting it back both call onGap (every waiting
 * poll checked in one statement): a lost connection delays answers, never loses events.
 */
export class EventListener {
  private client: pg.Client | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryMs = FIRST_RETRY_MS;
  private closed = false;
  /** Set once the connection was lost: the next successful connection is a reconnection. */
  private lostOnce = false;

  constructor(private readonly options: EventListenerOptions) {}

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  /** Connects once; on failure keeps retrying in the background (startup must not depend on it). */
  async start(): Promise<void> {
    const { connectionString, log } = this.options;
    if (this.closed) return;
    if (connectionString === undefined) {
      log.warn('no database URL for the events listener: long polls rely on periodic re-checks');
      return;
    }
    const client = new pg.Client({
      connectionString,
      connectionTimeoutMillis: this.options.connectTimeoutMs,
      application_name: LISTENER_APPLICATION_NAME,
      keepAlive: true,
    });
    const { channel } = this.options;
    client.on('notification', (message) => {
      if (message.channel === channel && message.payload) this.options.onNotified(message.payload);
    });
    client.on('error', (error) => this.lost(client, error));
    client.on('end', () => this.lost(client));
    try {
      await client.connect();
      await client.query(`LISTEN ${channel}`);
    } catch (error) {
      client.removeAllListeners('end');
      await client.end().catch(() => undefined);
      if (!this.closed) log.warn({ err: error }, 'events listener could not connect; retrying');
      this.scheduleRetry();
      return;
    }
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    this.retryMs = FIRST_RETRY_MS;
    if (this.lostOnce) this.options.onReconnected?.();
    // Whatever committed while we were not listening is only found by re-checking.
    this.options.onGap();
  }

  private lost(client: pg.Client, error?: Error): void {
    if (this.client !== client) return;
    this.client = undefined;
    client.end().catch(() => undefined);
    if (this.closed) return;
    this.lostOnce = true;
    this.options.log.warn({ err: error }, 'events listener connection lost; reconnecting');
    this.options.onGap();
    this.scheduleRetry();
  }

  private scheduleRetry(): void {
    if (this.closed) return;
    const delay = this.retryMs;
    this.retryMs = Math.min(this.retryMs * 2, MAX_RETRY_MS);
    this.retryTimer = setTimeout(() => void this.start(), delay);
    this.retryTimer.unref();
  }
}
