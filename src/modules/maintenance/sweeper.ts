import type { FastifyPluginAsync } from 'fastify';
import type { AppDeps } from '../../deps.js';
import type { Config } from '../../config.js';
import type { Database } from '../../db/database.js';
import { deleteExpiredQueues } from '../events/events.repository.js';
import { deleteOldAuditRows } from '../subscriptions/subscriptions.repository.js';

/**
 * The periodic clean-up every instance runs, every QUEUE_SWEEP_INTERVAL_SECONDS: event queues idle
 * past their lifespan (docs/api.md §2.10) and subscription audit rows older than
 * AUDIT_LOG_RETENTION_DAYS. Both are idempotent deletes, so many instances sweeping at once is
 * harmless. Each statement deletes a bounded batch (well within the statement timeout, and never
 * one huge transaction); a sweep repeats batches until nothing is left or its budget is spent, and
 * the next sweep goes on from there.
 */

const QUEUE_BATCH = 500;
const AUDIT_BATCH = 5000;
const MAX_BATCHES_PER_SWEEP = 40;

export interface SweepResult {
  queues: number;
  auditRows: number;
}

async function inBatches(batch: number, run: () => Promise<number>): Promise<number> {
  let total = 0;
  for (let round = 0; round < MAX_BATCHES_PER_SWEEP; round++) {
    const deleted = await run();
    total += deleted;
    if (deleted < batch) break;
  }
  return total;
}

export async function sweepOnce(db: Database, config: Pick<Config, 'auditLogRetentionDays'>): Promise<SweepResult> {
  const queues = await inBatches(QUEUE_BATCH, () => deleteExpiredQueues(db, QUEUE_BATCH));
  const auditRows = await inBatches(AUDIT_BATCH, () => deleteOldAuditRows(db, config.auditLogRetentionDays, AUDIT_BATCH));
  return { queues, auditRows };
}

export const sweeper: FastifyPluginAsync<AppDeps> = async (app, { db, config }) => {
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  app.addHook('onReady', async () => {
    timer = setInterval(() => {
      if (running) return; // a slow sweep is not started twice
      running = sweepOnce(db, config)
        .then(
          (result) => {
            app.metrics?.swept('event_queues', result.queues);
            app.metrics?.swept('audit_rows', result.auditRows);
            if (result.queues + result.auditRows > 0) app.log.info(result, 'swept expired event queues and old audit rows');
          },
          (error: unknown) => app.log.warn({ err: error }, 'sweep failed'),
        )
        .finally(() => {
          running = undefined;
        });
    }, config.queueSweepIntervalSeconds * 1000);
    timer.unref();
  });
  app.addHook('onClose', async () => {
    clearInterval(timer);
    await running;
  });
};
