import type { FastifyBaseLogger } from 'fastify';
import type { Metrics } from '../metrics/metrics.js';
import { toApiError } from './errors.js';

/** What an error is answered with. */
export interface ErrorAnswer {
  statusCode: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

const INTERNAL_ERROR: ErrorAnswer = { statusCode: 500, headers: {}, body: { result: 'error', msg: 'Internal server error' } };

/**
 * The answer to a failed request whose client is still there, for the app's error handler and the
 * direct long polls (src/modules/events/direct-polls.ts): an API error's envelope, a 503 for an
 * unreachable database, anything else masked as a 500 and logged.
 */
export function errorAnswer(error: Error, retryAfterSeconds: number, log: FastifyBaseLogger, metrics: Metrics | undefined): ErrorAnswer {
  const apiError = toApiError(error, retryAfterSeconds);
  if (!apiError) {
    log.error({ err: error }, 'unhandled error');
    return INTERNAL_ERROR;
  }
  metrics?.errorAnswered(apiError, error);
  if (apiError.statusCode === 503) log.warn({ err: error }, 'database unavailable');
  return { statusCode: apiError.statusCode, headers: apiError.headers, body: apiError.toBody() };
}
