import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GroupStatement, ImplicitTransaction as Transaction } from '../src/db/implicit-transaction.js';
import { batchWritesOfThisTurn } from '../src/db/socket-writes.js';
import { createTestDatabase, type TestDatabase } from './helpers/database.js';

// The contract between the write path and node-postgres's private internals: every surface that
// src/db/implicit-transaction.ts, src/db/socket-writes.ts, src/db/pipelined-connections.ts and
// src/db/user-transactions.ts reach past pg's public API, asserted on a live pipelined client.
// A pg or pg-protocol release that moves one of them fails here, naming it, instead of failing
// every write at once. scripts/pg-upstream.sh runs this file against the newest pg 8.x with
// PG_CONTRACT_ANY_VERSION=1 (surfaces checked, the pin not).

const READ_FIRST =
  'before upgrading pg or pg-protocol, read the README ("Libraries, and why": the driver layer row) and ' +
  'src/db/implicit-transaction.ts, src/db/socket-writes.ts, src/db/pipelined-connections.ts';
const IMPLICIT = 'src/db/implicit-transaction.ts';
const SOCKET = 'src/db/socket-writes.ts';

/** The failure message of a surface: what moved, who uses it, what to read. */
const moved = (surface: string, usedBy: string) => `pg's ${surface} (used by ${usedBy}) is not what the write path expects: ${READ_FIRST}`;

// Loaded here rather than imported: the module deep-imports pg/lib/utils.js as it loads, and a pg
// that moved it must fail with the message above, not a bare resolution error.
const { ImplicitTransaction, sendImplicitTransaction } = await import('../src/db/implicit-transaction.js').catch((error: unknown) => {
  throw new Error(`${moved('pg/lib/utils.js (deep-imported as the module loads)', IMPLICIT)}: ${String(error)}`, { cause: error });
});

/** What the layer reads of node-postgres's Connection (client.connection), untyped on purpose: the test checks each. */
type ConnectionInternals = Record<string, unknown> & { stream?: Record<string, unknown> };

function connectionOf(client: pg.ClientBase): ConnectionInternals {
  const connection = (client as unknown as { connection?: unknown }).connection;
  expect(connection, moved('Client#connection', `${IMPLICIT}, ${SOCKET}`)).toBeTypeOf('object');
  return connection as ConnectionInternals;
}

/** The statement bookkeeping maps of a connection (name → text). */
function bookkeeping(client: pg.ClientBase): { parsed: Record<string, unknown>; submitted: Record<string, unknown> } {
  const connection = connectionOf(client);
  for (const map of ['parsedStatements', 'submittedNamedStatements']) {
    expect(connection[map], moved(`Connection#${map} (a plain name → text object)`, IMPLICIT)).toBeTypeOf('object');
  }
  return {
    parsed: connection['parsedStatements'] as Record<string, unknown>,
    submitted: connection['submittedNamedStatements'] as Record<string, unknown>,
  };
}

/** Long enough for any group here on a slow machine; a pg that loses a group's answer hangs instead. */
const ANSWER_MS = 5000;

/** Sends a group; a failure is reported as the contract's, with what pg said. */
async function group(client: pg.ClientBase, statements: readonly GroupStatement[]): Promise<{ rows: unknown[][]; query: Transaction }> {
  const sent = sendImplicitTransaction(client, statements);
  let timer: NodeJS.Timeout | undefined;
  const unanswered = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${ANSWER_MS} ms`)), ANSWER_MS);
  });
  try {
    return { rows: await Promise.race([sent.rows, unanswered]), query: sent.query };
  } catch (error) {
    throw new Error(`${moved('pipelined Query subclass protocol (Parse/Bind/Describe/Execute/Sync)', IMPLICIT)}: ${String(error)}`, {
      cause: error,
    });
  } finally {
    clearTimeout(timer);
  }
}

const requireHere = createRequire(import.meta.url);

/**
 * The version of package `name` as `from` resolves it (pg-protocol: as pg does), read from its
 * package.json, found by walking up from its entry point: not every release exports package.json.
 */
function installedVersion(name: string, from: NodeJS.Require): string {
  let dir = dirname(from.resolve(name));
  for (;;) {
    try {
      const found = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version: string };
      if (found.name === name) return found.version;
    } catch {
      // no package.json here: keep walking up
    }
    if (dirname(dir) === dir) throw new Error(`${name}: no package.json above its entry point`);
    dir = dirname(dir);
  }
}

describe('pg contract: versions', () => {
  const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    dependencies: Record<string, string>;
    overrides?: Record<string, string>;
  };
  const installedPg = installedVersion('pg', requireHere);
  const installedProtocol = installedVersion('pg-protocol', createRequire(requireHere.resolve('pg')));
  const anyVersion = process.env['PG_CONTRACT_ANY_VERSION'] === '1';

  // One test either way (no test skipped in the ordinary run): the pin, or, for the upstream check
  // (PG_CONTRACT_ANY_VERSION=1, scripts/pg-upstream.sh), the versions whose surfaces the other tests check.
  it('the installed pg and pg-protocol are exactly the pinned ones (package.json: dependencies, overrides)', () => {
    if (anyVersion) {
      console.info(
        `pg contract: checking pg ${installedPg}, pg-protocol ${installedProtocol} (pinned: pg ${manifest.dependencies['pg']}, pg-protocol ${manifest.overrides?.['pg-protocol']})`,
      );
      expect(installedPg).toMatch(/^8\./);
      return;
    }
    expect(installedPg, `installed pg ${installedPg} is not the pinned one: ${READ_FIRST}`).toBe(manifest.dependencies['pg']);
    expect(
      installedProtocol,
      `installed pg-protocol ${installedProtocol} is not the pinned one (package.json overrides): ${READ_FIRST}`,
    ).toBe(manifest.overrides?.['pg-protocol']);
  });
});

describe('pg contract: modules', () => {
  // The deep import of implicit-transaction.ts, as it does it.
  const utils = ((): { prepareValue?: unknown } => {
    try {
      return requireHere('pg/lib/utils.js') as { prepareValue?: unknown };
    } catch {
      return {}; // reported by the first test
    }
  })();

  it("pg/lib/utils.js exports prepareValue, and Query's prototype has the methods the subclass overrides or wraps", () => {
    expect(utils.prepareValue, moved('pg/lib/utils.js prepareValue', IMPLICIT)).toBeTypeOf('function');
    const prototype = pg.Query.prototype as unknown as Record<string, unknown>;
    for (const method of [
      'submit',
      'handleCommandComplete',
      'handleRowDescription',
      'handleDataRow',
      'handleError',
      'handleReadyForQuery',
    ]) {
      expect(prototype[method], moved(`Query.prototype.${method}`, IMPLICIT)).toBeTypeOf('function');
    }
    // The subclass's own submit and its wrapped handleCommandComplete are set on the instance.
    const query = new ImplicitTransaction([{ text: 'SELECT 1', values: [] }], () => undefined);
    expect(query, moved('Query (the class pipeline mode admits)', IMPLICIT)).toBeInstanceOf(pg.Query);
    expect(Object.hasOwn(query, 'handleCommandComplete'), moved('Query#handleCommandComplete', IMPLICIT)).toBe(true);
  });

  it('prepareValue converts each kind of value the write path binds, exactly', () => {
    const prepareValue = utils.prepareValue as (value: unknown) => unknown;
    const bytes = Buffer.from([0, 1, 255]);
    const cases: [string, unknown, unknown][] = [
      ['null', null, null],
      ['undefined', undefined, null],
      ['an integer', 42, '42'],
      ['a fraction', -1.5, '-1.5'],
      ['a boolean', true, 'true'],
      ['a string', 'é "q" \\', 'é "q" \\'],
      ['a JSON text', '[{"a":1}]', '[{"a":1}]'],
      ['an array of numbers', [1, 2, 3], '{"1","2","3"}'],
      ['an array of strings with NULL', ['a"b', 'c\\d', 'e,f', null], '{"a\\"b","c\\\\d","e,f",NULL}'],
      [
        'a nested array',
        [
          [1, 2],
          [3, 4],
        ],
        '{{"1","2"},{"3","4"}}',
      ],
      ['an object (as JSON)', { a: [1, 'x'] }, '{"a":[1,"x"]}'],
      ['a Buffer (as it is)', bytes, bytes],
    ];
    for (const [kind, value, expected] of cases)
      expect(prepareValue(value), moved(`prepareValue of ${kind}`, IMPLICIT)).toStrictEqual(expected);
    const date = new Date('2026-01-02T03:04:05.678Z');
    const dateText = prepareValue(date);
    expect(dateText, moved('prepareValue of a Date', IMPLICIT)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d$/);
    expect(Date.parse(dateText as string), moved('prepareValue of a Date', IMPLICIT)).toBe(date.getTime());
    // sendImplicitTransaction relies on this throwing before anything is written.
    const circular: Record<string, unknown> = {};
    circular['self'] = circular;
    expect(() => prepareValue(circular), moved('prepareValue of a circular object (must throw)', IMPLICIT)).toThrow();
  });
});

describe('pg contract: a live pipelined client', () => {
  let database: TestDatabase;
  let client: pg.Client;
  beforeAll(async () => {
    database = await createTestDatabase();
    client = new pg.Client({ connectionString: database.url, pipeline: true });
    await client.connect();
  });
  afterAll(async () => {
    await client.end();
    await database.drop();
  });

  it('client.connection has the protocol writers, the bookkeeping maps and a corkable socket; client.processID is the backend pid', async () => {
    const connection = connectionOf(client);
    for (const writer of ['parse', 'bind', 'describe', 'execute', 'sync']) {
      expect(connection[writer], moved(`Connection#${writer}`, IMPLICIT)).toBeTypeOf('function');
    }
    for (const map of ['parsedStatements', 'submittedNamedStatements']) {
      expect(connection[map], moved(`Connection#${map} (a plain name → text object)`, IMPLICIT)).toStrictEqual({});
    }
    expect(connection.stream, moved('Connection#stream (the socket)', `${IMPLICIT}, ${SOCKET}`)).toBeInstanceOf(net.Socket);
    expect(connection.stream?.['cork'], moved('Connection#stream.cork', SOCKET)).toBeTypeOf('function');
    expect(connection.stream?.['uncork'], moved('Connection#stream.uncork', SOCKET)).toBeTypeOf('function');
    expect(client.pipeline, moved('Client#pipeline', 'src/db/pipelined-connections.ts')).toBe(true);
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    expect(
      (client as unknown as { processID?: unknown }).processID,
      moved('Client#processID', 'src/db/user-transactions.ts (cancel)'),
    ).toBe(rows[0]!.pid);
  });

  it('pipeline mode admits the Query subclass; N statements under one Sync answer N results, in order, from one transaction', async () => {
    const xid = { text: 'SELECT pg_current_xact_id()::text AS xid, $1::int AS n' };
    const { rows, query } = await group(
      client,
      [0, 1, 2].map((n) => ({ ...xid, values: [n] })),
    );
    expect(
      rows.map((row) => (row as { n: number }[]).map((r) => r.n)),
      moved('several results of one Query (one per statement, in order)', IMPLICIT),
    ).toEqual([[0], [1], [2]]);
    const xids = new Set(rows.map((row) => (row as { xid: string }[])[0]!.xid));
    expect(xids.size, moved('one Sync for the statements of a group: one implicit transaction', IMPLICIT)).toBe(1);
    expect(query.completed, moved('Query#handleCommandComplete called once per statement', IMPLICIT)).toBe(3);
    expect(query.connectionSuspect).toBe(false);
    // One statement alone: pg answers one result, not an array of one.
    expect((await group(client, [{ text: 'SELECT 7 AS n', values: [] }])).rows).toEqual([[{ n: 7 }]]);
  });

  it('a statement that fails rolls back the group, skips the rest, and is counted; the connection serves on', async () => {
    await client.query('CREATE TEMP TABLE contract_probe (n int)');
    const insert = (n: number): GroupStatement => ({ text: 'INSERT INTO contract_probe VALUES ($1)', values: [n] });
    const sent = sendImplicitTransaction(client, [insert(1), { text: 'SELECT 1 / $1::int', values: [0] }, insert(2)]);
    await expect(sent.rows, moved('the error of a statement in a group', IMPLICIT)).rejects.toMatchObject({ code: '22012' });
    expect(sent.query.completed, moved('Query#handleCommandComplete (the index of the failed statement)', IMPLICIT)).toBe(1);
    expect(sent.query.connectionSuspect).toBe(false);
    const { rows } = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM contract_probe');
    expect(rows, moved('one Sync for a group: its statements roll back together', IMPLICIT)).toEqual([{ n: 0 }]);
  });

  it("named statements: the group and pg's own queries share one bookkeeping (parsedStatements, submittedNamedStatements)", async () => {
    const a = { name: 'contract_a', text: 'SELECT $1::int AS n' };
    const b = { name: 'contract_b', text: 'SELECT $1::int + 1 AS n' };
    const maps = bookkeeping(client);
    // Prepared by pg's own Query: recorded when parsed, so the group must not Parse it again (42P05).
    await client.query({ ...a, values: [1] });
    expect(maps.parsed[a.name], moved('Connection#parsedStatements (pg records its own Parse)', IMPLICIT)).toBe(a.text);
    expect(maps.submitted[a.name], moved('Connection#submittedNamedStatements (cleared once parsed)', IMPLICIT)).toBeUndefined();
    // b is new: two groups in one turn, the second sent before the first's Parse is answered.
    const [first, second] = await Promise.all([
      group(client, [
        { ...a, values: [2] },
        { ...b, values: [2] },
      ]),
      group(client, [{ ...b, values: [5] }]),
    ]);
    expect(first.rows).toEqual([[{ n: 2 }], [{ n: 3 }]]);
    expect(second.rows).toEqual([[{ n: 6 }]]);
    expect(maps.parsed[b.name], moved('Connection#parsedStatements (the group records its Parse)', IMPLICIT)).toBe(b.text);
    expect(maps.submitted[b.name], moved('Connection#submittedNamedStatements', IMPLICIT)).toBeUndefined();
    // pg's own Query now skips the Parse of b.
    expect((await client.query({ ...b, values: [9] })).rows, moved('Query#hasBeenParsed reads parsedStatements', IMPLICIT)).toEqual([
      { n: 10 },
    ]);
    const prepared = await client.query<{ name: string }>(
      "SELECT name FROM pg_prepared_statements WHERE name LIKE 'contract\\_%' ORDER BY name",
    );
    expect(prepared.rows).toEqual([{ name: a.name }, { name: b.name }]);
  });

  it('a failed Parse marks the group suspect and leaves no bookkeeping of its statement', async () => {
    const maps = bookkeeping(client);
    const sent = sendImplicitTransaction(client, [{ name: 'contract_bad', text: 'SELEC 1', values: [] }]);
    await expect(sent.rows).rejects.toMatchObject({ code: '42601' });
    expect(sent.query.connectionSuspect, moved('the Query callback on a failed Parse', IMPLICIT)).toBe(true);
    expect(maps.parsed['contract_bad'], moved('Connection#parsedStatements', IMPLICIT)).toBeUndefined();
    expect(maps.submitted['contract_bad'], moved('Connection#submittedNamedStatements', IMPLICIT)).toBeUndefined();
    expect((await group(client, [{ text: 'SELECT 1 AS n', values: [] }])).rows).toEqual([[{ n: 1 }]]);
  });

  it('the values prepareValue converted arrive as PostgreSQL reads them (Bind with valueMapper)', async () => {
    const date = new Date('2026-01-02T03:04:05.678Z');
    const { rows } = await group(client, [
      {
        text: 'SELECT $1::int[] AS a, $2::text[] AS b, $3::jsonb AS c, $4::timestamptz AS d, $5::bool AS e, $6::text AS f, $7::bytea AS g, $8::float8 AS h',
        values: [[1, 2], ['x"y', 'z\\w', null], { k: ['v'] }, date, false, null, Buffer.from([0, 255]), -1.5],
      },
    ]);
    expect(rows, moved('Connection#bind with valueMapper, after prepareValue', IMPLICIT)).toEqual([
      [{ a: [1, 2], b: ['x"y', 'z\\w', null], c: { k: ['v'] }, d: date, e: false, f: null, g: Buffer.from([0, 255]), h: -1.5 }],
    ]);
  });

  it('corking client.connection.stream holds the writes of the turn; they leave at setImmediate', async () => {
    const stream = connectionOf(client).stream as unknown as net.Socket;
    batchWritesOfThisTurn(client);
    expect(stream.writableCorked, moved('Connection#stream (the socket batchWritesOfThisTurn corks)', SOCKET)).toBe(1);
    const answer = client.query('SELECT 1 AS n');
    // Written to the corked socket: held in its buffer, not sent.
    expect(stream.writableLength, moved('Connection#stream (the socket pg writes to)', SOCKET)).toBeGreaterThan(0);
    expect((await answer).rows).toEqual([{ n: 1 }]);
    expect(stream.writableCorked).toBe(0);
  });

  it("a pool's pipelined client takes a group too (user-transactions' own connection)", async () => {
    const pooled = await database.pool.connect();
    try {
      expect(pooled.pipeline, moved('Pool config pipeline: true reaching its clients', 'src/db/database.ts')).toBe(true);
      expect(
        (
          await group(pooled, [
            { text: 'SELECT 1 AS n', values: [] },
            { text: 'SELECT 2 AS n', values: [] },
          ])
        ).rows,
      ).toEqual([[{ n: 1 }], [{ n: 2 }]]);
    } finally {
      pooled.release();
    }
  });
});
