// The shared tier: two gateways on one real redis-server, each over its own recording proxy in
// front of one anvil. What A fetched, B answers without reaching the node; a gateway started
// afterwards (a restart) does too; and with redis-server stopped in the middle of a load, no
// client sees an error and both keep answering (from their own memory and the node).

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useSeededAnvil } from './helpers/anvil.js';
import { blockNumber, cachingGateway, clientCalls, deployCounter, hex, metricsText, mine, READ_COUNTER, sample, untilFinalized, type Counter } from './helpers/cache-chain.js';
import type { TestGateway } from './helpers/gateway.js';
import { useRedis } from './helpers/redis.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const anvil = useSeededAnvil({}, { blocks: 1, txPerBlock: 1 });
const redis = useRedis();

let counter: Counter;
let bumps: Array<{ tx: string; block: number; hash: string }>;
const opened: Array<{ close(): Promise<void> }> = [];

beforeAll(async () => {
  counter = await deployCounter(anvil.node.url);
  bumps = [];
  for (let n = 0; n < 4; n += 1) {
    const { hash, receipt } = await counter.bump();
    bumps.push({ tx: hash, block: Number.parseInt(receipt.blockNumber!, 16), hash: receipt.blockHash! });
  }
  await mine(anvil.node.url, 70);
}, 30_000);

afterAll(async () => {
  for (const item of opened.reverse()) await item.close();
});

/** A gateway with the shared tier on this file's redis-server, over a proxy of its own. */
async function replica(): Promise<{ tg: TestGateway; proxy: ScriptedUpstream }> {
  const proxy = await startScriptedUpstream({ kind: 'proxy', url: anvil.node.url });
  opened.push(proxy);
  const tg = await cachingGateway([{ id: 'anvil', url: proxy.url }], {}, { cache: { shared: { url: redis.url, ttlSeconds: 600, maxItemBytes: 1_000_000 } } });
  opened.push(tg);
  await untilFinalized(tg, 'eth', 'anvil', (await blockNumber(anvil.node.url)) - 64);
  return { tg, proxy };
}

/** Calls of every class that A fetches and B must answer. */
function workload(): Array<[string, unknown[]]> {
  const at = hex(bumps[1]!.block);
  return [
    ['eth_call', [{ to: counter.address, data: READ_COUNTER }, at]],
    ['eth_getBlockReceipts', [at]],
    ['eth_getBlockByNumber', [at, true]],
    ['eth_getTransactionReceipt', [bumps[0]!.tx]],
    ['eth_getLogs', [{ fromBlock: hex(bumps[0]!.block), toBlock: hex(bumps[2]!.block), address: counter.address }]],
    // Large enough to be compressed in Redis (over 1 KiB).
    ['eth_getBlockReceipts', [hex(bumps[2]!.block)]],
    // Blocks by hash, verified once by whoever fetched them. The hydrated one is a block no call
    // above touches: checking receipts fetches their block by hash, so that block would be a hit.
    ['eth_getBlockByHash', [anvil.seed.blocksWithTransactions[0]!, false]],
    ['eth_getBlockByHash', [bumps[3]!.hash, true]],
  ];
}

async function ask(tg: TestGateway, method: string, params: unknown[]) {
  const response = await fetch(tg.url('eth'), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 3, method, params }),
  });
  return { status: response.status, cache: response.headers.get('x-cache'), text: await response.text() };
}

describe('the shared tier', () => {
  it('what A fetched, B answers with zero upstream calls; a gateway started later does too', { timeout: 60_000 }, async () => {
    const a = await replica();
    const b = await replica();
    const answers = new Map<string, string>();
    for (const [method, params] of workload()) {
      const first = await ask(a.tg, method, params);
      expect(first.cache, `${method} ${JSON.stringify(params)}`).toBe('miss');
      expect(JSON.parse(first.text).result, method).toBeTruthy();
      answers.set(`${method}${JSON.stringify(params)}`, first.text);
    }
    await expect.poll(async () => sample(await metricsText(a.tg), 'tollgate_cache_writes_total{network="eth",method="eth_getBlockReceipts",tier="shared"}') ?? 0).toBe(2);

    for (const [method, params] of workload()) {
      const fromShared = await ask(b.tg, method, params);
      expect(fromShared.cache, method).toBe('hit');
      expect(fromShared.text, method).toBe(answers.get(`${method}${JSON.stringify(params)}`));
    }
    expect(clientCalls(b.proxy)).toEqual([]);
    const bMetrics = await metricsText(b.tg);
    expect(sample(bMetrics, 'tollgate_cache_upstream_calls_saved_total{network="eth",method="eth_getBlockReceipts",reason="shared"}')).toBe(2);

    // A process that starts afterwards (a restart) answers from Redis as well.
    await b.tg.close();
    const restarted = await replica();
    for (const [method, params] of workload()) {
      const answer = await ask(restarted.tg, method, params);
      expect(answer.cache, method).toBe('hit');
      expect(answer.text, method).toBe(answers.get(`${method}${JSON.stringify(params)}`));
    }
    expect(clientCalls(restarted.proxy)).toEqual([]);
  });

  it('redis-server stopped in the middle of a load: no client error, both gateways keep answering', { timeout: 60_000 }, async () => {
    const ROUNDS = 3;
    const a = await replica();
    const b = await replica();
    const calls = workload();
    // Some of the load is new to both (different blocks), so misses go on during the outage.
    for (let block = 1; block <= 6; block += 1) calls.push(['eth_getBalance', [counter.from, hex(block)]]);
    let answered = 0;
    const failures: string[] = [];
    async function load(tg: TestGateway, round: number): Promise<void> {
      for (let index = 0; index < calls.length; index += 1) {
        const [method, params] = calls[(index + round) % calls.length]!;
        const answer = await ask(tg, method, params);
        answered += 1;
        if (answer.status !== 200 || JSON.parse(answer.text).result === undefined) failures.push(`${method} ${answer.status} ${answer.text.slice(0, 200)}`);
      }
    }
    const rounds = async (tg: TestGateway) => {
      for (let round = 0; round < ROUNDS; round += 1) await load(tg, round);
    };
    const running = Promise.all([rounds(a.tg), rounds(b.tg)]);
    await expect.poll(() => answered, { timeout: 20_000, interval: 5 }).toBeGreaterThanOrEqual(calls.length);
    await redis.stop();
    await running;
    expect(failures).toEqual([]);
    expect(answered).toBe(2 * ROUNDS * calls.length);
    // After the outage both still answer, hits from their own memory and misses from the node.
    for (const tg of [a.tg, b.tg]) {
      const hit = await ask(tg, calls[0]![0], calls[0]![1]);
      expect(hit.status).toBe(200);
      expect(hit.cache).toBe('hit');
      const miss = await ask(tg, 'eth_getBalance', [counter.from, hex(20)]);
      expect(miss.status).toBe(200);
      expect(JSON.parse(miss.text).result).toMatch(/^0x/);
    }
    expect(sample(await metricsText(a.tg), 'tollgate_cache_shared_errors_total')).toBeGreaterThan(0);
  });
});
