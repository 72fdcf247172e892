import type { BaseLogger } from 'pino';
import type { Config } from '../../config.js';
import type { Database } from '../../db/database.js';
import type { Metrics } from '../../metrics/metrics.js';
import { deleteExpiredQueues } from '../events/event-queues.repository.js';
import { deleteOldAuditRows } from '../subscriptions/subscriptions.repository.js';

/**
 * The periodic clean-up every instance runs: event queues idle past their lifespan (docs/api.md
 * §2.10) and subscription audit rows older than AUDIT_LOG_RETENTION_DAYS, idempotent deletes that
 * many instances may run at once. Each statement deletes a bounded batch (within the statement
 * timeout); a sweep repeats them until nothing is left or its budget is spent.
 */

const QUEUE_BATCH = 500;
const AUDIT_BATCH = 5000;
const MAX_BATCHES_PER_SWEEP = 40;

async function inBatches(batch: number, run: () => Promise<number>): Promise<number> {
  let total = 0;
  for (let round = 0; round < MAX_BATCHES_PER_SWEEP; round++) {
    const deleted = await run();
    total += deleted;
    if (deleted < batch) break;
  }
  return total;
}

export async function sweepOnce(
  db: Database,
  config: Pick<Config, 'auditLogRetentionDays'>,
): Promise<{ queues: number; auditRows: number }> {
  const queues = await inBatches(QUEUE_BATCH, () => deleteExpiredQueues(db, QUEUE_BATCH));
  const auditRows = await inBatches(AUDIT_BATCH, () => deleteOldAuditRows(db, config.auditLogRetentionDays, AUDIT_BATCH));
  return { queues, auditRows };
}

export interface SweeperOptions {
  db: Database;
  config: Pick<Config, 'auditLogRetentionDays' | 'queueSweepIntervalSeconds'>;
  log: Pick<BaseLogger, 'info' | 'warn'>;
  metrics: Metrics | undefined;
}

/** Sweeps every QUEUE_SWEEP_INTERVAL_SECONDS from start() until close(); a slow sweep is not started twice. */
export class Sweeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(private readonly options: SweeperOptions) {}

  start(): void {
    const { db, config, log, metrics } = this.options;
    this.timer = setInterval(() => {
      if (this.running) return;
      this.running = sweepOnce(db, config)
        .then(
          (result) => {
            metrics?.swept('event_queues', result.queues);
            metrics?.swept('audit_rows', result.auditRows);
            if (result.queues + result.auditRows > 0) log.info(result, 'swept expired event queues and old audit rows');
          },
          (error: unknown) => log.warn({ err: error }, 'sweep failed'),
        )
        .finally(() => {
          this.running = undefined;
        });
    }, config.queueSweepIntervalSeconds * 1000);
    this.timer.unref();
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }
}
