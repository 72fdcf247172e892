// Loaded with `node --import` into the app instances of `npm run test:lb`: writes the headers each
// request reached the app with (the ones the balancer promises to set) to LB_TEST_HEADERS_FILE, one
// JSON line per request. It only reads; the app is the built dist/server.js, unchanged.
import { subscribe } from 'node:diagnostics_channel';
import { appendFileSync } from 'node:fs';

const file = process.env.LB_TEST_HEADERS_FILE;
if (!file) throw new Error('LB_TEST_HEADERS_FILE is not set');

subscribe('http.server.request.start', ({ request }) => {
  const headers = request.headers;
  const line = {
    url: request.url,
    host: headers.host,
    'x-request-id': headers['x-request-id'],
    'x-forwarded-for': headers['x-forwarded-for'],
    'x-forwarded-host': headers['x-forwarded-host'],
    'x-forwarded-proto': headers['x-forwarded-proto'],
  };
  appendFileSync(file, `${JSON.stringify(line)}\n`);
});
