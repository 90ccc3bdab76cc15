// A large answer's pooled buffer comes back to the pool when what the client is sent is a copy of
// it: the response cache's own copy (a cached pass-through call, a block), a batch, a WebSocket
// message. Each test ends with every buffer it took back in the pool, so the next starts from a
// settled pool (a reply's buffer comes back a moment after its client has read it, and a buffer
// still out would count in the next test's accounting). src/jsonrpc/answer-buffers.ts says why
// buffers are pooled.

import { describe, expect, it } from 'vitest';
import { WebSocket } from 'ws';
import { answerBuffers, POOLED_MIN_BYTES, type AnswerBufferStats } from '../src/jsonrpc/answer-buffers.js';
import { startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { useScriptedUpstreams, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';
import { sampleSum } from './helpers/worker-group.js';

/** Every answer here is about 1.4 MB: each takes one buffer of this size. */
const BUFFER_BYTES = 2 * 1024 * 1024;
const hashOf = (n: number): string => `0x${n.toString(16).padStart(64, '0')}`;
/** 20,000 hashes: about 1.4 MB of JSON. */
const largeList = (): string[] => Array.from({ length: 20_000 }, (_, index) => hashOf(index));

/** The upstream's result for a DAS page or a block (made up: verification is off). */
function resultOf(method: string, params: unknown): unknown {
  if (method === 'eth_getBlockByHash') {
    const hash = (params as [string])[0];
    return { hash, number: '0x10', parentHash: hashOf(1), timestamp: '0x64', transactions: largeList() };
  }
  // The page comes first: a buffer used again for another page would show there.
  return { page: (params as { page: number }).page, total: 20_000, items: largeList() };
}
const expectedReply = (method: string, params: unknown, id: number | string = 1): string =>
  `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"result":${JSON.stringify(resultOf(method, params))}}`;

/** Idle, or dropped once unused: either way a buffer the pool got back, not one lost to the collector. */
const keptBytes = (stats: AnswerBufferStats): number => stats.retainedBytes + stats.releasedBytes;

/** Waits until every buffer taken since `before` is back in the pool. */
function untilEveryBufferBack(before: AnswerBufferStats): Promise<void> {
  return until(() => {
    const now = answerBuffers.snapshot();
    return keptBytes(now) - keptBytes(before) === (now.allocated - before.allocated) * BUFFER_BYTES;
  }, 'every buffer taken back in the pool');
}

async function post(tg: TestGateway, network: string, body: string): Promise<{ body: string; cache: string | null }> {
  const response = await fetch(tg.url(network), { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  expect(response.status).toBe(200);
  return { body: await response.text(), cache: response.headers.get('x-cache') };
}

const call = (method: string, params: unknown, id: number | string = 1): string => JSON.stringify({ jsonrpc: '2.0', id, method, params });

describe('large answers copied before they are sent', () => {
  const newUpstream = useScriptedUpstreams();
  /** An upstream that answers every call with its large result. */
  const largeAnswers = (): Promise<ScriptedUpstream> =>
    newUpstream({ kind: 'result', result: (item: unknown) => resultOf((item as { method: string }).method, (item as { params: unknown }).params) });

  it('are large enough to be collected in pooled buffers', () => {
    expect(Buffer.byteLength(expectedReply('getAssetsByOwner', { page: 30 }))).toBeGreaterThan(POOLED_MIN_BYTES);
    expect(Buffer.byteLength(expectedReply('eth_getBlockByHash', [hashOf(0xa1), false]))).toBeGreaterThan(POOLED_MIN_BYTES);
  });

  it('give back the buffer of an answer the cache copied, and the copy is served intact after the buffer is reused', async () => {
    const upstream = await largeAnswers();
    // A method the gateway passes through, its answers kept for a minute by the response cache.
    const cache = { ttlSeconds: { getAssetsByOwner: 60 } };
    const tg = await startTestGateway({ networks: [{ id: 'das', kind: 'asset', cache, upstreams: [{ id: 'main', url: upstream.url }] }] });
    try {
      const page = (n: number): { ownerAddress: string; page: number } => ({ ownerAddress: 'J1S9H3QjnRtBbbuD4HjPV6RpRhwuk4zKbxsnCHuTgh9w', page: n });
      const before = answerBuffers.snapshot();
      expect(await post(tg, 'das', call('getAssetsByOwner', page(30)))).toEqual({ body: expectedReply('getAssetsByOwner', page(30)), cache: 'miss' });
      // The buffer comes back a turn after the copy.
      await untilEveryBufferBack(before);
      const allocated = answerBuffers.snapshot().allocated;
      expect(await post(tg, 'das', call('getAssetsByOwner', page(32)))).toEqual({ body: expectedReply('getAssetsByOwner', page(32)), cache: 'miss' });
      expect(answerBuffers.snapshot().allocated).toBe(allocated);
      // The second answer was collected in the first one's buffer; the cache kept a copy of its own.
      expect(await post(tg, 'das', call('getAssetsByOwner', page(30)))).toEqual({ body: expectedReply('getAssetsByOwner', page(30)), cache: 'hit' });
      await untilEveryBufferBack(before);
    } finally {
      await tg.close();
    }
  });

  it('give back the buffers of results copied into a batch or a WebSocket message', async () => {
    const upstream = await largeAnswers();
    const tg = await startTestGateway({ networks: [{ id: 'das', kind: 'asset', upstreams: [{ id: 'main', url: upstream.url }] }] });
    const page = (n: number): { groupKey: string; groupValue: string; page: number } => ({ groupKey: 'collection', groupValue: 'J1S9H3QjnRtBbbuD4HjPV6RpRhwuk4zKbxsnCHuTgh9w', page: n });
    const socket = new WebSocket(tg.url('das').replace('http://', 'ws://').replace('/das/v3/', '/das/ws/v3/'));
    const opened = new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      socket.once('error', reject);
    });
    try {
      const before = answerBuffers.snapshot();
      const batch = await post(tg, 'das', `[${call('getAssetsByGroup', page(40), 'a')},${call('getAssetsByGroup', page(42), 'b')}]`);
      expect(batch.body).toBe(`[${expectedReply('getAssetsByGroup', page(40), 'a')},${expectedReply('getAssetsByGroup', page(42), 'b')}]`);
      await untilEveryBufferBack(before);

      await opened;
      const message = new Promise<string>((resolve) => socket.once('message', (data: Buffer) => resolve(data.toString('utf8'))));
      socket.send(call('getAssetsByGroup', page(44)));
      expect(await message).toBe(expectedReply('getAssetsByGroup', page(44)));
      await untilEveryBufferBack(before);
    } finally {
      socket.close();
      await tg.close();
    }
  });

  it('give back the buffer of a block coalesced callers share, and the cached copy is served intact after the buffer is reused', async () => {
    const first = hashOf(0xa1);
    const second = hashOf(0xb2);
    // The first block's answer waits until the test lets it go, so that identical calls join it.
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const upstream = await newUpstream(async (received) => {
      const params = (received.body as { params: [string] }).params;
      if (params[0] === first) await released;
      return { kind: 'result', result: resultOf('eth_getBlockByHash', params) };
    });
    const tg = await startTestGateway({ networks: [{ id: 'evm', kind: 'evm', chainId: 31337, verification: 'off', upstreams: [{ id: 'main', url: upstream.url }] }] });
    try {
      const inFlight = async (): Promise<number> => {
        const text = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
        return sampleSum(text, 'tollgate_requests_in_flight');
      };
      const block = (hash: string): string => call('eth_getBlockByHash', [hash, false]);
      const expected = (hash: string): string => expectedReply('eth_getBlockByHash', [hash, false]);
      const before = answerBuffers.snapshot();
      const callers = [0, 1, 2].map(() => post(tg, 'evm', block(first)));
      await until(async () => upstream.calls.length === 1 && (await inFlight()) === 3, 'three callers, one upstream call');
      release();
      // A caller that came after the answer was served from the cache.
      for (const answer of await Promise.all(callers)) expect(answer.body).toBe(expected(first));
      expect(upstream.calls).toHaveLength(1);
      // Shared by the callers that joined the call, the buffer still comes back once copied.
      await untilEveryBufferBack(before);
      const allocated = answerBuffers.snapshot().allocated;
      expect(await post(tg, 'evm', block(second))).toEqual({ body: expected(second), cache: 'miss' });
      expect(answerBuffers.snapshot().allocated).toBe(allocated);
      expect(await post(tg, 'evm', block(first))).toEqual({ body: expected(first), cache: 'hit' });
      await untilEveryBufferBack(before);
    } finally {
      release();
      await tg.close();
    }
  });
});
