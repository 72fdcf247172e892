import { setTimeout as sleep } from 'node:timers/promises';
import type { DatabaseHandle } from '../../src/db/database.js';
import { CHAOS, log } from './config.js';
import { type Answer, type Call, call } from './http.js';
import { type SimUser } from './seed.js';

// --- Statistics and violations. ---

/** What the run shares across its modules: requests sent, Ctrl-C, and the checker's own connection to the database. */
export const state: { requestCount: number; interrupted: boolean; checker: DatabaseHandle['db'] | undefined } = {
  requestCount: 0,
  interrupted: false,
  checker: undefined,
};

export const statusCounts = new Map<string, number>();
export const operationCounts = new Map<string, number>();
export const violations: string[] = [];
/** Set on Ctrl-C: the clients stop, and failures caused by the teardown are not reported. */

export function violation(text: string): void {
  if (state.interrupted) return;
  violations.push(text);
  if (violations.length <= 20) log(`VIOLATION ${text}`);
}

export function count(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

/** Sends one request of a virtual client; a 5xx or a transport failure is a violation. */
export async function send(
  port: number,
  user: SimUser | undefined,
  operation: string,
  request: Omit<Call, 'port'>,
): Promise<Answer | undefined> {
  state.requestCount++;
  count(operationCounts, operation);
  try {
    const answer = await call({ port, host: user?.host, authorization: user?.authorization, ...request });
    count(statusCounts, String(answer.status));
    if (answer.status >= 500 && !(CHAOS && (answer.status === 503 || answer.status === 504))) {
      violation(`${user?.label ?? '-'} ${operation}: ${request.method} ${request.path} → ${answer.status} ${answer.body.slice(0, 200)}`);
    }
    return answer;
  } catch (error) {
    count(statusCounts, 'transport error');
    violation(`${user?.label ?? '-'} ${operation}: ${request.method} ${request.path} failed: ${String(error)}`);
    return undefined;
  }
}

/**
 * A 503 or 504 while the chaos loop breaks the database: the request did not take effect (503), or
 * may or may not have (504: the connection was lost during its commit).
 */
export const unavailable = (answer: Answer | undefined): boolean => CHAOS && (answer?.status === 503 || answer?.status === 504);

/** Checks the status the model predicts; returns whether the server accepted (200). */
export function expectStatus(user: SimUser, operation: string, answer: Answer | undefined, expected: number, detail: string): boolean {
  if (!answer || unavailable(answer)) return false;
  if (answer.status !== expected) {
    violation(`${user.label} ${operation}: expected ${expected}, got ${answer.status} ${answer.body.slice(0, 200)} (${detail})`);
  }
  return answer.status === 200 && expected === 200;
}

/**
 * Whether a write answered 503 or 504 was applied, from the database: every accepted write appends its
 * events to the user's never-polled queue, so its event count tells. Retries while the database is
 * down (it is being restarted).
 */
export async function appliedDespiteFailure(user: SimUser, operation: string, newEvents: number, status: number): Promise<boolean> {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && !state.interrupted) {
    try {
      const { count: stored } = await state
        .checker!.selectFrom('events')
        .select((eb) => eb.fn.countAll<string>().as('count'))
        .where('queue_id', '=', user.queues.untouched)
        .executeTakeFirstOrThrow();
      const events = Number(stored);
      count(operationCounts, `${status} resolved as ${events === user.events.length ? 'not applied' : 'applied'}`);
      if (events === user.events.length + newEvents) {
        if (status === 503) violation(`${user.label} ${operation} answered 503, which promises nothing was applied, and was applied`);
        return true;
      }
      if (events !== user.events.length)
        violation(
          `${user.label} ${operation} answered ${status}: ${events} events stored, model has ${user.events.length} (+${newEvents})`,
        );
      return false;
    } catch {
      await sleep(250);
    }
  }
  violation(`${user.label} ${operation} answered ${status} and the database did not come back to tell whether it was applied`);
  return false;
}

/** An accepted write (200), or one answered 503/504 that the database shows was applied. */
export async function writeApplied(
  user: SimUser,
  operation: string,
  answer: Answer | undefined,
  expected: number,
  detail: string,
  newEvents: number,
): Promise<boolean> {
  if (unavailable(answer)) return expected === 200 && appliedDespiteFailure(user, operation, newEvents, answer!.status);
  return expectStatus(user, operation, answer, expected, detail);
}
