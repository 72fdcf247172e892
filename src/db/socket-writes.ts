import type { Duplex } from 'node:stream';
import type pg from 'pg';

/**
 * node-postgres writes every query with a socket write of its own, a system call each (a fifth of
 * the server's CPU on the write path): corking the socket around several queries makes one write.
 */

/**
 * The socket under a client (node-postgres's Connection.stream, private: the TLS socket when the
 * connection is encrypted); test/pg-contract.test.ts and test/large-reads.test.ts fail if an upgrade moves it.
 */
export function connectionStream(client: pg.ClientBase): Partial<Duplex> | undefined {
  return (client as unknown as { connection?: { stream?: Partial<Duplex> } }).connection?.stream;
}

const corkedUntilImmediate = new WeakSet<Partial<Duplex>>();

/**
 * Holds the client's writes until the end of this turn of the event loop (setImmediate runs after
 * this poll phase's I/O callbacks): the statements of all this turn's requests leave in one write.
 */
export function batchWritesOfThisTurn(client: pg.ClientBase): void {
  const socket = connectionStream(client);
  if (!socket?.cork || !socket.uncork || corkedUntilImmediate.has(socket)) return;
  corkedUntilImmediate.add(socket);
  socket.cork();
  setImmediate(() => {
    corkedUntilImmediate.delete(socket);
    socket.uncork!();
  });
}
