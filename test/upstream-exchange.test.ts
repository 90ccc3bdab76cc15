// One exchange with an upstream through undici's dispatch (src/routing/upstream-exchange.ts), against
// a real HTTP server on loopback: the final answer after an informational one, a failed status with
// its body, an abort in the middle of a large answer (its pooled buffer given back), and a signal
// aborted before the request was sent (the server never sees it).

import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AnswerBufferPool, AnswerCollector, POOLED_MIN_BYTES } from '../src/jsonrpc/answer-buffers.js';
import { exchange } from '../src/routing/upstream-exchange.js';
import { until } from './helpers/until.js';
import { CallController } from '../src/routing/abort-signals.js';

describe('upstream exchange', () => {
  let server: Server;
  let pool: Pool;
  const requests: string[] = [];
  /** Responses left hanging by the stalling route, ended after the test. */
  const stalled: ServerResponse[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      requests.push(req.url!);
      req.resume();
      req.on('end', () => {
        if (req.url === '/hints') {
          // A length on the informational answer is not the answer's: nothing is set aside for it.
          res.writeEarlyHints({ link: '</x>; rel=preload', 'content-length': String(4 * POOLED_MIN_BYTES) });
          res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"result":"0x1"}');
        } else if (req.url === '/busy') {
          res.writeHead(503, { 'content-type': 'text/plain' }).end('try later');
        } else if (req.url === '/stall') {
          // A large answer announced in full, half of it sent, then nothing.
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(4 * POOLED_MIN_BYTES) });
          res.write(Buffer.alloc(2 * POOLED_MIN_BYTES, 0x20));
          stalled.push(res);
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connections: 4 });
  });
  afterAll(async () => {
    for (const res of stalled) res.destroy();
    await pool.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const post = (path: string) => ({ method: 'POST' as const, path, headers: { 'content-type': 'application/json' }, body: '{}' });

  it('resolves with the final answer after an informational one', async () => {
    const buffers = new AnswerBufferPool();
    const { status, answer } = await exchange(pool, post('/hints'), new CallController().signal, (length) => new AnswerCollector(buffers, length));
    expect(status).toBe(200);
    expect(Buffer.concat(answer.parts()).toString()).toBe('{"jsonrpc":"2.0","id":1,"result":"0x1"}');
    expect(buffers.snapshot().allocated).toBe(0);
  });

  it('resolves with a failed status and its body (the caller decides what it means)', async () => {
    const buffers = new AnswerBufferPool();
    const { status, answer } = await exchange(pool, post('/busy'), new CallController().signal, (length) => new AnswerCollector(buffers, length));
    expect(status).toBe(503);
    expect(Buffer.concat(answer.parts()).toString()).toBe('try later');
  });

  it('rejects with the reason of an abort in the middle of a large answer, and gives its pooled buffer back', async () => {
    const buffers = new AnswerBufferPool();
    const controller = new CallController();
    let collector: AnswerCollector | undefined;
    const exchanged = exchange(pool, post('/stall'), controller.signal, (length) => (collector = new AnswerCollector(buffers, length)));
    await until(() => collector !== undefined && collector.length >= 2 * POOLED_MIN_BYTES, 'half of the answer');
    expect(buffers.snapshot().allocated).toBe(1);
    expect(buffers.snapshot().retainedBytes).toBe(0);
    const reason = new Error('attempt timed out');
    controller.abort(reason);
    await expect(exchanged).rejects.toBe(reason);
    // The buffer is idle in the pool again: the next answer of its size takes it.
    expect(buffers.snapshot().retainedBytes).toBe(4 * POOLED_MIN_BYTES);
  });

  it('sends nothing when its signal was aborted before it started', async () => {
    const before = requests.length;
    const controller = new CallController();
    controller.abort(new Error('another attempt answered'));
    await expect(exchange(pool, post('/hints'), controller.signal, (length) => new AnswerCollector(new AnswerBufferPool(), length))).rejects.toThrow('another attempt answered');
    // A request sent after it arrives alone: the aborted one was never sent.
    await exchange(pool, post('/busy'), new CallController().signal, (length) => new AnswerCollector(new AnswerBufferPool(), length));
    expect(requests.slice(before)).toEqual(['/busy']);
  });
});
