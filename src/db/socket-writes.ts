import type { Duplex } from 'node:stream';
import type pg from 'pg';

/**
 * node-postgres writes every query with a socket write of its own (it corks the socket around each
 * query's messages); a system call each, which showed as a fifth of the server's CPU on the write
 * path. Corking the connection's socket around several queries makes their messages one write.
 */

interface Corkable {
  cork(): void;
  uncork(): void;
}

/**
 * The socket under a client (node-postgres's Connection.stream, private: the TLS socket when the
 * connection is encrypted); test/pg-contract.test.ts and test/large-reads.test.ts fail if an upgrade moves it.
 */
export function connectionStream(client: pg.ClientBase): Partial<Duplex> | undefined {
  return (client as unknown as { connection?: { stream?: Partial<Duplex> } }).connection?.stream;
}

/** The socket under a client, when there is one to cork. */
function socketOf(client: pg.ClientBase): Corkable | undefined {
  const stream = connectionStream(client);
  return stream?.cork && stream.uncork ? (stream as Corkable) : undefined;
}

const corkedUntilImmediate = new WeakSet<Corkable>();

/**
 * Holds the client's writes until the end of this turn of the event loop (setImmediate runs after
 * the I/O callbacks of the current poll phase): the statements of all the requests handled in this
 * turn leave in one write. A turn is short (no I/O waits in it), so this adds no waiting of note.
 */
export function batchWritesOfThisTurn(client: pg.ClientBase): void {
  const socket = socketOf(client);
  if (!socket || corkedUntilImmediate.has(socket)) return;
  corkedUntilImmediate.add(socket);
  socket.cork();
  setImmediate(() => {
    corkedUntilImmediate.delete(socket);
    socket.uncork();
  });
}
