// The proxy a user would put in front of a DAS server to compare with the gateway on large
// answers: `node:http` in front of an undici Pool, the client's body forwarded unchanged and the
// upstream's answer **streamed** back as it arrives (bytes piped, no parsing, no validation, no
// auth, no metering, no buffering of the whole answer). For megabyte answers this is the fastest
// way a Node proxy can pass them on; for block-sized answers collecting them is cheaper (see
// reference-proxy.ts), which is why the two references differ. Started by bench/run.ts as its own
// process; prints `{"port":N}` when listening.
//
// With `--validate` it is the second reference: the same proxy, but each answer is held until it
// is complete and the gateway's own validator (src/jsonrpc/envelope-scanner.ts, every byte checked
// as one JSON object in UTF-8) has passed it, then written at once (502 when it fails). Nothing
// else is added: no auth, no metering, no log line. It is the least work a server can do that,
// like the gateway, never sends the first byte of an answer it has not checked, so its speed
// against the streaming proxy is what the validation alone leaves on this machine.
//
//   node --import tsx bench/reference-stream-proxy.ts --upstream http://127.0.0.1:PORT [--connections 64] [--validate]

import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pipeline, type Readable } from 'node:stream';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { readEnvelope } from '../src/jsonrpc/envelope-scanner.js';

const { values } = parseArgs({
  options: { upstream: { type: 'string' }, port: { type: 'string' }, connections: { type: 'string' }, validate: { type: 'boolean' } },
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
        if (!values.validate) {
          res.writeHead(answer.statusCode, headers);
          pipeline(answer.body, res, () => {});
          return;
        }
        answerWhenValid(answer.statusCode, headers, typeof length === 'string', answer.body, res);
      },
      () => {
        res.writeHead(502);
        res.end();
      },
    );
  });
});
/** `--validate`: collects the answer, validates it, then writes it in one go (502 when it is not valid JSON-RPC). */
function answerWhenValid(status: number, headers: string[], hasLength: boolean, body: Readable, res: ServerResponse): void {
  const parts: Buffer[] = [];
  let received = 0;
  body.on('data', (chunk: Buffer) => {
    parts.push(chunk);
    received += chunk.length;
  });
  body.on('error', () => res.destroy());
  body.on('end', () => {
    if (readEnvelope(parts, received) === undefined) {
      res.writeHead(502);
      res.end();
      return;
    }
    if (!hasLength) headers.push('content-length', String(received));
    res.writeHead(status, headers);
    res.cork();
    for (const part of parts) res.write(part);
    res.end();
  });
}

server.keepAliveTimeout = 65_000;
server.listen(Number(values.port ?? 0), '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
});
process.on('SIGTERM', () => {
  server.close();
  server.closeAllConnections();
  void pool.close().finally(() => process.exit(0));
});
