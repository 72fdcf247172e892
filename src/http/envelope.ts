import { Readable } from 'node:stream';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { jsonInSlices } from '../lib/slices.js';

export type SuccessBody<T extends object> = { result: 'success'; msg: '' } & T & {
    ignored_parameters_unsupported?: string[];
  };

/** Zulip's success envelope; ignored_parameters_unsupported goes last, only when non-empty. */
export function success<T extends object>(request: FastifyRequest, data: T = {} as T): SuccessBody<T> {
  const ignored = request.ignoredParameters;
  return {
    result: 'success',
    msg: '',
    ...data,
    ...(ignored.length > 0 ? { ignored_parameters_unsupported: ignored } : {}),
  };
}

/** The success envelope of an endpoint Zulip does not declare parameters for: never ignored_parameters_unsupported. */
export function untypedSuccess<T extends object>(data: T = {} as T): SuccessBody<T> {
  return { result: 'success', msg: '', ...data };
}

/**
 * Sends `success(request, data)` serialized a slice at a time (src/lib/slices.ts): for answers
 * that grow with the organization (its whole user list), which would otherwise hold the event
 * loop for everyone while they are built. The same bytes and headers as returning the envelope
 * (the length is known before the first byte is sent); HEAD answers with the headers alone.
 */
export async function sendSuccessInSlices<T extends object>(request: FastifyRequest, reply: FastifyReply, data: T): Promise<FastifyReply> {
  const chunks = await jsonInSlices(success(request, data));
  // Done in one slice (a small organization): sent as a buffer, so that the compression threshold
  // applies to it (@fastify/compress compresses every stream, whatever its length).
  if (chunks.length === 1) return reply.type('application/json; charset=utf-8').send(chunks[0]);
  const length = chunks.reduce((total, chunk) => total + chunk.length, 0);
  return reply
    .type('application/json; charset=utf-8')
    .header('content-length', length)
    .send(Readable.from(chunks, { objectMode: false }));
}
