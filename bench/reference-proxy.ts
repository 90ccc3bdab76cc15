// The ceiling for any Node proxy in this benchmark: `node:http` in front of an undici Pool to
// anvil. It reads the client's body, forwards it unchanged, and passes the answer's bytes back
// unchanged: no parsing, no auth, no metering. The answer is collected and written with a
// Content-Length rather than streamed with `pipeline()`: for block-sized answers (a few KiB)
// streaming costs about half as much CPU again per request (measured while building this
// benchmark), and a reference must be the fastest way, or it is no ceiling. Started by
// bench/run.ts as its own process; prints `{"port":N}` when listening.
//
//   node --import tsx bench/reference-proxy.ts --upstream http://127.0.0.1:8545 [--connections 64]

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

const { values } = parseArgs({
  options: { upstream: { type: 'string' }, port: { type: 'string' }, connections: { type: 'string' } },
});
if (values.upstream === undefined) throw new Error('usage: reference-proxy.ts --upstream URL');

const upstream = new URL(values.upstream);
// The gateway's upstream default: 64 keep-alive connections.
const pool = new Pool(upstream.origin, { connections: Number(values.connections ?? 64), keepAliveTimeout: 30_000 });
const path = `${upstream.pathname}${upstream.search}`;
const UPSTREAM_HEADERS = { 'content-type': 'application/json' };

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    pool.request({ method: 'POST', path, headers: UPSTREAM_HEADERS, body: Buffer.concat(chunks) }).then(
      (answer) => {
        const parts: Buffer[] = [];
        answer.body.on('data', (chunk: Buffer) => parts.push(chunk));
        answer.body.on('error', () => res.destroy());
        answer.body.on('end', () => {
          const body = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
          // A flat header list, the fastest form (see reference-bare.ts).
          res.writeHead(answer.statusCode, [
            'content-type',
            String(answer.headers['content-type'] ?? 'application/json'),
            'content-length',
            String(body.length),
          ]);
          res.end(body);
        });
      },
      () => {
        res.writeHead(502);
        res.end();
      },
    );
  });
});
server.keepAliveTimeout = 65_000;
server.listen(Number(values.port ?? 0), '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
});
process.on('SIGTERM', () => {
  server.close();
  server.closeAllConnections();
  void pool.close().finally(() => process.exit(0));
});
