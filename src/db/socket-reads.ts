import type pg from 'pg';
import { afterTurnOfSlices } from '../lib/slices.js';
import { connectionStream } from './socket-writes.js';

/**
 * libuv reads a readable socket up to 32 times (64 KiB each) before it returns to the event loop:
 * a large result (a 20,000-user organization's users) was decoded in pieces of up to 2 MB, during
 * which no other request was served (bench/RESULTS.md). Pausing the socket after each large chunk
 * until the next turn of the large work's line (src/lib/slices.ts) lets everything else run between
 * two chunks. A chunk smaller than LARGE_CHUNK_BYTES never pauses.
 */

const LARGE_CHUNK_BYTES = 16 * 1024;

/** From now on, `client` decodes at most one large chunk of its answers per turn of the event loop. */
export function decodeLargeAnswersInSlices(client: pg.ClientBase): void {
  const stream = connectionStream(client);
  if (!stream?.on || !stream.pause || !stream.resume) return;
  const resume = () => stream.resume!();
  stream.on('data', (chunk: Buffer) => {
    if (chunk.length < LARGE_CHUNK_BYTES) return;
    // node-postgres's own listener has this chunk too (it decodes it as it is emitted); the
    // chunks that follow wait in the socket until the next turn.
    stream.pause!();
    afterTurnOfSlices(resume);
  });
}
