import type { FastifyError } from 'fastify';
import { CommitOutcomeUnknown, isDatabaseUnavailable } from '../db/errors.js';
import type { BodyRefusal } from '../metrics/metrics.js';

/**
 * Typed API errors. The error handler turns them into Zulip's envelope:
 * {"result":"error","msg":...,<extra fields in order>,"code":...}.
 */
export class ApiError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
    /** null for the statuses Zulip sends without a code (405). */
    readonly code: string | null = 'BAD_REQUEST',
    /** Fields placed between msg and code, in this order. */
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ApiError';
  }

  toBody(): Record<string, unknown> {
    const body: Record<string, unknown> = { result: 'error', msg: this.message, ...this.extra };
    if (this.code !== null) body.code = this.code;
    return body;
  }
}

export const badRequest = (message: string): ApiError => new ApiError(400, message);

export const missingArgument = (name: string): ApiError =>
  new ApiError(400, `Missing '${name}' argument`, 'REQUEST_VARIABLE_MISSING', { var_name: name });

export const unauthorized = (message: string): ApiError =>
  new ApiError(401, message, 'UNAUTHORIZED', {}, { 'www-authenticate': 'Basic realm="zulip"' });

export const notFound = (): ApiError => new ApiError(404, 'Not Found');

export const methodNotAllowed = (methods: string[]): ApiError =>
  new ApiError(405, 'Method Not Allowed', null, { allowed_methods: methods }, { allow: methods.join(', ') });

export const serviceUnavailable = (retryAfterSeconds: number): ApiError =>
  new ApiError(503, 'Service temporarily unavailable', 'SERVER_NOT_READY', {}, { 'retry-after': String(retryAfterSeconds) });

/**
 * The database connection was lost during the commit (CommitOutcomeUnknown): the request may or
 * may not have been applied. A 504, not a 503: the balancer replays a write answered 503, which
 * the app answers only when nothing was committed; this one must not be replayed blindly. Its
 * code is the 503's (Zulip has none for it): the server, not the request, failed.
 */
export const commitOutcomeUnknown = (): ApiError =>
  new ApiError(504, 'The database did not confirm the request: it may or may not have been applied', 'SERVER_NOT_READY');

export const bodyTooLarge = (): ApiError => new ApiError(413, 'Request body too large');

export const malformedBody = (): ApiError => new ApiError(400, 'Malformed request body');

export const malformedRequest = (): ApiError => new ApiError(400, 'Malformed request');

/** The body did not arrive in time (BODY_TIMEOUT_SECONDS): the message Node's request timeout gets (client-errors.ts); the rest of the body is not awaited. */
export const bodyTimedOut = (): ApiError => new ApiError(408, 'Request timeout', 'BAD_REQUEST', {}, { connection: 'close' });

const TOO_MANY_FIELDS = 'Too many fields in request body';

export const tooManyFields = (): ApiError => new ApiError(400, TOO_MANY_FIELDS);

/** Which refusal of a request body an error is, if it is one (the metrics count them apart). */
export function bodyRefusalOf(error: ApiError): BodyRefusal | undefined {
  if (error.statusCode === 413) return 'size';
  if (error.statusCode === 408) return 'timeout';
  return error.message === TOO_MANY_FIELDS ? 'fields' : undefined;
}

/**
 * The API error an error is answered with: its own, a 503 for an unreachable database, and
 * Fastify's own refusals of a request (4xx); undefined for anything else (a masked 500).
 */
export function toApiError(error: FastifyError | Error, retryAfterSeconds: number): ApiError | undefined {
  if (error instanceof ApiError) return error;
  if (error instanceof CommitOutcomeUnknown) return commitOutcomeUnknown();
  if (isDatabaseUnavailable(error)) return serviceUnavailable(retryAfterSeconds);
  const code = (error as FastifyError).code;
  if (code === 'FST_ERR_CTP_BODY_TOO_LARGE') return bodyTooLarge();
  // Undecodable paths and over-long path parameters name no resource.
  if (code === 'FST_ERR_BAD_URL' || code === 'FST_ERR_MAX_PARAM_LENGTH') return notFound();
  if (code?.startsWith('FST_ERR_CTP_')) return malformedBody();
  // Any other refusal of Fastify's own (a QUERY without Content-Type): the client's fault, not a 500.
  const status = (error as FastifyError).statusCode;
  if (code?.startsWith('FST_ERR_') && status !== undefined && status >= 400 && status < 500) return malformedRequest();
  return undefined;
}
