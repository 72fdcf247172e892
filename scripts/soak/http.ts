import http from 'node:http';
import { onCleanup } from '../lib/processes.js';
import { EXTERNAL_HOST, REQUEST_TIMEOUT_MS } from './config.js';

// --- HTTP: keep-alive connections to 127.0.0.1 with an explicit Host header. ---

export const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
onCleanup(async () => agent.destroy());

export interface Call {
  method: string;
  path: string;
  port: number;
  host?: string;
  authorization?: string;
  form?: Record<string, string>;
  timeoutMs?: number;
}

export interface Answer {
  status: number;
  body: string;
  /** The parsed body; undefined when it is not JSON. */
  json: Record<string, unknown> | undefined;
}

export function call(request: Call): Promise<Answer> {
  const body = request.form ? new URLSearchParams(request.form).toString() : '';
  return new Promise((resolve, reject) => {
    const outgoing = http.request(
      {
        host: '127.0.0.1',
        port: request.port,
        method: request.method,
        path: request.path,
        agent,
        headers: {
          host: request.host ?? EXTERNAL_HOST,
          ...(request.authorization && { authorization: request.authorization }),
          ...(request.form && { 'content-type': 'application/x-www-form-urlencoded', 'content-length': String(Buffer.byteLength(body)) }),
        },
      },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (text += chunk));
        response.on('end', () => {
          let json: Record<string, unknown> | undefined;
          try {
            json = JSON.parse(text) as Record<string, unknown>;
          } catch {
            json = undefined;
          }
          resolve({ status: response.statusCode ?? 0, body: text, json });
        });
        response.on('error', reject);
      },
    );
    outgoing.setTimeout(request.timeoutMs ?? REQUEST_TIMEOUT_MS, () => {
      outgoing.destroy(new Error(`${request.method} ${request.path} timed out`));
    });
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}
