import { performance } from 'node:perf_hooks';
import type { BaseLogger } from 'pino';
import type { AppDeps } from '../../deps.js';
import { EventListener } from '../../db/event-listener.js';
import type { Metrics } from '../../metrics/metrics.js';
import { QueueWakeups } from './event-wakeups.js';
import { EVENTS_CHANNEL } from '../event-log/event-log.repository.js';
import type { EventsDeps, PollAnswer } from './events.service.js';
import { HeartbeatBatches, HeartbeatWheel, LeftPollBatches, PollGathering, PollStartBatches } from './poll-batches.js';
import { PollRechecks } from './poll-rechecks.js';

/** Heartbeats due within this long of each other are answered together (HeartbeatBatches). */
const HEARTBEAT_TICK_MS = 250;
/** Blocking polls arriving within this long of each other are authenticated and started together (PollGathering). */
const POLL_GATHER_MS = 50;

type LongPollingOptions = Pick<AppDeps, 'db' | 'transactions' | 'config'> & { log: Pick<BaseLogger, 'warn'>; metrics: Metrics | undefined };

/**
 * An instance's long polls (docs/api.md §3.13): what they wait on and how they are answered: the
 * wake-ups, the batches of poll starts and heartbeats, the heartbeat wheel, the gathering of
 * blocking polls, the LISTEN connection and the periodic check. The event routes start it when
 * the app is ready, answer every waiting poll before the server closes, and close it last.
 */
export class LongPolling {
  readonly wakeups = new QueueWakeups();
  /** What a poll needs (pollEvents). */
  readonly deps: EventsDeps;
  readonly gathering = new PollGathering(POLL_GATHER_MS);
  private readonly rechecks: PollRechecks;
  private readonly listener: EventListener;
  private readonly metrics: Metrics | undefined;

  constructor({ db, transactions, config, log, metrics }: LongPollingOptions) {
    const { wakeups } = this;
    this.metrics = metrics;
    const heartbeats = new HeartbeatBatches(transactions, HEARTBEAT_TICK_MS);
    // The heartbeats falling due in one tick go as one statement, sent at once.
    const wheel = new HeartbeatWheel(HEARTBEAT_TICK_MS, () => heartbeats.flush());
    const leftPolls = new LeftPollBatches(db, HEARTBEAT_TICK_MS);
    this.deps = { db, config, wakeups, starts: new PollStartBatches(db), heartbeats, leftPolls, wheel };
    metrics?.watchWaitingPolls(() => wakeups.waitingPolls);
    const rechecks = (this.rechecks = new PollRechecks({ db, wakeups, intervalMs: config.pollRecheckSeconds * 1000, log, metrics }));
    this.listener = new EventListener({
      connectionString: config.databaseUrl,
      connectTimeoutMs: config.dbConnectTimeoutMs,
      log,
      channel: EVENTS_CHANNEL,
      onNotified: (queueId) => {
        metrics?.notificationReceived();
        wakeups.wake(queueId, undefined, performance.now());
      },
      onGap: () => rechecks.request(),
      ...(metrics && { onReconnected: () => metrics.listenReconnected() }),
    });
  }

  /** The app is ready: LISTEN, and the periodic check. */
  async start(): Promise<void> {
    await this.listener.start();
    this.rechecks.start();
  }

  /** Before the HTTP server waits for the requests in flight: every waiting poll answers now. */
  async answerAll(): Promise<void> {
    // The polls answer first: a check in progress may wait on the database for seconds.
    this.rechecks.stop();
    this.gathering.flush();
    this.deps.wheel.stop();
    this.deps.heartbeats.flush();
    this.deps.leftPolls.flush();
    await this.wakeups.close();
    await this.rechecks.close();
  }

  async close(): Promise<void> {
    this.rechecks.stop();
    this.deps.wheel.stop();
    await this.wakeups.close();
    await this.rechecks.close();
    await this.listener.close();
  }

  /** A poll's answer in the metrics: a heartbeat, or a delivery woken by a NOTIFY. */
  countAnswer(answer: NonNullable<PollAnswer>): void {
    const { metrics } = this;
    if (!metrics) return;
    const { events, notifiedAt } = answer;
    if (events.at(-1)?.type === 'heartbeat') metrics.heartbeatSent();
    else if (notifiedAt !== undefined && events.length > 0) metrics.delivered((performance.now() - notifiedAt) / 1000);
  }
}
