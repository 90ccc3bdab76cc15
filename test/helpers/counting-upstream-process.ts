// Run as its own process: an upstream "provider" that forwards every JSON-RPC call to `target`
// and notes when each arrived. A process of its own so that arrival times are those a provider
// would see, not delayed by the test's own event loop (its clients, its other servers).
// Usage: node --import tsx test/helpers/counting-upstream-process.ts <target url>
// Prints {"port": N} once listening. GET /arrivals answers the arrival times so far (epoch ms,
// sub-millisecond), POST /reset forgets them; anything else is forwarded.

import { createServer } from 'node:http';
import { Pool } from 'undici';

const target = new URL(process.argv[2] ?? '');
const pool = new Pool(target.origin, { connections: 64 });
let arrivals: number[] = [];

const server = createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/arrivals') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(arrivals));
    return;
  }
  if (req.method === 'POST' && req.url === '/reset') {
    arrivals = [];
    res.end();
    return;
  }
  // The moment the request's head is read: what a provider's rate limiter counts.
  arrivals.push(performance.timeOrigin + performance.now());
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    pool
      .request({ method: 'POST', path: `${target.pathname}${target.search}`, headers: { 'content-type': 'application/json' }, body: Buffer.concat(chunks) })
      .then(async (answer) => {
        const body = Buffer.from(await answer.body.arrayBuffer());
        res.writeHead(answer.statusCode, { 'content-type': 'application/json' });
        res.end(body);
      })
      .catch(() => {
        res.writeHead(502);
        res.end();
      });
  });
});

server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  process.stdout.write(`${JSON.stringify({ port: address.port })}\n`);
});
