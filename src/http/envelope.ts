import type { FastifyRequest } from 'fastify';

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
