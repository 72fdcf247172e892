import type net from 'node:net';
import { describe, expect, it } from 'vitest';
import { api, createTestContext, multipart, useTestContext } from './helpers/app.js';
import { badQueueBody, errorBody } from './helpers/envelope.js';
import { auth, ids } from './helpers/fixture.js';
import { rawPost } from './helpers/http.js';
import { pinP, pinToTopOfP, PROPERTIES_URL } from './helpers/subscriptions.js';

// Bounds on the work one request can cause (docs/api.md §1.9, docs/api.md §3.2, docs/api.md §3.12, O12; docs/api.md §4 row 31): form fields
// counted while the body arrives, list lengths, and live queues per user. Each refusal changes nothing.

const TOO_MANY_FIELDS = errorBody('Too many fields in request body');

/** `count` extra fields x0…x(count-1): sorted as ignored_parameters_unsupported reports them. */
const padding = (count: number) => Array.from({ length: count }, (_, i) => `x${i}`);

describe('form fields: at most 1,000 in a body, counted as it arrives', () => {
  const ctx = useTestContext(createTestContext);

  it('urlencoded: 1,000 fields are read (999 reported as ignored); 1,001 are 400 and change nothing', async () => {
    const fields = (extra: number): [string, string][] => [
      ['subscription_data', pinP],
      ...padding(extra).map((name): [string, string] => [name, '']),
    ];
    const refused = await api(ctx.app, { method: 'POST', url: PROPERTIES_URL, as: 'U', form: fields(1000) });
    expect(refused.statusCode).toBe(400);
    expect(refused.body).toBe(TOO_MANY_FIELDS);
    expect(await pinToTopOfP(ctx)).toBe(false);

    const accepted = await api(ctx.app, { method: 'POST', url: PROPERTIES_URL, as: 'U', form: fields(999) });
    expect(accepted.statusCode).toBe(200);
    expect(JSON.parse(accepted.body)).toEqual({ result: 'success', msg: '', ignored_parameters_unsupported: padding(999).sort() });
    expect(await pinToTopOfP(ctx)).toBe(true);
  });

  it('multipart: 1,000 parts are read, file parts included; 1,001 are 400 and change nothing', async () => {
    const extra = (count: number) => Object.fromEntries(padding(count).map((name) => [name, 'v']));
    const file = { name: 'upload', filename: 'a.bin', content: 'bytes' };
    const refused = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'U',
      ...multipart({ subscription_data: pinP, ...extra(999) }, file),
    });
    expect(refused.statusCode).toBe(400);
    expect(refused.body).toBe(TOO_MANY_FIELDS);
    expect(await pinToTopOfP(ctx)).toBe(false);

    const accepted = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'U',
      ...multipart({ subscription_data: pinP, ...extra(998) }, file),
    });
    expect(accepted.statusCode).toBe(200);
    expect(await pinToTopOfP(ctx)).toBe(true);
  });

  it('is checked while reading the body, before the credentials: no credentials, or a body that never ends, still get the 400', async () => {
    const form = new URLSearchParams([
      ['subscription_data', pinP],
      ...padding(1000).map((name): [string, string] => [name, '']),
    ]).toString();
    const anonymous = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      payload: form,
    });
    expect(anonymous.statusCode).toBe(400);
    expect(anonymous.body).toBe(TOO_MANY_FIELDS);

    // The first chunk already holds 1,001 fields; the rest of the declared body never comes.
    await ctx.app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = ctx.app.server.address() as net.AddressInfo;
    const answer = await rawPost({
      port,
      path: PROPERTIES_URL,
      chunks: [form],
      end: false,
      headers: {
        host: 'chat.example.com',
        authorization: auth('U'),
        'content-type': 'application/x-www-form-urlencoded',
        'content-length': String(form.length + 100_000),
      },
    });
    expect(answer).toEqual({ status: 400, body: TOO_MANY_FIELDS });
    expect(await pinToTopOfP(ctx)).toBe(false);
  });
});

describe('list lengths', () => {
  const ctx = useTestContext(createTestContext, 'all');

  it('subscription_data: at most 10,000 entries, checked before any entry', async () => {
    const entries = (count: number) => Array.from({ length: count }, () => ({ stream_id: ids.P, property: 'pin_to_top', value: true }));
    // A bad first entry does not matter: the length is checked first.
    const tooMany = [{ stream_id: ids.P, property: 'nope', value: 1 }, ...entries(10_000)];
    const refused = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'U',
      ...multipart({ subscription_data: JSON.stringify(tooMany) }),
    });
    expect(refused.statusCode).toBe(400);
    expect(refused.body).toBe(errorBody('subscription_data is too long (limit: 10000 items)'));
    expect(await pinToTopOfP(ctx)).toBe(false);
    expect(await ctx.db.selectFrom('subscription_audit_log').select('id').execute()).toEqual([]);

    const accepted = await api(ctx.app, {
      method: 'POST',
      url: PROPERTIES_URL,
      as: 'U',
      ...multipart({ subscription_data: JSON.stringify(entries(10_000)) }),
    });
    expect(accepted.statusCode).toBe(200);
    expect(await pinToTopOfP(ctx)).toBe(true);
  });

  it('event_types and fetch_event_types: at most 256 names, checked before the names; no queue is created', async () => {
    const names = (count: number) => Array.from({ length: count }, (_, i) => `type${i}`);
    for (const parameter of ['event_types', 'fetch_event_types']) {
      const refused = await api(ctx.app, {
        method: 'POST',
        url: '/api/v1/register',
        as: 'V',
        form: { [parameter]: JSON.stringify([1, ...names(256)]) },
      });
      expect(refused.statusCode).toBe(400);
      expect(refused.body).toBe(errorBody(`${parameter} is too long (limit: 256 items)`));
      expect(await ctx.db.selectFrom('event_queues').select('id').where('user_id', '=', ids.V).execute()).toEqual([]);
    }
    const accepted = await api(ctx.app, {
      method: 'POST',
      url: '/api/v1/register',
      as: 'V',
      form: { event_types: JSON.stringify(names(256)), fetch_event_types: '[]' },
    });
    expect(accepted.statusCode).toBe(200);
    const queue = await ctx.db.selectFrom('event_queues').select('event_types').where('user_id', '=', ids.V).executeTakeFirstOrThrow();
    expect(queue.event_types).toEqual(names(256));
  });
});

describe('live queues per user (QUEUE_MAX_PER_USER, 3 here)', () => {
  const ctx = useTestContext(() => createTestContext({ env: { QUEUE_MAX_PER_USER: '3' } }));

  const register = async (as: 'U' | 'V' = 'U'): Promise<string> => {
    const res = await api(ctx.app, { method: 'POST', url: '/api/v1/register', as, form: { fetch_event_types: '[]' } });
    expect(res.statusCode).toBe(200);
    return (JSON.parse(res.body) as { queue_id: string }).queue_id;
  };
  const queuesOf = async (userId: number) =>
    (await ctx.db.selectFrom('event_queues').select('id').where('user_id', '=', userId).orderBy('created_at').execute()).map(
      (row) => row.id,
    );
  const poll = (queueId: string, dontBlock = true) =>
    api(ctx.app, { url: `/api/v1/events?queue_id=${queueId}&last_event_id=-1&dont_block=${dontBlock}`, as: 'U' });

  it('a register beyond the maximum deletes the least recently used queue (by last poll or creation), with its events', async () => {
    const [q1, q2, q3] = [await register(), await register(), await register()];
    const other = await register('V');
    // q1 was polled after q2 was created: q2 is now the least recently used.
    expect((await poll(q1)).statusCode).toBe(200);
    await api(ctx.app, { method: 'POST', url: PROPERTIES_URL, as: 'U', form: { subscription_data: pinP } });
    expect(await ctx.db.selectFrom('events').select('id').where('queue_id', '=', q2).execute()).toHaveLength(1);

    const q4 = await register();
    expect(new Set(await queuesOf(ids.U))).toEqual(new Set([q1, q3, q4]));
    expect(await ctx.db.selectFrom('events').select('id').where('queue_id', '=', q2).execute()).toEqual([]);
    const gone = await poll(q2);
    expect(gone.statusCode).toBe(400);
    expect(gone.body).toBe(badQueueBody(q2));
    expect(await queuesOf(ids.V)).toEqual([other]); // other users' queues are not counted or touched
  });

  it("a queue with a poll in progress counts as in use; an evicted queue's waiting poll ends with BAD_EVENT_QUEUE_ID", async () => {
    const pollId = async (queueId: string) =>
      (await ctx.db.selectFrom('event_queues').select('poll_id').where('id', '=', queueId).executeTakeFirst())?.poll_id;
    // Resolves once the poll waits; `answer` settles when it answers.
    const wait = async (queueId: string) => {
      const answer = poll(queueId, false);
      await expect.poll(() => pollId(queueId)).not.toBeNull();
      return { answer };
    };
    const [q1, , q3] = [await register(), await register(), await register()];
    const waitingOnQ1 = await wait(q1); // q1 is the oldest, but a poll is waiting on it
    const q4 = await register();
    expect(new Set(await queuesOf(ids.U))).toEqual(new Set([q1, q3, q4])); // q2 went instead

    // Once every queue has a poll in progress, the least recently used of them goes.
    const others = [await wait(q3), await wait(q4)];
    const q5 = await register();
    expect(new Set(await queuesOf(ids.U))).toEqual(new Set([q3, q4, q5]));
    const answer = await waitingOnQ1.answer;
    expect(answer.statusCode).toBe(400);
    expect(answer.body).toBe(badQueueBody(q1));
    expect(await pollId(q3)).not.toBeNull(); // the other polls keep waiting
    await ctx.app.close(); // shutdown answers them
    expect((await Promise.all(others.map((waiting) => waiting.answer))).map((res) => res.statusCode)).toEqual([200, 200]);
  });
});
