import { type AddressInfo, createServer, type Socket } from 'node:net';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { buildApp } from '../src/app.js';
import { createDatabase } from '../src/db/database.js';
import { PipelinedConnections, type PipelinedConnectionsOptions } from '../src/db/pipelined-connections.js';
import { DatabaseUnavailable, isDatabaseUnavailable } from '../src/db/errors.js';
import { api, createTestContext } from './helpers/app.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';
import { ids } from './helpers/fixture.js';
import { waitFor } from './helpers/wait.js';

let database: TestDatabase;
const opened: PipelinedConnections[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
});
afterEach(async () => {
  await Promise.all(opened.splice(0).map((lanes) => lanes.end()));
});
afterAll(async () => {
  await database.drop();
});

function pipelined(options: Partial<PipelinedConnectionsOptions> = {}): PipelinedConnections {
  const lanes = new PipelinedConnections({
    connectionString: database.url,
    connections: 1,
    connectTimeoutMs: 2000,
    statementTimeoutMs: 0,
    keepAliveInitialDelayMs: 10_000,
    types: pg.types,
    ...options,
  });
  opened.push(lanes);
  return lanes;
}

const backendPid = async (lanes: PipelinedConnections) =>
  (await lanes.run<{ pid: number }>({ text: 'SELECT pg_backend_pid() AS pid' }, []))[0]!.pid;

describe('PipelinedConnections', () => {
  it('answers concurrent statements each with its own rows, on no more connections than configured', async () => {
    const lanes = pipelined({ connections: 2 });
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        lanes.run<{ n: number; pid: number }>({ text: 'SELECT $1::int AS n, pg_backend_pid() AS pid' }, [i]),
      ),
    );
    expect(answers.map((rows) => rows.map((row) => row.n))).toEqual(Array.from({ length: 200 }, (_, i) => [i]));
    expect(new Set(answers.map((rows) => rows[0]!.pid)).size).toBe(2);
  });

  it('a failing statement fails alone: the statements pipelined around it are answered', async () => {
    const lanes = pipelined();
    const divide = (divisor: number) => lanes.run<{ q: number }>({ text: 'SELECT 6 / $1::int AS q' }, [divisor]);
    const [before, failed, after] = await Promise.allSettled([divide(2), divide(0), divide(3)]);
    expect(before).toEqual({ status: 'fulfilled', value: [{ q: 3 }] });
    expect(failed).toMatchObject({ status: 'rejected', reason: { code: '22012' } }); // division_by_zero
    expect(after).toEqual({ status: 'fulfilled', value: [{ q: 2 }] });
    expect(await divide(1)).toEqual([{ q: 6 }]);
  });

  it('a named statement is prepared once per connection, also when its first executions are pipelined together', async () => {
    const lanes = pipelined();
    const text = 'SELECT $1::int + 1 AS next';
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => lanes.run<{ next: number }>({ name: 'pipelined_probe', text }, [i])),
    );
    expect(answers).toEqual(Array.from({ length: 20 }, (_, i) => [{ next: i + 1 }]));
    const prepared = await lanes.run<{ statement: string }>(
      { text: "SELECT statement FROM pg_prepared_statements WHERE name = 'pipelined_probe'" },
      [],
    );
    expect(prepared).toEqual([{ statement: text }]);
  });

  it('a connection the server drops is reported, replaced on the next statement, and never crashes the process', async () => {
    const idleErrors: Error[] = [];
    const lanes = pipelined({ onIdleError: (error) => idleErrors.push(error) });
    const first = await backendPid(lanes);
    await sql`SELECT pg_terminate_backend(${first})`.execute(database.db);
    await waitFor(() => expect(idleErrors).toHaveLength(1));
    expect(isDatabaseUnavailable(idleErrors[0])).toBe(true);
    const second = await backendPid(lanes);
    expect(second).not.toBe(first);
    expect(await backendPid(lanes)).toBe(second);
  });

  it('statements in flight on a dropped connection fail as unavailable; later ones succeed', async () => {
    const lanes = pipelined();
    const pid = await backendPid(lanes);
    // Settled from the start: the connection's errors may arrive before the terminate statement returns.
    const outcomes = Promise.allSettled([lanes.run({ text: 'SELECT pg_sleep(5)' }, []), lanes.run({ text: 'SELECT 1 AS one' }, [])]);
    await waitFor(async () => {
      const { rows } = await sql<{
        n: number;
      }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ${pid} AND query LIKE '%pg_sleep%'`.execute(database.db);
      expect(rows[0]!.n).toBe(1);
    });
    await sql`SELECT pg_terminate_backend(${pid})`.execute(database.db);
    for (const outcome of await outcomes) {
      expect(outcome.status).toBe('rejected');
      expect(isDatabaseUnavailable((outcome as PromiseRejectedResult).reason)).toBe(true);
    }
    expect(await lanes.run({ text: 'SELECT 2 AS two' }, [])).toEqual([{ two: 2 }]);
  });

  it("a statement running past the connections' statement_timeout fails as unavailable; the statements queued behind it are answered", async () => {
    const lanes = pipelined({ statementTimeoutMs: 200 });
    // Cancelled (57014), not finished after its 5 s: no clock needed.
    const [slow, next] = await Promise.allSettled([
      lanes.run({ text: 'SELECT pg_sleep(5)' }, []),
      lanes.run({ text: 'SELECT 7 AS seven' }, []),
    ]);
    expect(slow).toMatchObject({ status: 'rejected', reason: { code: '57014' } }); // query_canceled
    expect(isDatabaseUnavailable((slow as PromiseRejectedResult).reason)).toBe(true);
    expect(next).toEqual({ status: 'fulfilled', value: [{ seven: 7 }] });
  });

  it('a server that cannot be reached fails the statements waiting for the connection as unavailable', async () => {
    const lanes = pipelined({ connectionString: 'postgres://nobody@127.0.0.1:1/none', connections: 2 });
    const outcomes = await Promise.allSettled([lanes.run({ text: 'SELECT 1' }, []), lanes.run({ text: 'SELECT 2' }, [])]);
    for (const outcome of outcomes) {
      expect(outcome.status).toBe('rejected');
      expect(isDatabaseUnavailable((outcome as PromiseRejectedResult).reason)).toBe(true);
    }
  });

  it('a server that accepts but never answers fails the waiting statements as unavailable after the connect timeout', async () => {
    const sockets: Socket[] = [];
    const silent = createServer((socket) => void sockets.push(socket)); // accepts, never speaks
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = silent.address() as AddressInfo;
      const lanes = pipelined({ connectionString: `postgres://nobody@127.0.0.1:${port}/none`, connectTimeoutMs: 200 });
      const failure = await lanes.run({ text: 'SELECT 1' }, []).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(DatabaseUnavailable);
      expect(((failure as Error).cause as Error).message).toBe('timeout expired'); // pg's own connect timeout, not a hang
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('a prepared statement outdated by a schema change fails once; the next execution prepares it afresh on a new connection', async () => {
    await sql`CREATE TABLE pipelined_probe (a int)`.execute(database.db);
    await sql`INSERT INTO pipelined_probe VALUES (1)`.execute(database.db);
    const lanes = pipelined();
    const all = () => lanes.run<Record<string, number | null>>({ name: 'pipelined_probe_all', text: 'SELECT * FROM pipelined_probe' }, []);
    const first = await backendPid(lanes);
    expect(await all()).toEqual([{ a: 1 }]);
    await sql`ALTER TABLE pipelined_probe ADD COLUMN b int`.execute(database.db);
    await expect(all()).rejects.toMatchObject({ code: '0A000' }); // cached plan must not change result type
    expect(await all()).toEqual([{ a: 1, b: null }]);
    expect(await backendPid(lanes)).not.toBe(first);
  });

  it('a transaction that finds a named statement unprepared (26000: the one that sent its Parse failed first) is sent again once, on another connection, and commits', async () => {
    const lanes = pipelined();
    const named = { name: 'pipelined_test_shared', text: 'SELECT $1::int + 1 AS n' };
    const pid = await backendPid(lanes);
    // The first sends the statement's Parse after a failure: refused (25P02), never prepared. The
    // second, in flight on the same connection, skips the Parse pg believes sent.
    const first = lanes.transaction([
      { text: 'SELECT 1 / 0', values: [] },
      { ...named, values: [1] },
    ]);
    const second = lanes.transaction([
      { ...named, values: [2] },
      { text: 'SELECT pg_backend_pid() AS pid', values: [] },
    ]);
    await expect(first).rejects.toMatchObject({ code: '22012' });
    const [rows, [backend]] = (await second) as [unknown[], { pid: number }[]];
    expect(rows).toEqual([{ n: 3 }]);
    expect(backend!.pid).not.toBe(pid);
  });

  it('after end, statements fail as unavailable and the connections are closed', async () => {
    const lanes = pipelined({ connections: 2 });
    const pids = new Set(await Promise.all([backendPid(lanes), backendPid(lanes), backendPid(lanes)]));
    await lanes.end();
    const ended = lanes.run({ text: 'SELECT 1' }, []);
    await expect(ended).rejects.toThrow();
    expect(isDatabaseUnavailable(await ended.catch((error: unknown) => error))).toBe(true);
    expect(pids.size).toBe(2);
    await waitFor(async () => {
      const { rows } = await sql<{
        n: number;
      }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ANY(${[...pids]}::int[])`.execute(database.db);
      expect(rows).toEqual([{ n: 0 }]);
    });
  });
});

describe('the per-request statements of the app go through the short-statement connections', () => {
  it('GET /users/{id} is answered while every pool connection is taken; a read through the pool is not', async () => {
    const ctx = await createTestContext();
    const handle = createDatabase(ctx.database.url, { poolMax: 1, connectTimeoutMs: 500 });
    const app = await buildApp({ config: ctx.config, ...handle });
    const held = await handle.pool.connect();
    try {
      const user = await api(app, { url: `/api/v1/users/${ids.U}`, as: 'V' });
      expect(user.statusCode).toBe(200);
      expect(JSON.parse(user.body).user).toMatchObject({ user_id: ids.U, full_name: 'U Member' });
      // The user list is read through the pool: it waits for a connection, then gives up.
      const list = await api(app, { url: '/api/v1/users', as: 'V' });
      expect(list.statusCode).toBe(503);
    } finally {
      held.release();
      await app.close();
      await handle.close();
      await ctx.close();
    }
  });
});
