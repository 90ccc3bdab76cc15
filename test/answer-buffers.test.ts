// Large upstream answers are collected in pooled buffers, and a buffer goes back to the pool only
// once the reply written from it has been handed to the connection: never while a slow client is
// still being written to, never when more than one caller shares the answer.
// src/jsonrpc/answer-buffers.ts says why.

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AnswerBufferPool, AnswerCollector, answerBuffers, lend, markShared, POOLED_MAX_BYTES, POOLED_MIN_BYTES, returnLent } from '../src/jsonrpc/answer-buffers.js';
import { collectionRequests, MIN_COLLECTION_INTERVAL_MS } from '../src/startup/heap-collection.js';
import { startTestGateway, type TestGateway } from './helpers/gateway.js';
import { ManualClock } from './helpers/manual-clock.js';
import { parseResponses, postRequest } from './helpers/raw-http.js';
import { until } from './helpers/until.js';

const MiB = 1024 * 1024;

/** One turn of the event loop: what `returnLent` waits before giving a buffer back. */
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** `text` cut into socket-sized chunks, each in memory of its own. */
function chunksOf(text: string, size: number): Buffer[] {
  const bytes = Buffer.from(text);
  const chunks: Buffer[] = [];
  for (let offset = 0; offset < bytes.length; offset += size) chunks.push(Buffer.from(bytes.subarray(offset, offset + size)));
  return chunks;
}

describe('the answer buffer pool', () => {
  it('hands out power-of-two buffers and gives a returned one out again', () => {
    const pool = new AnswerBufferPool(8 * MiB);
    const first = pool.take(1.5 * MiB);
    expect(first.length).toBe(2 * MiB);
    expect(first.byteOffset).toBe(0);
    pool.giveBack(first);
    expect(pool.snapshot()).toEqual({ allocated: 1, reused: 0, retainedBytes: 2 * MiB, releasedBytes: 0 });
    expect(pool.take(1.1 * MiB)).toBe(first);
    // Compared by identity: `not.toBe` formats both 2 MiB buffers even when it passes, for seconds.
    expect(pool.take(1.1 * MiB) === first).toBe(false);
    expect(pool.snapshot()).toEqual({ allocated: 2, reused: 1, retainedBytes: 0, releasedBytes: 0 });
  });

  it('keeps no more idle bytes than its bound, and no buffer that is not one of its sizes', () => {
    const pool = new AnswerBufferPool(4 * MiB);
    const [a, b, c] = [pool.take(2 * MiB), pool.take(2 * MiB), pool.take(2 * MiB)];
    for (const buffer of [a, b, c]) pool.giveBack(buffer);
    expect(pool.snapshot().retainedBytes).toBe(4 * MiB);
    pool.giveBack(Buffer.allocUnsafeSlow(3 * MiB));
    pool.giveBack(Buffer.allocUnsafeSlow(4 * POOLED_MAX_BYTES));
    expect(pool.snapshot().retainedBytes).toBe(4 * MiB);
  });
});

describe('the default bound', () => {
  it('keeps every buffer of 50 concurrent 1.6 MiB answers for the next 50, mapping none afresh', () => {
    const pool = new AnswerBufferPool();
    const concurrent = (): Buffer[] => Array.from({ length: 50 }, () => pool.take(1.6 * MiB));
    for (const buffer of concurrent()) pool.giveBack(buffer);
    for (const buffer of concurrent()) pool.giveBack(buffer);
    expect(pool.snapshot()).toMatchObject({ allocated: 50, reused: 50, retainedBytes: 100 * MiB });
  });
});

describe('letting idle buffers go after a quiet period', () => {
  /** A 16 MiB pool on a manual clock that lets idle buffers go after 5 s, and what it reported released. */
  function timedPool(): { time: ManualClock; released: number[]; pool: AnswerBufferPool } {
    const time = new ManualClock();
    const released: number[] = [];
    const pool = new AnswerBufferPool(16 * MiB, { afterMs: 5_000, clock: time, onRelease: (bytes) => released.push(bytes) });
    return { time, released, pool };
  }

  it('drops every idle buffer once none was taken for the quiet period, and says how many bytes', async () => {
    const { time, released, pool } = timedPool();
    const buffers = [pool.take(2 * MiB), pool.take(2 * MiB), pool.take(4 * MiB)];
    for (const buffer of buffers) pool.giveBack(buffer);
    expect(time.pending).toBe(1);
    await time.advance(4_999);
    expect(released).toEqual([]);
    expect(pool.snapshot().retainedBytes).toBe(8 * MiB);
    await time.advance(1);
    expect(released).toEqual([8 * MiB]);
    expect(pool.snapshot()).toMatchObject({ retainedBytes: 0, releasedBytes: 8 * MiB });
    // Dropped, not handed out again.
    expect(buffers.includes(pool.take(2 * MiB))).toBe(false);
  });

  it('waits out the quiet period again when a buffer was taken meanwhile, with one timer at a time', async () => {
    const { time, released, pool } = timedPool();
    pool.giveBack(pool.take(2 * MiB));
    await time.advance(3_000);
    // A steady stream: taken and given back while the timer is armed.
    for (let i = 0; i < 10; i++) pool.giveBack(pool.take(2 * MiB));
    expect(time.pending).toBe(1);
    await time.advance(2_000);
    expect(released).toEqual([]);
    expect(pool.snapshot().retainedBytes).toBe(2 * MiB);
    await time.advance(2_999);
    expect(released).toEqual([]);
    await time.advance(1);
    expect(released).toEqual([2 * MiB]);
    expect(time.pending).toBe(0);
  });

  it('after a burst, drops the buffers a trickle of large answers no longer uses and keeps the one it does', async () => {
    const { time, released, pool } = timedPool();
    const burst = [pool.take(2 * MiB), pool.take(2 * MiB), pool.take(2 * MiB), pool.take(2 * MiB)];
    for (const buffer of burst) pool.giveBack(buffer);
    // One large answer a second for six seconds: each takes the buffer that came back last.
    for (let second = 1; second <= 6; second++) {
      await time.advance(1_000);
      const buffer = pool.take(2 * MiB);
      expect(buffer).toBe(burst[3]);
      pool.giveBack(buffer);
    }
    // The three the trickle never took went when they had been idle for five seconds; no
    // collection was asked for, since large answers were still coming.
    expect(pool.snapshot()).toMatchObject({ retainedBytes: 2 * MiB, releasedBytes: 6 * MiB });
    expect(released).toEqual([]);
    expect(time.pending).toBe(1);
    // The trickle stops at 6 s: its buffer goes at 11 s, and then the collection is asked for,
    // for everything dropped since the burst.
    await time.advance(4_999);
    expect(pool.snapshot().retainedBytes).toBe(2 * MiB);
    await time.advance(1);
    expect(released).toEqual([8 * MiB]);
    expect(pool.snapshot()).toMatchObject({ retainedBytes: 0, releasedBytes: 8 * MiB });
    expect(time.pending).toBe(0);
  });

  it('asks for the collection once no buffer was taken for the period, even when the last taken never came back', async () => {
    const { time, released, pool } = timedPool();
    pool.giveBack(pool.take(2 * MiB));
    await time.advance(1_000);
    // Taken at 1 s and never given back (its answer shared by concurrent calls, say).
    pool.take(4 * MiB);
    // The idle buffer goes at 5 s, but a buffer was taken 4 s before: answers may still be coming.
    await time.advance(4_000);
    expect(pool.snapshot().retainedBytes).toBe(0);
    expect(released).toEqual([]);
    expect(time.pending).toBe(1);
    // None taken by 6 s: the large answers have stopped.
    await time.advance(999);
    expect(released).toEqual([]);
    await time.advance(1);
    expect(released).toEqual([2 * MiB]);
    expect(time.pending).toBe(0);
  });

  it('asks V8 for a full collection at most once a minute, and never without --expose-gc', async () => {
    const time = new ManualClock();
    const asked: string[] = [];
    const gc = async (options: { type: string; execution: string }): Promise<void> => void asked.push(`${options.type}/${options.execution}`);
    const collect = collectionRequests({ gc, now: time.now });
    expect(collect()).toBe(true);
    await time.advance(MIN_COLLECTION_INTERVAL_MS - 1);
    expect(collect()).toBe(false);
    await time.advance(1);
    expect(collect()).toBe(true);
    expect(asked).toEqual(['major/async', 'major/async']);
    expect(collectionRequests({ gc: undefined, now: time.now })()).toBe(false);
  });

  it('arms no timer when nothing is idle, and releases nothing when every buffer is in use', async () => {
    const { time, released, pool } = timedPool();
    const held = pool.take(2 * MiB);
    expect(time.pending).toBe(0);
    pool.giveBack(held);
    expect(pool.take(2 * MiB)).toBe(held);
    await time.advance(60_000);
    expect(released).toEqual([]);
    expect(pool.snapshot()).toMatchObject({ retainedBytes: 0, releasedBytes: 0 });
  });
});

describe('collecting an answer', () => {
  const text = `{"jsonrpc":"2.0","id":1,"result":"${'ü'.repeat(700_000)}"}`;

  it('keeps a small answer in the chunks it arrived in', () => {
    const pool = new AnswerBufferPool();
    const chunks = chunksOf('{"jsonrpc":"2.0","id":1,"result":"0x1"}', 16);
    const collector = new AnswerCollector(pool, 39);
    for (const chunk of chunks) collector.add(chunk);
    expect(collector.pooled).toBeUndefined();
    expect(collector.parts()).toEqual(chunks);
    expect(pool.snapshot().allocated).toBe(0);
  });

  it('collects an announced large answer in one pooled buffer, byte for byte', () => {
    const pool = new AnswerBufferPool();
    const collector = new AnswerCollector(pool, Buffer.byteLength(text));
    for (const chunk of chunksOf(text, 65_536)) collector.add(chunk);
    expect(collector.pooled?.length).toBe(2 * MiB);
    const parts = collector.parts();
    expect(parts).toHaveLength(1);
    expect(parts[0]!.buffer).toBe(collector.pooled!.buffer);
    expect(parts[0]!.toString('utf8')).toBe(text);
  });

  it('moves an answer that announced no length into a pooled buffer once it is large, and grows it when it was announced too small', () => {
    expect(Buffer.byteLength(text)).toBeGreaterThan(POOLED_MIN_BYTES);
    const unannounced = new AnswerCollector(new AnswerBufferPool());
    for (const chunk of chunksOf(text, 50_000)) unannounced.add(chunk);
    expect(unannounced.pooled).toBeDefined();
    expect(Buffer.concat(unannounced.parts()).toString('utf8')).toBe(text);

    const pool = new AnswerBufferPool();
    const understated = new AnswerCollector(pool, POOLED_MIN_BYTES);
    for (const chunk of chunksOf(text, 50_000)) understated.add(chunk);
    expect(understated.pooled!.length).toBeGreaterThanOrEqual(Buffer.byteLength(text));
    expect(Buffer.concat(understated.parts()).toString('utf8')).toBe(text);
    // The outgrown buffer went back.
    expect(pool.snapshot().retainedBytes).toBe(POOLED_MIN_BYTES);
  });
});

describe('lending a pooled buffer with a result', () => {
  /** A buffer taken from `pool` and lent with a result that is a view into it. */
  function lentResult(pool: AnswerBufferPool): { buffer: Buffer; result: Buffer[] } {
    const buffer = pool.take(POOLED_MIN_BYTES);
    const result = [buffer.subarray(10, 20)];
    lend(result, buffer, pool);
    return { buffer, result };
  }

  it('gives it back one turn after its writer is done with it, once', async () => {
    const pool = new AnswerBufferPool();
    const { buffer, result } = lentResult(pool);
    returnLent(result);
    returnLent(result);
    expect(pool.snapshot().retainedBytes).toBe(0);
    await nextTurn();
    expect(pool.snapshot().retainedBytes).toBe(POOLED_MIN_BYTES);
    expect(pool.take(POOLED_MIN_BYTES)).toBe(buffer);
  });

  it('never gives back a buffer whose result was shared, even when shared after its first writer finished', async () => {
    const pool = new AnswerBufferPool();
    const before = lentResult(pool).result;
    markShared(before);
    returnLent(before);

    const after = lentResult(pool).result;
    returnLent(after);
    // A coalesced caller receives the same answer in the same turn.
    markShared(after);
    await nextTurn();
    expect(pool.snapshot().retainedBytes).toBe(0);
  });
});

describe('large answers through the gateway', () => {
  // Past what loopback socket buffers absorb, so a reply to a client that does not read stays
  // unfinished while other calls run.
  const RESULT_BYTES = 12 * MiB;
  const BROKEN_PAGE = 13;
  const COLLECTION = 'J1S9H3QjnRtBbbuD4HjPV6RpRhwuk4zKbxsnCHuTgh9w';
  let upstream: Server;
  let tg: TestGateway;

  /** The result the upstream sends for page `page`: every item names it, so a reused buffer shows. */
  function resultFor(page: number): string {
    const item = `{"owner":"page-${page}","name":"caf\u00e9 \u{1f980}"}`;
    return `[${Array.from({ length: Math.ceil(RESULT_BYTES / (item.length + 1)) }, () => item).join(',')}]`;
  }

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const call = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: number; params: { page: number } };
        const { page } = call.params;
        const result = resultFor(page);
        // Page 13 is broken: its closing bracket is missing.
        const body = Buffer.from(`{"jsonrpc":"2.0","id":${call.id},"result":${page === BROKEN_PAGE ? result.slice(0, -1) : result}}`);
        if (page % 2 === 1) {
          // No Content-Length: the gateway learns the size as the bytes arrive.
          res.writeHead(200, { 'content-type': 'application/json' });
          for (let offset = 0; offset < body.length; offset += 300_000) res.write(body.subarray(offset, offset + 300_000));
          res.end();
        } else {
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(body.length) });
          res.end(body);
        }
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const { port } = upstream.address() as AddressInfo;
    tg = await startTestGateway({ networks: [{ id: 'das', kind: 'asset', upstreams: [{ id: 'main', url: `http://127.0.0.1:${port}` }] }] });
  });
  afterAll(async () => {
    await tg.close();
    upstream.closeAllConnections();
    await new Promise((resolve) => upstream.close(resolve));
  });

  const assetsCall = (page: number, id: number | string = 1): string =>
    JSON.stringify({ jsonrpc: '2.0', id, method: 'getAssetsByGroup', params: { groupKey: 'collection', groupValue: COLLECTION, limit: 1000, page } });

  async function call(page: number): Promise<string> {
    const response = await fetch(tg.url('das'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: assetsCall(page) });
    expect(response.status).toBe(200);
    return response.text();
  }

  it('answers each caller with its own bytes while a slow client still holds an earlier answer, and reuses buffers', async () => {
    // A client that reads the start of its answer, then stops reading.
    const path = new URL(tg.url('das')).pathname;
    const received: Buffer[] = [];
    const socket = connect(Number(new URL(tg.url('das')).port), '127.0.0.1');
    socket.on('data', (chunk: Buffer) => {
      received.push(chunk);
      if (received.length === 1) socket.pause();
    });
    const ended = new Promise<void>((resolve) => socket.on('end', resolve));
    socket.write(postRequest(path, assetsCall(1, 'held-id'), ['Connection: close']));
    await until(() => received.length > 0, 'the start of the held answer');

    const before = answerBuffers.snapshot();
    // Even pages come with a Content-Length, odd ones without.
    for (const page of [2, 3, 4, 5]) {
      expect(await call(page)).toBe(`{"jsonrpc":"2.0","id":1,"result":${resultFor(page)}}`);
    }
    const after = answerBuffers.snapshot();
    // The four calls ran one after the other: after the first, each took the buffer the one
    // before gave back. The held answer's buffer was not among them.
    expect(after.reused - before.reused).toBeGreaterThanOrEqual(3);

    socket.resume();
    await ended;
    const [response] = parseResponses(Buffer.concat(received).toString('latin1'));
    expect(response?.status).toBe(200);
    expect(response?.body).toBe(`{"jsonrpc":"2.0","id":"held-id","result":${resultFor(1)}}`);
  });

  it('gives the buffer of a broken large answer straight back', async () => {
    await call(6);
    const before = answerBuffers.snapshot();
    const response = await fetch(tg.url('das'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: assetsCall(BROKEN_PAGE) });
    expect(response.status).toBe(502);
    await response.text();
    expect(await call(8)).toBe(`{"jsonrpc":"2.0","id":1,"result":${resultFor(8)}}`);
    // Neither the broken answer nor the good one after it needed a new buffer.
    expect(answerBuffers.snapshot().allocated).toBe(before.allocated);
  });
});
