import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { USER_EVENT_LOCK_NAMESPACE } from '../src/db/transactions.js';
import { api, createTestContext, type TestContext } from './helpers/app.js';
import { OK } from './helpers/envelope.js';
import { auth, type FixtureUser, ids } from './helpers/fixture.js';
import { userLockWaiters } from './helpers/database.js';
import { rawPost } from './helpers/http.js';
import { PROPERTIES_URL, subscriptionOf } from './helpers/subscriptions.js';
import { eventually } from './helpers/wait.js';

/**
 * Large bodies (64 KiB or more, or chunked) take turns from before they are read until their
 * answer: one at a time per instance, the others left unread in their sockets; never refused, and
 * smaller bodies never wait. Over real sockets: what a waiting body holds is its connection.
 */

let ctx: TestContext | undefined;
let locker: pg.Client | undefined;
afterEach(async () => {
  await locker?.end();
  locker = undefined;
  await ctx?.close();
  ctx = undefined;
});

const TURNS = 1;
const WRITERS: FixtureUser[] = ['U', 'V', 'G'];

/** 1,000 changes of P's pin_to_top, the last one `value`: about 80 KB urlencoded, a large body. */
const largeBody = (value: boolean) =>
  `subscription_data=${encodeURIComponent(
    JSON.stringify(
      Array.from({ length: 1000 }, (_, index) => ({ stream_id: ids.P, property: 'pin_to_top', value: index % 2 === (value ? 1 : 0) })),
    ),
  )}`;

/** Starts a context on a real port, with the writers' locks held as their writes on another instance would: every large write that reaches the database waits there. */
async function start(): Promise<number> {
  // The statement timeout outlasts the held locks on a loaded machine; the rate limit's log counts who got past authentication.
  ctx = await createTestContext({ env: { DB_STATEMENT_TIMEOUT_MS: '60000', RATE_LIMITING: 'true' } });
  await ctx.app.listen({ port: 0, host: '127.0.0.1' });
  locker = new pg.Client({ connectionString: ctx.database.url });
  await locker.connect();
  for (const user of WRITERS) await locker.query('SELECT pg_advisory_lock($1, $2)', [USER_EVENT_LOCK_NAMESPACE, ids[user]]);
  return (ctx.app.server.address() as AddressInfo).port;
}

/** A large write over a socket: with its length declared, or chunked. */
const largeWrite = (port: number, user: FixtureUser, chunked: boolean) => {
  const body = largeBody(true);
  return rawPost({
    port,
    path: PROPERTIES_URL,
    headers: {
      authorization: auth(user),
      'content-type': 'application/x-www-form-urlencoded',
      ...(chunked ? {} : { 'content-length': String(Buffer.byteLength(body)) }),
    },
    chunks: [body],
  });
};

async function lockWaiters(): Promise<number> {
  let waiting = 0;
  for (const user of WRITERS) waiting += await userLockWaiters(locker!, ids[user]);
  return waiting;
}

/** Requests of the writers past authentication (the rate limit's hits). */
async function authenticated(): Promise<number> {
  const { rows } = await sql<{ hits: number }>`SELECT coalesce(sum(cardinality(hits)), 0)::int AS hits FROM rate_limit_logs
    WHERE user_id IN (${sql.join(WRITERS.map((user) => ids[user]))})`.execute(ctx!.db);
  return rows[0]!.hits;
}

const connections = () =>
  new Promise<number>((resolve, reject) => ctx!.app.server.getConnections((error, count) => (error ? reject(error) : resolve(count))));

describe('large bodies of many accounts', () => {
  it("take turns, one at a time, their bodies unread meanwhile; another organization's small write is answered; all are then served", async () => {
    const port = await start();
    // Two per writer, one declared and one chunked.
    const large = WRITERS.flatMap((user) => [largeWrite(port, user, false), largeWrite(port, user, true)]);
    await eventually(async () => (await connections()) === large.length);
    await eventually(async () => (await lockWaiters()) >= TURNS);
    const victim = await api(ctx!.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'X',
      host: 'other.chat.example.com',
      form: { subscription_data: JSON.stringify([{ stream_id: ids.C2, property: 'pin_to_top', value: true }]) },
    });
    expect(victim.statusCode).toBe(200);
    expect(victim.body).toBe(OK);
    expect((await subscriptionOf(ctx!, ids.X, ids.C2)).pin_to_top).toBe(true);
    // Only the one with the turn was read and authenticated (without turns: all six, one waiting in the database per writer).
    expect(await authenticated()).toBe(TURNS);
    expect(await lockWaiters()).toBe(TURNS);
    await locker!.query('SELECT pg_advisory_unlock_all()');
    // Waiting, not refused: every one is served.
    for (const response of await Promise.all(large)) expect(response).toEqual({ status: 200, body: OK });
    expect(await authenticated()).toBe(large.length);
    for (const user of WRITERS) expect((await subscriptionOf(ctx!, ids[user], ids.P)).pin_to_top).toBe(true);
  });

  it('a client that leaves while waiting for its turn gives it up: the next large write is served', async () => {
    const port = await start();
    // U's write has the turn and waits in the database; V's waits for the turn.
    const holding = [largeWrite(port, 'U', false), largeWrite(port, 'V', false)];
    await eventually(async () => (await lockWaiters()) === TURNS);
    // Two clients of G wait for a turn with half a body sent, then leave (unread, their leaving is seen once their turn comes,
    // when what they sent is read): with a turn kept by each, no large write would pass again.
    const body = largeBody(true);
    for (let left = 0; left < 2; left++) {
      // The server has its request (not a count of connections: the previous one's close may be seen meanwhile).
      const received = new Promise<void>((resolve) => ctx!.app.server.once('request', () => resolve()));
      const leaving = http.request({
        port,
        host: '127.0.0.1',
        method: 'POST',
        path: PROPERTIES_URL,
        headers: { authorization: auth('G'), 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(body.length) },
      });
      leaving.on('error', () => undefined);
      leaving.write(body.slice(0, body.length / 2));
      await received;
      leaving.destroy();
    }
    await locker!.query('SELECT pg_advisory_unlock_all()');
    for (const response of await Promise.all(holding)) expect(response).toEqual({ status: 200, body: OK });
    expect(await largeWrite(port, 'G', true)).toEqual({ status: 200, body: OK });
    expect((await subscriptionOf(ctx!, ids.G, ids.P)).pin_to_top).toBe(true);
    // The two that left wrote nothing (only the last write got past authentication).
    const { rows } = await sql<{ hits: number }>`SELECT coalesce(sum(cardinality(hits)), 0)::int AS hits FROM rate_limit_logs
      WHERE user_id = ${ids.G}`.execute(ctx!.db);
    expect(rows[0]!.hits).toBe(1);
  });
});
