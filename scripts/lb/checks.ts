import { readFileSync } from 'node:fs';
import http from 'node:http';
import { isDeepStrictEqual } from 'node:util';
import { gunzipSync } from 'node:zlib';
import type { Database } from '../../src/db/database.js';
import { logLines } from '../lib/processes.js';
import type { Instance } from './processes.js';
import { type Client, type Exchange, type LoadUser, VALID_REQUEST_ID, type Writes } from './traffic.js';

/** The checks of the load-balancer test. Each returns the problems it found (empty: it holds). */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

interface ObservedHeaders {
  url: string;
  host?: string;
  'x-request-id'?: string;
  'x-forwarded-for'?: string;
  'x-forwarded-host'?: string;
  'x-forwarded-proto'?: string;
}

const readObservedHeaders = (file: string): ObservedHeaders[] =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as ObservedHeaders);

/** A request with two X-Request-Id headers (fetch would join them into one). */
function sendTwoRequestIds(baseUrl: string, host: string, authorization: string, path: string): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      `${baseUrl}${path}`,
      {
        headers: ['Host', host, 'Authorization', authorization, 'X-Request-Id', 'first-id', 'X-Request-Id', 'second-id'],
      },
      (response) => {
        response.resume();
        response.on('end', () => resolve(response.headers['x-request-id'] as string | undefined));
      },
    );
    request.on('error', reject).end();
  });
}

/** GET `path` with the given Accept-Encoding, straight over http (fetch would decompress and hide it). */
function getRaw(
  baseUrl: string,
  host: string,
  authorization: string,
  path: string,
  acceptEncoding: string,
): Promise<{ status: number; encoding?: string; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      `${baseUrl}${path}`,
      { headers: { host, authorization, 'accept-encoding': acceptEncoding } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () =>
          resolve({ status: response.statusCode ?? 0, encoding: response.headers['content-encoding'], body: Buffer.concat(chunks) }),
        );
      },
    );
    request.on('error', reject).end();
  });
}

/**
 * What the balancer promises, checked one request at a time before the load starts: X-Request-Id
 * forwarded when valid and replaced when not, X-Forwarded-* set by the edge whatever the client
 * sent (as the app receives them), the app's own 413 for a 1.5 MiB body, the app's gzip passed through.
 */
export async function checkEdge(client: Client, user: LoadUser, otherHost: string, observedFile: string): Promise<string[]> {
  const problems: string[] = [];
  const expect = (ok: boolean, what: string) => void (ok || problems.push(what));
  const read = { kind: 'check', path: `/api/v1/users/${user.id}`, authorization: user.authorization };

  const valid = await client.send({ ...read, requestId: 'edge-check.1:valid_id' });
  expect(valid.status === 200 && valid.answerId === 'edge-check.1:valid_id', `a valid X-Request-Id is forwarded: ${JSON.stringify(valid)}`);
  // The app would replace these too: what proves the edge did is the id the app received.
  const receivedIds = () => new Set(readObservedHeaders(observedFile).map((line) => line['x-request-id']));
  const replacedIds: (string | undefined)[] = [];
  for (const invalid of ['bad id', 'x'.repeat(129), '', 'semi;colon']) {
    const replaced = await client.send({ ...read, requestId: invalid });
    expect(
      replaced.status === 200 && UUID.test(replaced.answerId ?? ''),
      `X-Request-Id ${JSON.stringify(invalid)} is replaced by a UUID: ${JSON.stringify(replaced)}`,
    );
    replacedIds.push(replaced.answerId ?? undefined);
  }
  replacedIds.push(await sendTwoRequestIds(client.baseUrl, client.host, user.authorization, read.path));
  const received = receivedIds();
  expect(
    replacedIds.every((id) => UUID.test(id ?? '') && received.has(id)),
    `the app receives the edge's UUIDs ${replacedIds.join(', ')}`,
  );
  expect(!received.has('bad id') && !received.has('first-id'), 'no invalid X-Request-Id reaches the app');

  // The organization comes from X-Forwarded-Host: the edge sets it from Host, not from the client.
  const spoofed = await client.send({
    kind: 'check',
    path: '/api/v1/server_settings',
    requestId: 'edge-check-forwarded',
    headers: { host: otherHost, 'x-forwarded-for': '203.0.113.7', 'x-forwarded-host': 'evil.example', 'x-forwarded-proto': 'https' },
  });
  expect(
    (spoofed.body as { realm_name?: string }).realm_name === 'Other',
    `X-Forwarded-Host follows Host: ${JSON.stringify(spoofed.body)}`,
  );
  const seen = readObservedHeaders(observedFile).find((line) => line['x-request-id'] === 'edge-check-forwarded');
  expect(
    isDeepStrictEqual(seen, {
      url: '/api/v1/server_settings',
      host: otherHost,
      'x-request-id': 'edge-check-forwarded',
      'x-forwarded-for': '127.0.0.1',
      'x-forwarded-host': otherHost,
      'x-forwarded-proto': 'http',
    }),
    `the app receives the edge's X-Forwarded-*, not the client's: ${JSON.stringify(seen)}`,
  );

  const large = await client.send({
    kind: 'check',
    path: '/api/v1/users/me/subscriptions/properties',
    authorization: user.authorization,
    requestId: 'edge-check-413',
    body: `subscription_data=${'a'.repeat(1.5 * 1024 * 1024)}`,
  });
  expect(
    large.status === 413 && isDeepStrictEqual(large.body, { result: 'error', msg: 'Request body too large', code: 'BAD_REQUEST' }),
    `a 1.5 MiB body gets the app's 413: ${large.status} ${JSON.stringify(large.body)}`,
  );

  // The app's gzip passes through the balancer as it is (the instances compress above a low threshold here).
  const plain = await getRaw(client.baseUrl, client.host, user.authorization, '/api/v1/users', 'identity');
  const zipped = await getRaw(client.baseUrl, client.host, user.authorization, '/api/v1/users', 'gzip');
  expect(plain.status === 200 && plain.encoding === undefined, `GET /users without gzip is plain: ${plain.status} ${plain.encoding}`);
  expect(
    zipped.status === 200 &&
      zipped.encoding === 'gzip' &&
      zipped.body.length < plain.body.length &&
      gunzipSync(zipped.body).equals(plain.body),
    `GET /users with gzip arrives gzipped, and decompresses to the plain answer: ${zipped.status} ${zipped.encoding} ${zipped.body.length} vs ${plain.body.length} bytes`,
  );
  return problems;
}

/** Every request that reached an app instance through the balancer carried the edge's headers. */
export function checkObservedHeaders(observedFile: string): { problems: string[]; requests: number } {
  const problems: string[] = [];
  // HAProxy's health checks go straight to the instances.
  const observed = readObservedHeaders(observedFile).filter((line) => line.url !== '/ready');
  for (const line of observed) {
    const ok =
      line['x-forwarded-for'] === '127.0.0.1' &&
      line['x-forwarded-proto'] === 'http' &&
      line['x-forwarded-host'] === line.host &&
      VALID_REQUEST_ID.test(line['x-request-id'] ?? '');
    if (!ok) problems.push(`a request reached the app without the edge's headers: ${JSON.stringify(line)}`);
  }
  return { problems: problems.slice(0, 10), requests: observed.length };
}

interface AccessLine {
  request_id: string;
  method: string;
  path: string;
  status: number;
  retries: string;
  termination: string;
}

/**
 * HAProxy's line of a 413 the app sends on the declared length, before the body has arrived: the
 * app (Fastify) closes the connection after it, HAProxy still uploading the body meets the close
 * ("SD": server side, data phase) and logs no status (-1), though it passed the 413 on, as the
 * client's status says. Which of the close and the logging comes first is a race (seen in CI).
 */
const earlyRefusal = (line: AccessLine, clientStatus: number): boolean =>
  clientStatus === 413 && line.status === -1 && line.termination.startsWith('SD');

/**
 * Every answered request has one line in HAProxy's access log and one or more in the app's (a
 * retried request: the refused attempt and the served one), all with the id the client got back,
 * the same path and the final status. That id is the client's own when valid, else a new UUID.
 */
export function checkLogs(exchanges: Exchange[], accessLog: string[], instances: Instance[]): { problems: string[]; retried: number } {
  const problems: string[] = [];
  const balancerLines = new Map<string, AccessLine[]>();
  for (const line of accessLog) {
    const parsed = JSON.parse(line) as AccessLine;
    balancerLines.set(parsed.request_id, [...(balancerLines.get(parsed.request_id) ?? []), parsed]);
  }
  const appLines = new Map<string, { path: string; statusCode: number }[]>();
  for (const line of instances.flatMap((instance) => logLines(instance))) {
    if (line.msg !== 'request completed') continue;
    const id = line.reqId as string;
    appLines.set(id, [...(appLines.get(id) ?? []), { path: line.path as string, statusCode: line.statusCode as number }]);
  }
  for (const exchange of exchanges) {
    if (exchange.status === 0) continue;
    const id = exchange.answerId ?? '';
    const sentValid = exchange.sentId !== undefined && VALID_REQUEST_ID.test(exchange.sentId);
    if (sentValid ? id !== exchange.sentId : !UUID.test(id))
      problems.push(`request id ${JSON.stringify(exchange.sentId)} answered as ${id}`);
    const inBalancer = balancerLines.get(id) ?? [];
    const inApp = appLines.get(id) ?? [];
    const balancerOk =
      inBalancer.length === 1 &&
      inBalancer[0]!.path === exchange.path &&
      (inBalancer[0]!.status === exchange.status || earlyRefusal(inBalancer[0]!, exchange.status));
    const appOk = inApp.length >= 1 && inApp.every((line) => line.path === exchange.path) && inApp.at(-1)!.statusCode === exchange.status;
    if (!balancerOk || !appOk) {
      problems.push(`${exchange.method} ${exchange.path} ${id}: HAProxy ${JSON.stringify(inBalancer)}, app ${JSON.stringify(inApp)}`);
    }
  }
  const retried = [...balancerLines.values()].flat().filter((line) => line.retries !== '0').length;
  return { problems: problems.slice(0, 10), retried };
}

/** Each accepted write is in the database exactly once, and nothing else the writers sent is. */
export async function checkDatabase(db: Database, users: LoadUser[], writes: Writes[]): Promise<string[]> {
  const problems: string[] = [];
  for (const [index, user] of users.entries()) {
    const accepted = writes[index]!;
    const views = await db
      .selectFrom('navigation_views')
      .select(['fragment', 'name'])
      .where('user_id', '=', user.id)
      .where('fragment', 'like', '%-lb/user/%')
      .orderBy('id')
      .execute();
    if (!isDeepStrictEqual(views, accepted.views)) {
      problems.push(`user ${user.index}: ${accepted.views.length} views accepted, ${views.length} stored (or not the same)`);
    }
    const audit = await db
      .selectFrom('subscription_audit_log')
      .select(['stream_id', 'new_value'])
      .where('acting_user_id', '=', user.id)
      .where('property', '=', 'color')
      .orderBy('id')
      .execute();
    const changes = audit.map((row) => ({ streamId: row.stream_id, color: row.new_value }));
    if (!isDeepStrictEqual(changes, accepted.colors)) {
      problems.push(`user ${user.index}: ${accepted.colors.length} color changes accepted, ${changes.length} audited (or not the same)`);
    }
    const colors = await db.selectFrom('subscriptions').select(['stream_id', 'color']).where('user_id', '=', user.id).execute();
    for (const { stream_id: streamId, color } of colors) {
      const last = accepted.colors.filter((change) => change.streamId === streamId).at(-1);
      if (last && last.color !== color)
        problems.push(`user ${user.index}, channel ${streamId}: color ${color}, last accepted ${last.color}`);
    }
  }
  return problems;
}
