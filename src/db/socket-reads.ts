import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { afterTurnOfSlices, SLICE_BUDGET_MS } from '../lib/slices.js';
import { connectionStream } from './socket-writes.js';

/**
 * libuv reads a readable socket up to 32 times (64 KiB each) before it returns to the event loop:
 * a large result (a 20,000-user organization's users) was decoded in pieces of up to 2 MB, during
 * which no other request was served (bench/RESULTS.md). Once the large chunks have taken a slice's
 * budget, the socket pauses until the next turn of the large work's line (src/lib/slices.ts), so
 * that everything else runs in between. (A pause after every chunk cost a 20 MB answer some 300
 * timer waits: GET /users of 50,000 users at 2.2–2.6 × its floor against 1.4.) A chunk smaller
 * than LARGE_CHUNK_BYTES never pauses.
 */

const LARGE_CHUNK_BYTES = 16 * 1024;

/** From now on, `client` decodes the large chunks of its answers for at most a slice's budget per turn of the event loop. */
export function decodeLargeAnswersInSlices(client: pg.ClientBase): void {
  const stream = connectionStream(client);
  if (!stream?.on || !stream.pause || !stream.resume) return;
  const resume = () => stream.resume!();
  // The budget is counted from the first large chunk after a pause (one left from an earlier answer pauses the next at its first chunk: a turn).
  let deadline: number | undefined;
  stream.on('data', (chunk: Buffer) => {
    if (chunk.length < LARGE_CHUNK_BYTES) return;
    const now = performance.now();
    deadline ??= now + SLICE_BUDGET_MS;
    if (now < deadline) return;
    deadline = undefined;
    // node-postgres's own listener has this chunk too (it decodes it as it is emitted); the
    // chunks that follow wait in the socket until the next turn.
    stream.pause!();
    afterTurnOfSlices(resume);
  });
}
