// The proxy a user would put in front of a DAS server to compare with the gateway on large
// answers: `node:http` in front of an undici Pool, the client's body forwarded unchanged and the
// upstream's answer **streamed** back as it arrives (bytes piped, no parsing, no validation, no
// auth, no metering, no buffering of the whole answer). For megabyte answers this is the fastest
// way a Node proxy can pass them on; for block-sized answers collecting them is cheaper (see
// reference-proxy.ts), which is why the two references differ. Started by bench/run.ts as its own
// process; prints `{"port":N}` when listening.
//
//   node --import tsx bench/reference-stream-proxy.ts --upstream http://127.0.0.1:PORT [--connections 64]

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline } from 'node:stream';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';

const { values } = parseArgs({
  options: { upstream: { type: 'string' }, port: { type: 'string' }, connections: { type: 'string' } },
});
if (values.upstream === undefined) throw new Error('usage: reference-stream-proxy.ts --upstream URL');

const upstream = new URL(values.upstream);
// The gateway's upstream default: 64 keep-alive connections.
const pool = new Pool(upstream.origin, { connections: Number(values.connections ?? 64), keepAliveTimeout: 30_000 });
const path = `${upstream.pathname}${upstream.search}`;
const UPSTREAM_HEADERS = { 'content-type': 'application/json' };

const server = createServer((req, res) => {
  // The request body is small: collected, then sent (undici would otherwise stream it chunked).
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    pool.request({ method: 'POST', path, headers: UPSTREAM_HEADERS, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) }).then(
      (answer) => {
        const headers = ['content-type', String(answer.headers['content-type'] ?? 'application/json')];
        // The upstream's length is passed on when it sent one (the sample DAS server does), so the
        // client gets the same framing as from the gateway, not chunked encoding.
        const length = answer.headers['content-length'];
        if (typeof length === 'string') headers.push('content-length', length);
        res.writeHead(answer.statusCode, headers);
        pipeline(answer.body, res, () => {});
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
