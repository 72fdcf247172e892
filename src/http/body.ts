import { PassThrough, Transform, type TransformCallback } from 'node:stream';
import multipart from '@fastify/multipart';
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction, RequestPayload } from 'fastify';
import { ClientGone } from '../db/transactions.js';
import { KeyedQueue } from '../lib/keyed-queue.js';
import { clientGone } from './client-gone.js';
import { ApiError, bodyTimedOut, bodyTooLarge, malformedBody, tooManyFields } from './errors.js';
import { decodeForm } from './form-decoding.js';
import { NO_FIELDS, type ParamSources } from './params.js';

/** The methods whose bodies are parameter sources (docs/api.md §1.5). */
export const BODY_METHODS = new Set(['POST', 'PATCH', 'DELETE']);

/**
 * At most this many fields in a form body, urlencoded or multipart (Django's
 * DATA_UPLOAD_MAX_NUMBER_FIELDS, which Zulip inherits; docs/api.md §1.9): parsing a megabyte of tiny
 * fields holds the event loop before the credentials are even checked (bench/RESULTS.md).
 */
const MAX_FORM_FIELDS = 1000;
const AMPERSAND = 0x26;

/**
 * Form bodies (urlencoded and multipart) are parameter sources; every other body is read (so the
 * size limit applies) and then ignored, never an error (docs/api.md §1.5).
 */
export async function registerBodyParsers(app: FastifyInstance, bodyLimit: number): Promise<void> {
  app.removeAllContentTypeParsers();
  // Decoded only once the credentials are accepted (parameterCollector): a megabyte of `+` still
  // costs the event loop several milliseconds, which an unauthenticated request must not get.
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'buffer', bodyLimit }, (_request, body, done) =>
    done(null, new UrlencodedBody(body as Buffer)),
  );
  // busboy stops at the part after the limit; the request then fails with 400 (multipartFields).
  await app.register(multipart, {
    limits: { fieldSize: bodyLimit, fileSize: bodyLimit, parts: MAX_FORM_FIELDS, fields: MAX_FORM_FIELDS },
  });
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit }, (_request, _body, done) => done(null, undefined));
}

const hasMediaType = (request: FastifyRequest, type: string): boolean =>
  request.headers['content-type']?.trimStart().toLowerCase().startsWith(type) === true;

/**
 * Counts the fields of an urlencoded body as it arrives (as Python's parse_qsl does for Django:
 * one more than the `&` separators) and fails the body with 400 at the separator that makes it
 * MAX_FORM_FIELDS + 1, before the body is parsed.
 */
class FieldCounter extends Transform {
  private separators = 0;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    for (let at = chunk.indexOf(AMPERSAND); at !== -1; at = chunk.indexOf(AMPERSAND, at + 1)) {
      if (++this.separators >= MAX_FORM_FIELDS) return done(tooManyFields());
    }
    done(null, chunk);
  }
}

/**
 * Whether the body is declared shorter than MAX_FORM_FIELDS bytes, too short to reach the limit
 * (Node's parser reads exactly the declared length, and refuses one sent with Transfer-Encoding):
 * it needs no counting, nor the stream that counts (most of what a small write's body cost).
 */
function declaredTooShortForTheLimit(request: FastifyRequest): boolean {
  const declared = request.headers['content-length'];
  return (
    declared !== undefined &&
    request.headers['transfer-encoding'] === undefined &&
    /^\d+$/.test(declared) &&
    Number(declared) < MAX_FORM_FIELDS
  );
}

/** preParsing of the routes that take a body: urlencoded bodies are read through a FieldCounter. A callback hook (see echoRequestId). */
export function limitFormFields(
  request: FastifyRequest,
  _reply: FastifyReply,
  payload: RequestPayload,
  done: (error: Error | null, payload?: RequestPayload) => void,
): void {
  if (!hasMediaType(request, 'application/x-www-form-urlencoded') || declaredTooShortForTheLimit(request)) return done(null, payload);
  done(null, payload.pipe(new FieldCounter()));
}

/**
 * Bodies declared at least this long, or chunked, are large: they must arrive within the body
 * deadline (shorter ones come in a packet or two) and take turns to be read (LargeBodyTurns).
 */
const LARGE_BODY_BYTES = 65_536;

const isLarge = (request: FastifyRequest): boolean => {
  const declared = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (declared !== undefined && Number(declared) >= LARGE_BODY_BYTES);
};

/**
 * preParsing of the routes that take a body: a large body must arrive whole within `seconds` of the
 * request's headers, or 408 and the connection closes. Bodies are read before the credentials are
 * checked (docs/api.md §1.1): this bounds how long anyone can make the instance hold a body limit's
 * worth of memory. Also, a body read through a stream of ours (FieldCounter, or the one below)
 * fails when its client leaves before it ended: a pipe passes no error on, and the parser would
 * wait for ever.
 */
export function bodyDeadline(seconds: number) {
  return (
    request: FastifyRequest,
    reply: FastifyReply,
    payload: RequestPayload,
    done: (error: Error | null, payload?: RequestPayload) => void,
  ): void => {
    // Multipart is read from request.raw when its fields are collected, which keeps its own deadline
    // (request.isMultipart() is only known once its parser ran, after this hook).
    if (hasMediaType(request, 'multipart/form-data')) return done(null, payload);
    const raw = request.raw;
    const large = isLarge(request);
    // Read straight from the request, a small body needs nothing: the parser hears the request's own errors.
    if (!large && payload === raw) return done(null, payload);
    // Destroying the request itself would destroy its socket, and the 408 would never be sent: a
    // stream of its own fails the parser instead.
    const read = payload === raw ? raw.pipe(new PassThrough()) : payload;
    const fail = (error: Error) => {
      clearTimeout(timer);
      if (!read.destroyed) read.destroy(error);
    };
    // Unless answered meanwhile: a body refused unread (413 on its declared length) leaves a stream nobody reads or ends.
    const timer = large ? setTimeout(() => reply.sent || fail(bodyTimedOut()), seconds * 1000) : undefined;
    read.once('end', () => clearTimeout(timer));
    raw.once('close', () => (raw.complete ? clearTimeout(timer) : fail(new ClientGone())));
    done(null, read);
  };
}

/**
 * Large bodies read, decoded and served at once per instance. One: two at once still kept a CPU-starved instance's event loop
 * busy (another organization's small writes at 8–19 × their latency alone); one served as many large writes (bench/RESULTS.md).
 */
const LARGE_BODY_TURNS = 1;

/**
 * Large bodies take turns, from before a byte of them is read until their answer is handed over
 * (onSend: the write is done, whether or not its client stayed): LARGE_BODY_TURNS per instance,
 * each Authorization header (its account when the credentials are good) waiting behind its own
 * earlier body, so that one account's many bodies do not go before others'. Reading, parsing and decoding a 10,000-entry update, then writing it, takes
 * the event loop and PostgreSQL for tens of milliseconds: many accounts' large writes at once held
 * other organizations' small writes for seconds. Waiting bodies stay unread in their sockets (TCP
 * back-pressure), not in memory; a request is never refused for its turn (only the request timeout
 * ends a wait), and smaller bodies never wait.
 */
export function largeBodyTurns() {
  const queue = new KeyedQueue<string | undefined>(LARGE_BODY_TURNS);
  const turns = new WeakMap<FastifyRequest, { over: boolean; end?: () => void }>();
  return {
    /** onRequest of the routes that take a body. */
    take: (request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void => {
      if (!isLarge(request)) return done();
      const turn: { over: boolean; end?: () => void } = { over: false };
      turns.set(request, turn);
      // A client seen leaving while it waits gives up its place (its turn, when it comes, ends at once). An unread
      // socket's close is mostly seen only at its turn, once what it sent is read: the read then fails and the turn ends.
      const stopWatching = clientGone(reply).onGone(() => {
        turn.over = true;
        done(new ClientGone());
      });
      void queue.run(
        request.headers.authorization,
        () =>
          new Promise<void>((end) => {
            if (turn.over) return end();
            stopWatching();
            turn.end = end;
            done();
          }),
      );
    },
    /** onSend of the same routes. */
    end: (
      request: FastifyRequest,
      _reply: FastifyReply,
      payload: unknown,
      done: (error: Error | null, payload?: unknown) => void,
    ): void => {
      const turn = turns.get(request);
      if (turn) {
        turn.over = true;
        turn.end?.();
      }
      done(null, payload);
    },
  };
}

/** Last occurrence wins within one source (`a=1&a=2` → `2`): the query string's fields. */
function lastValues(source: unknown): Map<string, string> {
  const values = new Map<string, string>();
  if (typeof source !== 'object' || source === null) return values;
  for (const [name, value] of Object.entries(source as Record<string, unknown>)) {
    const last: unknown = Array.isArray(value) ? value.at(-1) : value;
    if (typeof last === 'string') values.set(name, last);
  }
  return values;
}

/**
 * The request's parts, failing with 413 as soon as more than bodyLimit bytes have arrived: busboy's
 * limits are per part, and a chunked body declares no length to check up front.
 */
async function* limitedParts(request: FastifyRequest, bodyLimit: number, timeoutMs: number) {
  let received = 0;
  let fail: (error: ApiError) => void = () => undefined;
  const failed = new Promise<never>((_resolve, reject) => (fail = reject));
  failed.catch(() => undefined); // observed through the race below
  // The body deadline (bodyDeadline): multipart is read from request.raw, not from the hook's payload.
  const timer = setTimeout(() => fail(bodyTimedOut()), timeoutMs);
  const onData = (chunk: Buffer) => {
    received += chunk.length;
    if (received <= bodyLimit) return;
    request.raw.removeListener('data', onData);
    // Stop parsing; the rest of the body is read and dropped, as Fastify does for other bodies.
    request.raw.unpipe();
    request.raw.resume();
    fail(bodyTooLarge());
  };
  const parts = request.parts()[Symbol.asyncIterator]();
  request.raw.on('data', onData);
  try {
    for (;;) {
      const next = await Promise.race([parts.next(), failed]);
      if (next.done) return;
      yield next.value;
    }
  } finally {
    clearTimeout(timer);
    request.raw.removeListener('data', onData);
  }
}

async function multipartFields(request: FastifyRequest, bodyLimit: number, timeoutMs: number): Promise<Map<string, string>> {
  const declaredLength = Number(request.headers['content-length'] ?? 0);
  if (declaredLength > bodyLimit) throw bodyTooLarge();
  const fields = new Map<string, string>();
  try {
    for await (const part of limitedParts(request, bodyLimit, timeoutMs)) {
      if (part.type === 'file') {
        part.file.resume(); // file parts are not parameters: drain and drop them
      } else if (typeof part.value === 'string') {
        fields.set(part.fieldname, part.value);
      }
    }
  } catch (error) {
    if (error instanceof ApiError) throw error;
    const code = (error as { code?: string }).code;
    if (code === 'FST_REQ_FILE_TOO_LARGE') throw bodyTooLarge();
    if (code === 'FST_PARTS_LIMIT' || code === 'FST_FIELDS_LIMIT') throw tooManyFields();
    throw malformedBody();
  }
  return fields;
}

/** An urlencoded body as read, not yet decoded. */
class UrlencodedBody {
  constructor(readonly bytes: Buffer) {}
}

/** The body's fields, decoded on first use: by the decoder, after authentication and the rate limit. */
function lazilyDecoded(body: UrlencodedBody, query: Map<string, string>): ParamSources {
  let fields: Map<string, string> | undefined;
  return {
    get body() {
      return (fields ??= decodeForm(body.bytes));
    },
    query,
  };
}

/**
 * preValidation: collects the request's parameters for the decoder (src/http/params.ts). A callback hook
 * (see echoRequestId): only a multipart body needs to wait.
 */
export function parameterCollector(bodyLimit: number, bodyTimeoutSeconds: number) {
  return (request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void => {
    const collect = (body: ReadonlyMap<string, string>) => {
      request.parameterSources = { body, query: lastValues(request.query) };
      done();
    };
    if (!BODY_METHODS.has(request.method)) return collect(NO_FIELDS);
    if (request.body instanceof UrlencodedBody) {
      request.parameterSources = lazilyDecoded(request.body, lastValues(request.query));
      return done();
    }
    // Bodies of other types carry no parameters.
    if (!request.isMultipart()) return collect(NO_FIELDS);
    multipartFields(request, bodyLimit, bodyTimeoutSeconds * 1000).then(collect, done);
  };
}
