import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { gzip } from 'node:zlib';
import { negotiate } from '@fastify/accept-negotiator';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../../config.js';
import { ClientGone } from '../../db/user-transactions.js';
import type { Departure } from '../../lib/departure.js';
import { authenticate, type BasicCredentials, parseBasicAuthorization, requestSubdomain } from '../../http/auth.js';
import type { AccountBatches } from '../../http/auth.repository.js';
import { CLIENT_LEFT } from '../../http/client-gone.js';
import { errorAnswer } from '../../http/error-answers.js';
import { toApiError } from '../../http/errors.js';
import { enforceRateLimit, type RateLimitDecision, rateLimitHeaders, rateLimitRule, type RateLimitRule } from '../../http/rate-limit.js';
import { REQUEST_COMPLETED, requestId } from '../../http/request-log.js';
import type { Metrics } from '../../metrics/metrics.js';
import { asError, type PollAnswer, pollEvents } from './events.service.js';
import type { LongPolling } from './long-polling.js';

/**
 * Blocking GET /events polls served straight from Node's HTTP server, around Fastify (issue 27).
 * 10,000 connected clients cost an instance a poll every few milliseconds all day, each answered
 * by its heartbeat and opened again at once; Fastify's request, reply, hooks and their garbage
 * were most of what a cycle cost above Node's own HTTP. A poll in the shape Zulip's clients send
 * (below) is authenticated, rate limited, started, answered and logged here with the same parts
 * as the route (the batched authentication statement, pollEvents, the error envelope, the log
 * line and the metrics), and answers exactly as the route would; everything else, including any
 * request this path is not sure of before its credentials are checked, goes to Fastify untouched.
 *
 * The shape: `GET /api/v1/events?` with exactly `queue_id` (a queue id as register hands them out)
 * and `last_event_id` (a plain integer), and optionally `dont_block=false`, each once, in any
 * order (what the official Python and JavaScript clients send); no body; a Basic
 * Authorization header that parses; the server not closing. Nothing is decided or written before
 * that, so a request handed to Fastify is counted once by the rate limit.
 */

const PATH = '/api/v1/events';
const PREFIX = `${PATH}?`;
const QUEUE_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** Integers whose JSON decoding (the route's jsonInteger) is exact: no sign but `-`, no leading zero, at most 15 digits. */
const EVENT_ID = /^-?(?:0|[1-9][0-9]{0,14})$/;
const JSON_TYPE = 'application/json; charset=utf-8';
/** @fastify/compress reads `*` and `x-gzip` as gzip; so does this path. */
const GZIP_ALIAS = /\*|x-gzip/gu;
const ENCODINGS = ['gzip'];

interface PlainPoll {
  queueId: string;
  lastEventId: number;
}

/** The queue and last event id of a query in the plain shape; undefined for any other query. */
export function plainPollQuery(url: string): PlainPoll | undefined {
  if (!url.startsWith(PREFIX)) return undefined;
  const pairs = url.slice(PREFIX.length).split('&', 4);
  if (pairs.length < 2 || pairs.length > 3) return undefined;
  let queueId: string | undefined;
  let lastEventId: string | undefined;
  let dontBlock = false;
  for (const pair of pairs) {
    if (pair.startsWith('queue_id=') && queueId === undefined) queueId = pair.slice('queue_id='.length);
    else if (pair.startsWith('last_event_id=') && lastEventId === undefined) lastEventId = pair.slice('last_event_id='.length);
    // As zulip-js and many clients send it: the default, said explicitly.
    else if (pair === 'dont_block=false' && !dontBlock) dontBlock = true;
    else return undefined;
  }
  if (queueId === undefined || lastEventId === undefined || !QUEUE_ID.test(queueId) || !EVENT_ID.test(lastEventId)) return undefined;
  return { queueId, lastEventId: Number(lastEventId) };
}

export interface DirectPollsOptions {
  polling: LongPolling;
  /** The app's authentication statements: a direct poll shares its turn's statement with the routes' requests. */
  accounts: AccountBatches;
  config: Config;
  /** The app's logger; `logging` false when it logs nothing (no logger, or a silent one). */
  log: FastifyBaseLogger;
  logging: boolean;
  metrics: Metrics | undefined;
  /** True once the app closes (src/http/shutdown.ts): new polls go to Fastify, answers close their connection. */
  closing: () => boolean;
}

export class DirectPolls {
  readonly rule: RateLimitRule | undefined;

  constructor(readonly options: DirectPollsOptions) {
    this.rule = rateLimitRule(options.config);
  }

  /** Serves the request if it is a poll in the plain shape (true); false leaves it, untouched, to Fastify. */
  take(request: IncomingMessage, response: ServerResponse): boolean {
    const { url, headers } = request;
    if (request.method !== 'GET' || url === undefined || !url.startsWith(PREFIX)) return false;
    const poll = plainPollQuery(url);
    const length = headers['content-length'];
    if (!poll || headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0')) return false;
    if (this.options.closing()) return false;
    let credentials: BasicCredentials;
    try {
      credentials = parseBasicAuthorization(headers.authorization);
    } catch {
      // Fastify answers the malformed header with the route's message.
      return false;
    }
    void new DirectPoll(this, request, response, poll.queueId).run(credentials, poll.lastEventId);
    return true;
  }
}

/**
 * One direct poll, from its arrival to its answer: while it waits, only this object and its
 * LongPoll hold it (its queue's waiters, the heartbeat wheel). It is its own Departure: its
 * response's close tells the poll that its client left, and writes the request's line then.
 */
class DirectPoll implements Departure {
  gone = false;
  private readonly startedAt = performance.now();
  private readonly id: string;
  private userId: number | undefined;
  /** The rate limit's decision, whose headers every answer carries (when rate limiting is on). */
  private rateLimit: RateLimitDecision | undefined;
  private onGoneListeners: (() => void)[] | undefined;
  /** Set when the poll itself cut its connection (an answer that could not be sent). */
  private cut = false;

  constructor(
    private readonly polls: DirectPolls,
    private readonly request: IncomingMessage,
    private readonly response: ServerResponse,
    private readonly queueId: string,
  ) {
    this.id = requestId(request);
    polls.options.metrics?.responseOpened(response);
    // `on`, not `once` (its wrapper is two more objects per waiting poll): a response closes once.
    response.on('close', this.closed);
  }

  async run(credentials: BasicCredentials, lastEventId: number): Promise<void> {
    const { polling, accounts, config } = this.polls.options;
    const { rule } = this.polls;
    try {
      await polling.gathering.wait();
      const { caller, rateLimit } = await authenticate(
        accounts,
        credentials,
        requestSubdomain(this.request.headers, config),
        undefined,
        rule,
      );
      this.userId = caller.id;
      if (rateLimit) {
        this.rateLimit = rateLimit;
        enforceRateLimit(rateLimit);
      }
      pollEvents(polling.deps, caller, { queueId: this.queueId, lastEventId, dontBlock: false, clientGone: this }, this.answered);
    } catch (error) {
      this.failed(error);
    }
  }

  onGone(listener: () => void): () => void {
    (this.onGoneListeners ??= []).push(listener);
    return () => {
      const index = this.onGoneListeners?.indexOf(listener) ?? -1;
      if (index >= 0) this.onGoneListeners!.splice(index, 1);
    };
  }

  private readonly answered = (error: Error | null, answer: PollAnswer): void => {
    if (error) return this.failed(error);
    // The client left: nothing is sent (its line was written when it left).
    if (answer === null) return;
    try {
      this.polls.options.polling.countAnswer(answer);
      const body = answer.waited
        ? { result: 'success', msg: '', events: answer.events, queue_id: this.queueId }
        : { result: 'success', msg: '', events: answer.events };
      this.send(200, JSON.stringify(body), undefined);
    } catch (failure) {
      this.failed(failure);
    }
  };

  /** Answers a failure as the app's error handler would; never throws (nothing above it would catch it). */
  private failed(thrown: unknown): void {
    const { config, metrics } = this.polls.options;
    const error = asError(thrown);
    try {
      if (this.response.headersSent) throw error;
      if (this.clientLeft()) {
        // As the app's error handler: whatever failed, nobody is there to read it; a failure of our own is still logged.
        if (!toApiError(error, config.retryAfterSeconds) && !(error instanceof ClientGone)) {
          this.log().error({ err: error }, 'unhandled error (its client had left)');
        }
        return;
      }
      const answer = errorAnswer(error, config.retryAfterSeconds, this.log(), metrics);
      this.send(answer.statusCode, JSON.stringify(answer.body), answer.headers);
    } catch (failure) {
      this.log().error({ err: failure }, 'a direct poll could not be answered');
      // Its connection is cut: the line above says why, not a 499 of a client that left.
      this.cut = true;
      this.response.destroy();
    }
  }

  /** Writes the answer with the headers the route's would have, gzipped as @fastify/compress would. */
  private send(statusCode: number, body: string, errorHeaders: Record<string, string> | undefined): void {
    const { config } = this.polls.options;
    const { rule } = this.polls;
    const headers: Record<string, string> = {
      'x-request-id': this.id,
      ...(rule && this.rateLimit && rateLimitHeaders(rule, this.rateLimit)),
      ...errorHeaders,
      'content-type': JSON_TYPE,
    };
    if (this.polls.options.closing()) headers.connection = 'close';
    const bytes = Buffer.byteLength(body);
    const encoding = bytes >= config.compressionThresholdBytes ? this.acceptedEncoding() : undefined;
    if (encoding === undefined) {
      headers['content-length'] = String(bytes);
      return this.write(statusCode, headers, body);
    }
    // Off the event loop, and chunked (no content-length), as the app's compression sends every answer.
    gzip(body, (error, compressed) => {
      if (error) return this.failed(error);
      headers.vary = 'accept-encoding';
      headers['content-encoding'] = encoding;
      try {
        this.write(statusCode, headers, compressed);
      } catch (failure) {
        this.failed(failure);
      }
    });
  }

  private acceptedEncoding(): string | undefined {
    const { headers } = this.request;
    const accepted = headers['accept-encoding'];
    if (accepted === undefined || headers['x-no-compression'] !== undefined) return undefined;
    const encoding = negotiate(accepted.toLowerCase().replace(GZIP_ALIAS, 'gzip'), ENCODINGS);
    return encoding === null || encoding === 'identity' ? undefined : encoding;
  }

  private write(statusCode: number, headers: Record<string, string>, body: string | Buffer): void {
    if (this.response.destroyed || this.clientLeft()) return;
    // Counted and logged once the answer is sent whole, as the route's (Fastify's onResponse); a
    // client that leaves before gets the 499 line instead (closed).
    this.response.writeHead(statusCode, headers).end(body, () => {
      const elapsedMs = performance.now() - this.startedAt;
      const { logging, log, metrics } = this.polls.options;
      metrics?.answered(PATH, 'GET', statusCode, elapsedMs);
      if (logging) log.info(this.line(statusCode, elapsedMs), REQUEST_COMPLETED);
    });
  }

  /** The request's line, as the app's RequestLog writes it for the route. */
  private line(statusCode: number, elapsedMs: number): object {
    return {
      reqId: this.id,
      method: 'GET',
      path: PATH,
      ...(this.userId !== undefined && { userId: this.userId }),
      statusCode,
      ...(statusCode === CLIENT_LEFT && { clientLeft: true }),
      responseTimeMs: Math.round(elapsedMs * 10) / 10,
    };
  }

  private log(): FastifyBaseLogger {
    return this.polls.options.log.child({ reqId: this.id });
  }

  private clientLeft(): boolean {
    return !this.response.writableFinished && this.request.socket.destroyed;
  }

  private readonly closed = (): void => {
    if (this.response.writableFinished) return;
    this.gone = true;
    for (const listener of this.onGoneListeners?.splice(0) ?? []) listener();
    const { logging, log } = this.polls.options;
    if (logging && !this.cut && this.clientLeft()) log.info(this.line(CLIENT_LEFT, performance.now() - this.startedAt), REQUEST_COMPLETED);
  };
}
