// Reorgs below the cache's finality: an upstream without the `finalized` tag (its finality is head
// − finality.depth, here 5 blocks) and an `anvil_reorg` deeper than that. Answers by number that
// were cached before the reorg (blocks, receipts, logs, eth_call) are never served after the
// gateway has seen it: each is fetched again and equals what the node now says.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { directRpc, useSeededAnvil } from './helpers/anvil.js';
import { blockNumber, cachingGateway, clientCalls, deployCounter, hex, metricsText, mine, READ_COUNTER, sample, untilFinalized, type Counter } from './helpers/cache-chain.js';
import type { TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const anvil = useSeededAnvil({}, { blocks: 1, txPerBlock: 1 });
const DEPTH = 5;

let counter: Counter;
let proxy: ScriptedUpstream;
let tg: TestGateway;

beforeAll(async () => {
  counter = await deployCounter(anvil.node.url);
  // An upstream that does not know the `finalized` tag: the gateway falls back to head − depth.
  proxy = await startScriptedUpstream((received) => {
    const body = received.body as { method?: string; params?: unknown[] };
    if (body.method === 'eth_getBlockByNumber' && body.params?.[0] === 'finalized') return { kind: 'rpc-error', code: -32602, message: 'invalid block tag' };
    return { kind: 'proxy', url: anvil.node.url };
  });
  tg = await cachingGateway([{ id: 'node', url: proxy.url }], { finality: { depth: DEPTH } });
}, 30_000);

afterAll(async () => {
  await tg?.close();
  await proxy?.close();
});

async function raw(method: string, params: unknown[]) {
  const response = await fetch(tg.url('eth'), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  return { cache: response.headers.get('x-cache'), body: JSON.parse(await response.text()) as { result?: unknown; error?: unknown } };
}

describe('a reorg deeper than finality.depth', () => {
  it('leaves no entry by number from before it reachable after it', async () => {
    // Three blocks with a bump each, then enough blocks that they are below head − depth.
    const bumps = [await counter.bump(), await counter.bump(), await counter.bump()];
    const target = Number.parseInt(bumps[1]!.receipt.blockNumber!, 16);
    await mine(anvil.node.url, DEPTH + 2);
    const head = await blockNumber(anvil.node.url);
    await untilFinalized(tg, 'eth', 'node', head - DEPTH);

    const at = hex(target);
    const calls: Array<[string, unknown[]]> = [
      ['eth_getBlockByNumber', [at, true]],
      ['eth_getBlockReceipts', [at]],
      ['eth_getLogs', [{ fromBlock: at, toBlock: at, address: counter.address }]],
      ['eth_call', [{ to: counter.address, data: READ_COUNTER }, at]],
    ];
    const before = new Map<string, unknown>();
    for (const [method, params] of calls) {
      expect((await raw(method, params)).cache, method).toBe('miss');
      const cached = await raw(method, params);
      expect(cached.cache, method).toBe('hit');
      expect(cached.body.result, method).toEqual(await directRpc(anvil.node.url, method, params));
      before.set(method, cached.body.result);
    }

    // Replace every block from the first bump on (deeper than DEPTH): the new blocks are empty.
    const reorgDepth = head - Number.parseInt(bumps[0]!.receipt.blockNumber!, 16) + 1;
    expect(reorgDepth).toBeGreaterThan(DEPTH);
    await directRpc(anvil.node.url, 'anvil_reorg', [reorgDepth, []]);
    // The gateway's next probe sees the finalized header change: it counts the reorg.
    await expect.poll(async () => sample(await metricsText(tg), 'tollgate_cache_reorgs_total{network="eth"}') ?? 0, { timeout: 15_000, interval: 50 }).toBeGreaterThanOrEqual(1);

    for (const [method, params] of calls) {
      const reached = clientCalls(proxy).filter((received) => received.methods[0] === method).length;
      const after = await raw(method, params);
      expect(after.cache, method).toBe('miss');
      expect(clientCalls(proxy).filter((received) => received.methods[0] === method).length, method).toBe(reached + 1);
      const now = await directRpc(anvil.node.url, method, params);
      expect(after.body.result, method).toEqual(now);
      expect(after.body.result, `${method} is the old branch's answer`).not.toEqual(before.get(method));
    }
  });
});
