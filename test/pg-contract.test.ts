import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sendTransaction, transactionProgress, type TransactionStatement } from '../src/db/pipelined-transaction.js';
import { batchWritesOfThisTurn } from '../src/db/socket-writes.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';

// What the write path relies on in node-postgres, on a live pipelined client. Documented: pipeline
// mode (`pipeline: true`: queries issued without awaiting go out back to back, each answered on
// its own). Relied on beyond the documentation, each named here so that an upgrade that changes it
// fails this file: a query whose value pg cannot convert fails inside client.query (so the
// transaction ends with ROLLBACK, src/db/pipelined-transaction.ts); Client#processID (the cancel in
// src/db/transactions.ts); the socket under a client (Client#connection.stream, corked by
// src/db/socket-writes.ts and paused by src/db/socket-reads.ts), whose absence only costs speed.

const SOCKET = 'src/db/socket-writes.ts';
const moved = (surface: string, usedBy: string) =>
  `pg's ${surface} (used by ${usedBy}) is not what the write path expects: read the README ("Libraries, and why": the driver layer row)`;

let database: TestDatabase;
let client: pg.Client;
beforeAll(async () => {
  database = await createTestDatabase();
  client = new pg.Client({ connectionString: database.url, pipeline: true });
  await client.connect();
  await client.query('CREATE TEMP TABLE contract_probe (n int)');
});
afterAll(async () => {
  await client.end();
  await database.drop();
});

const xid: TransactionStatement = { text: 'SELECT pg_current_xact_id()::text AS xid', values: [] };
const insert = (n: number): TransactionStatement => ({ text: 'INSERT INTO contract_probe VALUES ($1) RETURNING n', values: [n] });
const probeRows = async () => (await client.query<{ n: number }>('SELECT n FROM contract_probe ORDER BY n')).rows;

describe('pg contract: a transaction in one burst on a pipelined client', () => {
  it("one transaction, one answer per statement in order, BEGIN and COMMIT counted; the socket under the client is corked until the turn's end", async () => {
    const stream = (client as unknown as { connection?: { stream?: unknown } }).connection?.stream as net.Socket | undefined;
    expect(stream, moved('Client#connection.stream (the socket)', SOCKET)).toBeInstanceOf(net.Socket);
    const texts: string[] = [];
    const answer = sendTransaction(client, [xid, insert(1), xid], undefined, (text) => texts.push(text));
    // Corked: every message of the transaction is in the socket's buffer, none written yet.
    expect(stream!.writableCorked, moved('Client#connection.stream.cork', SOCKET)).toBe(1);
    expect(stream!.writableLength, moved('Client#connection.stream (the socket pg writes to)', SOCKET)).toBeGreaterThan(0);
    const [first, inserted, last] = (await answer) as [{ xid: string }[], { n: number }[], { xid: string }[]];
    expect(stream!.writableCorked).toBe(0);
    expect(inserted).toEqual([{ n: 1 }]);
    expect(first[0]!.xid).toBe(last[0]!.xid);
    expect(texts).toEqual(['BEGIN', xid.text, insert(1).text, xid.text, 'COMMIT']);
    expect(await probeRows()).toEqual([{ n: 1 }]);
    await client.query('DELETE FROM contract_probe');
  });

  it('a failing statement fails the transaction with its own error and index; the ones after it are refused (25P02), nothing is kept, the connection serves on', async () => {
    const after = client.query('SELECT 1 AS n'); // issued behind the transaction: answered after it
    const progress = transactionProgress();
    await expect(
      sendTransaction(client, [insert(1), { text: 'SELECT 1 / $1::int', values: [0] }, insert(2)], progress),
    ).rejects.toMatchObject({
      code: '22012',
    });
    expect(progress).toEqual({ completed: 1, rolledBack: true, unsendable: false });
    expect((await after).rows).toEqual([{ n: 1 }]);
    expect(await probeRows()).toEqual([]);
    expect(client.getTransactionStatus(), 'the COMMIT answered ROLLBACK: no transaction left open').toBe('I');
    // Issued directly, without awaiting: what pipeline mode answers inside an aborted transaction.
    const answers = await Promise.allSettled([
      client.query('BEGIN'),
      client.query('SELECT 1 / $1::int', [0]),
      client.query('SELECT 1'),
      client.query('COMMIT'),
    ]);
    expect(answers.map((a) => (a.status === 'fulfilled' ? a.value.command : (a.reason as { code: string }).code))).toEqual([
      'BEGIN',
      '22012',
      '25P02',
      'ROLLBACK',
    ]);
  });

  it('named statements: prepared once per connection, also when two transactions of one turn first use one', async () => {
    const a = { name: 'contract_a', text: 'SELECT $1::int AS n' };
    const b = { name: 'contract_b', text: 'SELECT $1::int + 1 AS n' };
    const [first, second] = await Promise.all([
      sendTransaction(client, [
        { ...a, values: [2] },
        { ...b, values: [2] },
      ]),
      sendTransaction(client, [{ ...b, values: [5] }]),
    ]);
    expect(first).toEqual([[{ n: 2 }], [{ n: 3 }]]);
    expect(second).toEqual([[{ n: 6 }]]);
    expect((await client.query({ ...b, values: [9] })).rows).toEqual([{ n: 10 }]);
    const prepared = await client.query<{ name: string }>(
      "SELECT name FROM pg_prepared_statements WHERE name LIKE 'contract\\_%' ORDER BY name",
    );
    expect(prepared.rows).toEqual([{ name: a.name }, { name: b.name }]);
  });

  it('a value pg cannot convert fails its query inside client.query: ROLLBACK instead of COMMIT, the statements after it never issued', async () => {
    const circular: Record<string, unknown> = {};
    circular['self'] = circular;
    const progress = transactionProgress();
    const texts: string[] = [];
    const outcome = sendTransaction(client, [insert(1), { text: 'SELECT $1::jsonb', values: [circular] }, insert(2)], progress, (text) =>
      texts.push(text),
    );
    await expect(
      outcome,
      moved('Query#prepare (a Bind that throws answers the query at once)', 'src/db/pipelined-transaction.ts'),
    ).rejects.toBeInstanceOf(TypeError);
    expect(progress).toEqual({ completed: 1, rolledBack: true, unsendable: true });
    expect(texts).toEqual(['BEGIN', insert(1).text, 'SELECT $1::jsonb', 'ROLLBACK']);
    expect(await probeRows()).toEqual([]);
    expect((await client.query('SELECT 2 AS n')).rows).toEqual([{ n: 2 }]);
  });

  it("Client#processID is the backend's pid (the cancel of a transaction whose client went away)", async () => {
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    expect((client as unknown as { processID?: number }).processID, moved('Client#processID', 'src/db/transactions.ts (cancel)')).toBe(
      rows[0]!.pid,
    );
  });

  it("a pool's client is pipelined too (a transaction on a connection of its own)", async () => {
    const pooled = await database.pool.connect();
    try {
      expect(pooled.pipeline).toBe(true);
      batchWritesOfThisTurn(pooled);
      expect(
        await sendTransaction(pooled, [xid, xid]).then((rows) => new Set(rows.map((r) => (r as { xid: string }[])[0]!.xid)).size),
      ).toBe(1);
    } finally {
      pooled.release();
    }
  });
});
