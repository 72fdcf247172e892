import http from 'node:http';

export interface RawPost {
  port: number;
  path: string;
  headers: Record<string, string>;
  /** Written one after the other. */
  chunks: string[];
  /** false: the request is never finished (a client that stalls, or a body shorter than declared). */
  end?: boolean;
}

/** A POST over a real socket, body written as given; resolves with the answer. */
export function rawPost(request: RawPost): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const outgoing = http.request(
      { port: request.port, host: '127.0.0.1', method: 'POST', path: request.path, headers: request.headers },
      (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode!, body }));
      },
    );
    outgoing.on('error', reject);
    for (const chunk of request.chunks) outgoing.write(chunk);
    if (request.end !== false) outgoing.end();
  });
}
