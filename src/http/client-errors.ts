import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';

/**
 * Answers HTTP-level failures that happen before any request exists (Node's clientError: a
 * request not sent in time, oversized headers, unparseable HTTP) in Zulip's error envelope rather
 * than Fastify's, then closes the connection, as Fastify's default handler does.
 */
export function zulipClientErrorHandler(error: Error & { code?: string }, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const [status, msg] =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? [408, 'Request timeout']
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request header fields too large']
        : [400, 'Malformed request'];
  const body = JSON.stringify({ result: 'error', msg, code: 'BAD_REQUEST' });
  if (socket.writable) {
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `Content-Type: application/json\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(error);
}
