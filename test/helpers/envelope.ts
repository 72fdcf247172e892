import type { LightMyRequestResponse } from 'fastify';
import { expect } from 'vitest';

/**
 * Exact response bodies of the Zulip envelope (docs/api.md §1.7, docs/api.md §1.8), as the JSON text the server
 * sends: tests compare `res.body` with these, so the key order is part of every assertion.
 */

/** A success: `result`, `msg`, then `fields` in their order. */
export const success = (fields: object = {}): string => JSON.stringify({ result: 'success', msg: '', ...fields });

/** A success with nothing else. */
export const OK = success();

/** An error: `result`, `msg`, `code`. */
export const errorBody = (msg: string, code = 'BAD_REQUEST'): string => JSON.stringify({ result: 'error', msg, code });

/** An unknown, expired or foreign queue: `queue_id` before `code`. */
export const badQueueBody = (queueId: string): string =>
  JSON.stringify({ result: 'error', msg: `Bad event queue ID: ${queueId}`, queue_id: queueId, code: 'BAD_EVENT_QUEUE_ID' });

/** The 503 of an unavailable database. */
export const UNAVAILABLE = errorBody('Service temporarily unavailable', 'SERVER_NOT_READY');

/** The masked 500: no `code`. */
export const INTERNAL_ERROR = JSON.stringify({ result: 'error', msg: 'Internal server error' });

/** A 405: `allowed_methods`, no `code`. */
export const methodNotAllowed = (allowed: string[]): string =>
  JSON.stringify({ result: 'error', msg: 'Method Not Allowed', allowed_methods: allowed });

/** A missing required parameter: `var_name` before `code`. */
export const missingArgument = (name: string): string =>
  JSON.stringify({ result: 'error', msg: `Missing '${name}' argument`, var_name: name, code: 'REQUEST_VARIABLE_MISSING' });

/** Asserts the exact status and error body (400 BAD_REQUEST unless told otherwise). */
export function expectError(res: LightMyRequestResponse, msg: string, code = 'BAD_REQUEST', status = 400): void {
  expect(res.statusCode).toBe(status);
  expect(res.body).toBe(errorBody(msg, code));
}
