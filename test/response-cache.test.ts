// The response cache against real anvil through a recording proxy that counts what reaches the
// node: every class answers an identical second call from the cache with the first answer's
// bytes, calls at tags or unfinalized numbers always go upstream, finality moves the line,
// empty and lagging answers are never kept, hits are charged like misses, and odd params or
// headers never break a call. Health probes run every 100 ms (they tell finality); their calls
// are told apart from the clients' by shape (helpers/cache-chain.ts).

import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { utcDay } from '../src/metering/meter.js';
import { directRpc, useSeededAnvil } from './helpers/anvil.js';
import { blockNumber, cachingGateway, clientCalls, deployCounter, hex, metricsText, mine, READ_COUNTER, sample, untilFinalized, type Counter } from './helpers/cache-chain.js';
import type { TestGateway } from './helpers/gateway.js';
import { useScriptedUpstreams, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const anvil = useSeededAnvil({}, { blocks: 2, txPerBlock: 2 });
const upstream = useScriptedUpstreams();
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Anvil's finalized block trails its head by this much. */
const ANVIL_FINALITY = 64;

let counter: Counter;
/** A block with one bump (a transaction and a log), finalized by the time tests run. */
let bumped: { number: number; hash: string; tx: string };
/** A finalized block without any log. */
let quiet: number;

beforeAll(async () => {
  counter = await deployCounter(anvil.node.url);
  const { hash: tx, receipt } = await counter.bump();
  bumped = { number: Number.parseInt(receipt.blockNumber!, 16), hash: receipt.blockHash!, tx };
  await mine(anvil.node.url, 1);
  quiet = await blockNumber(anvil.node.url);
  await mine(anvil.node.url, ANVIL_FINALITY + 10);
}, 30_000);

async function gatewayOverAnvil(network: Record<string, unknown> = {}, config: Record<string, unknown> = {}): Promise<{ tg: TestGateway; proxy: ScriptedUpstream }> {
  const proxy = await upstream({ kind: 'proxy', url: anvil.node.url });
  const tg = await cachingGateway([{ id: 'anvil', url: proxy.url }], network, config);
  cleanups.push(() => tg.close());
  await untilFinalized(tg, 'eth', 'anvil', (await blockNumber(anvil.node.url)) - ANVIL_FINALITY);
  return { tg, proxy };
}

/** One call, its exact response bytes and headers. */
async function raw(tg: TestGateway, method: string, params: unknown[], headers: Record<string, string> = {}) {
  const response = await fetch(tg.url('eth'), {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method, params }),
  });
  return { status: response.status, headers: response.headers, text: await response.text() };
}

/** Calls twice: the first reaches the node, the second is a hit with the same bytes and no upstream call. */
async function expectCachedSecondTime(tg: TestGateway, proxy: ScriptedUpstream, method: string, params: unknown[]): Promise<void> {
  const first = await raw(tg, method, params);
  expect(first.status, `${method} ${first.text}`).toBe(200);
  expect(first.headers.get('x-cache'), method).toBe('miss');
  expect(JSON.parse(first.text)).toEqual({ jsonrpc: '2.0', id: 7, result: await directRpc(anvil.node.url, method, params) });
  const before = clientCalls(proxy).length;
  const second = await raw(tg, method, params);
  expect(second.headers.get('x-cache'), method).toBe('hit');
  expect(second.text, method).toBe(first.text);
  expect(clientCalls(proxy).length, `${method} reached the node again`).toBe(before);
}

/** Calls twice: both reach the node. */
async function expectUpstreamEachTime(tg: TestGateway, proxy: ScriptedUpstream, method: string, params: unknown[]): Promise<void> {
  for (let attempt = 1; attempt <= 2; attempt += 1) {
    const before = clientCalls(proxy).filter((received) => received.methods.includes(method)).length;
    const response = await raw(tg, method, params);
    expect(response.status).toBe(200);
    expect(response.headers.get('x-cache'), `${method} ${JSON.stringify(params)}`).toBe('miss');
    expect(clientCalls(proxy).filter((received) => received.methods.includes(method)).length, `${method} attempt ${attempt}`).toBe(before + 1);
  }
}

describe('every class: the second identical call is answered from the cache', () => {
  it('pinned by a block hash', async () => {
    const { tg, proxy } = await gatewayOverAnvil();
    const read = { to: counter.address, data: READ_COUNTER };
    await expectCachedSecondTime(tg, proxy, 'eth_getBlockByHash', [bumped.hash, false]);
    await expectCachedSecondTime(tg, proxy, 'eth_getBlockReceipts', [bumped.hash]);
    await expectCachedSecondTime(tg, proxy, 'eth_getBlockTransactionCountByHash', [bumped.hash]);
    await expectCachedSecondTime(tg, proxy, 'eth_getTransactionByBlockHashAndIndex', [bumped.hash, '0x0']);
    await expectCachedSecondTime(tg, proxy, 'eth_call', [read, { blockHash: bumped.hash }]);
    await expectCachedSecondTime(tg, proxy, 'eth_getLogs', [{ blockHash: bumped.hash }]);
  });

  it('finalized by number: blocks, receipts, logs, state', async () => {
    const { tg, proxy } = await gatewayOverAnvil();
    const at = hex(bumped.number);
    await expectCachedSecondTime(tg, proxy, 'eth_getBlockByNumber', [at, true]);
    await expectCachedSecondTime(tg, proxy, 'eth_getBlockReceipts', [at]);
    await expectCachedSecondTime(tg, proxy, 'eth_getLogs', [{ fromBlock: hex(bumped.number - 1), toBlock: at, address: counter.address }]);
    await expectCachedSecondTime(tg, proxy, 'eth_call', [{ to: counter.address, data: READ_COUNTER }, at]);
    await expectCachedSecondTime(tg, proxy, 'eth_getBalance', [counter.from, at]);
    await expectCachedSecondTime(tg, proxy, 'eth_getCode', [counter.address, at]);
    await expectCachedSecondTime(tg, proxy, 'eth_getStorageAt', [counter.address, '0x0', at]);
    await expectCachedSecondTime(tg, proxy, 'eth_getTransactionCount', [counter.from, at]);
    await expectCachedSecondTime(tg, proxy, 'eth_getBlockTransactionCountByNumber', [at]);
    // An empty range that is finalized, with the upstream's head past it, is kept too.
    await expectCachedSecondTime(tg, proxy, 'eth_getLogs', [{ fromBlock: hex(quiet), toBlock: hex(quiet), address: counter.address }]);
  });

  it('by transaction hash, once the answer\'s block is finalized (checked against the verified block)', async () => {
    const { tg, proxy } = await gatewayOverAnvil();
    await expectCachedSecondTime(tg, proxy, 'eth_getTransactionReceipt', [bumped.tx]);
    await expectCachedSecondTime(tg, proxy, 'eth_getTransactionByHash', [bumped.tx]);
    // Traces name no block: the transaction's is looked up before they are kept.
    await expectCachedSecondTime(tg, proxy, 'debug_traceTransaction', [bumped.tx, {}]);
    await expectCachedSecondTime(tg, proxy, 'trace_transaction', [bumped.tx]);
  });

  it('the finalized tag is resolved to its number: the node is asked by number, and the answer is kept', async () => {
    const { tg, proxy } = await gatewayOverAnvil();
    const finalized = (await blockNumber(anvil.node.url)) - ANVIL_FINALITY;
    const first = await raw(tg, 'eth_getBalance', [counter.from, 'finalized']);
    expect(first.headers.get('x-cache')).toBe('miss');
    const sent = clientCalls(proxy).find((received) => received.methods[0] === 'eth_getBalance')!.body as { params: unknown[] };
    expect(sent.params).toEqual([counter.from, hex(finalized)]);
    const second = await raw(tg, 'eth_getBalance', [counter.from, 'finalized']);
    expect(second.headers.get('x-cache')).toBe('hit');
    expect(second.text).toBe(first.text);
    // The same block by its number is the same entry.
    expect((await raw(tg, 'eth_getBalance', [counter.from, hex(finalized)])).headers.get('x-cache')).toBe('hit');
  });

  it('calls at tags or at numbers above the finalized block always reach the node', async () => {
    const { tg, proxy } = await gatewayOverAnvil();
    const head = await blockNumber(anvil.node.url);
    const read = { to: counter.address, data: READ_COUNTER };
    for (const tag of ['latest', 'pending', 'safe']) await expectUpstreamEachTime(tg, proxy, 'eth_call', [read, tag]);
    await expectUpstreamEachTime(tg, proxy, 'eth_getBalance', [counter.from]);
    await expectUpstreamEachTime(tg, proxy, 'eth_getBalance', [counter.from, hex(head - 10)]);
    await expectUpstreamEachTime(tg, proxy, 'eth_getBlockByNumber', [hex(head - 10), true]);
    await expectUpstreamEachTime(tg, proxy, 'eth_getLogs', [{ fromBlock: hex(bumped.number), toBlock: 'latest' }]);
  });
});

describe('finality moves', () => {
  it('a call at head - 10 is not cached; once 64 more blocks are mined and probed, the same call is', async () => {
    const { tg, proxy } = await gatewayOverAnvil();
    const target = (await blockNumber(anvil.node.url)) - 10;
    const params = [counter.from, hex(target)];
    await expectUpstreamEachTime(tg, proxy, 'eth_getBalance', params);
    await mine(anvil.node.url, ANVIL_FINALITY);
    await untilFinalized(tg, 'eth', 'anvil', target);
    await expectCachedSecondTime(tg, proxy, 'eth_getBalance', params);
  });
});

describe('empty and lagging answers are never kept', () => {
  it('a range above the head, an empty range that is not finalized, a null receipt from a lagging upstream', async () => {
    const { tg, proxy } = await gatewayOverAnvil();
    const head = await blockNumber(anvil.node.url);
    await expectUpstreamEachTime(tg, proxy, 'eth_getLogs', [{ fromBlock: hex(head + 100), toBlock: hex(head + 200) }]);
    // Mined just now: after the head, before finality.
    await mine(anvil.node.url, 1);
    const fresh = head + 1;
    expect((await raw(tg, 'eth_getLogs', [{ fromBlock: hex(fresh), toBlock: hex(fresh) }])).text).toContain('"result":[]');
    await expectUpstreamEachTime(tg, proxy, 'eth_getLogs', [{ fromBlock: hex(fresh), toBlock: hex(fresh) }]);
  });

  it('a null receipt from a lagging upstream is not kept: the next call gets the receipt', async () => {
    let lagging = true;
    const lagger = await upstream((received) =>
      lagging && received.methods[0] === 'eth_getTransactionReceipt' ? { kind: 'result', result: null } : { kind: 'proxy', url: anvil.node.url },
    );
    const tg = await cachingGateway([{ id: 'lagger', url: lagger.url }]);
    cleanups.push(() => tg.close());
    await untilFinalized(tg, 'eth', 'lagger', bumped.number);
    const first = await raw(tg, 'eth_getTransactionReceipt', [bumped.tx]);
    expect(JSON.parse(first.text).result).toBeNull();
    lagging = false;
    const second = await raw(tg, 'eth_getTransactionReceipt', [bumped.tx]);
    expect(second.headers.get('x-cache')).toBe('miss');
    expect(JSON.parse(second.text).result.transactionHash).toBe(bumped.tx);
    expect((await raw(tg, 'eth_getTransactionReceipt', [bumped.tx])).headers.get('x-cache')).toBe('hit');
  });
});

describe('charging', () => {
  it('a hit costs the method\'s price; usage = answers × price across hits and misses', async () => {
    const { tg } = await gatewayOverAnvil();
    const at = hex(bumped.number);
    const read = [{ to: counter.address, data: READ_COUNTER }, at];
    const plan: Array<[string, unknown[], number, number]> = [
      ['eth_call', read, 80, 3],
      ['eth_getBlockReceipts', [at], 1000, 2],
      ['eth_getTransactionReceipt', [bumped.tx], 80, 2],
      ['eth_call', [read[0], 'latest'], 80, 2],
    ];
    const seen = new Map<string, { cache: Array<string | null> }>();
    for (const [method, params, price, times] of plan) {
      for (let n = 0; n < times; n += 1) {
        const response = await raw(tg, method, params);
        expect(response.status).toBe(200);
        expect(response.headers.get('x-credits-cost'), method).toBe(String(price));
        const key = `${method}${JSON.stringify(params)}`;
        seen.set(key, { cache: [...(seen.get(key)?.cache ?? []), response.headers.get('x-cache')] });
      }
    }
    // Hits and misses both happened, and were charged alike.
    expect([...seen.values()].map((entry) => entry.cache)).toEqual([['miss', 'hit', 'hit'], ['miss', 'hit'], ['miss', 'hit'], ['miss', 'miss']]);
    const expected = plan.reduce((sum, [, , price, times]) => sum + price * times, 0);
    const [spent] = await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day: utcDay(Date.now()) }]);
    expect(spent!.teamUsed).toBe(expected);
    await tg.gateway.drain();
    const rows = await tg.store.usage({ teamId: tg.team.id, fromDay: utcDay(Date.now()), toDay: utcDay(Date.now()) });
    const byMethod = Object.fromEntries(rows.map((row) => [row.method, { credits: row.credits, requests: row.requests }]));
    expect(byMethod).toEqual({
      eth_call: { credits: 5 * 80, requests: 5 },
      eth_getBlockReceipts: { credits: 2 * 1000, requests: 2 },
      eth_getTransactionReceipt: { credits: 2 * 80, requests: 2 },
    });
  });
});

describe('the client\'s Cache-Control and X-Cache', () => {
  it('no-cache skips the read (X-Cache: bypass, one upstream call) and refreshes the entry; malformed values are ignored', async () => {
    const { tg, proxy } = await gatewayOverAnvil();
    const params = [counter.from, hex(bumped.number)];
    await expectCachedSecondTime(tg, proxy, 'eth_getBalance', params);
    const before = clientCalls(proxy).length;
    const bypass = await raw(tg, 'eth_getBalance', params, { 'cache-control': 'max-age=0, No-Cache' });
    expect(bypass.status).toBe(200);
    expect(bypass.headers.get('x-cache')).toBe('bypass');
    expect(clientCalls(proxy).length).toBe(before + 1);
    for (const odd of ['no-cache=', '"no-cache"', 'max-age=abc', ',,,;;==', 'nocache', ',' .repeat(4000), 'no-cache\u00ff'.replace('\u00ff', 'x')]) {
      const response = await raw(tg, 'eth_getBalance', params, { 'cache-control': odd });
      expect(response.status, odd).toBe(200);
      expect(response.headers.get('x-cache'), odd.slice(0, 20)).toBe('hit');
    }
    expect(clientCalls(proxy).length).toBe(before + 1);
  });
});

describe('bad input', () => {
  it('huge params are keyed by a bounded hash: cached, and the cache stays within its bytes', async () => {
    const { tg, proxy } = await gatewayOverAnvil({}, { cache: { maxBytes: 4 * 1024 * 1024 } });
    // 300 KB of calldata (the counter reads any calldata as a read).
    const data = `${READ_COUNTER}${'ab'.repeat(150_000)}`;
    await expectCachedSecondTime(tg, proxy, 'eth_call', [{ to: counter.address, data }, hex(bumped.number)]);
    const bytes = sample(await metricsText(tg), 'tollgate_cache_bytes');
    // The entry is its 32-byte answer and a bounded key, not the params.
    expect(bytes).toBeLessThan(10_000);
  });

  it('method names that are members of every JavaScript object are just unknown methods, not cache entries', async () => {
    // Unlisted methods are priced (`*`), so these names reach the cache's method table.
    const { tg, proxy } = await gatewayOverAnvil({ methods: { '*': 1 } });
    for (const method of ['constructor', 'toString', 'hasOwnProperty', 'valueOf']) {
      const before = clientCalls(proxy).length;
      const response = await raw(tg, method, []);
      expect(response.status, method).toBe(200);
      expect(response.headers.get('x-cache'), method).toBeNull();
      // The node's own answer to a method it does not know, passed on: not the gateway's internal error.
      expect(JSON.parse(response.text), method).toEqual({ jsonrpc: '2.0', id: 7, error: expect.objectContaining({ code: -32601 }) });
      expect(clientCalls(proxy).length, method).toBe(before + 1);
    }
  });

  it('params that cannot be canonicalised are simply forwarded, never cached and never an error of the gateway', async () => {
    const { tg, proxy } = await gatewayOverAnvil();
    const at = hex(bumped.number);
    let nested: unknown = 'x';
    for (let depth = 0; depth < 20; depth += 1) nested = [nested];
    // A client's JSON number beyond 2^53 (JSON.parse has already rounded it): sent as raw JSON text.
    const unsafe = JSON.parse(`{"value": ${'9'.repeat(20)}}`) as { value: number };
    for (const params of [
      [{ to: counter.address, data: READ_COUNTER, value: unsafe.value }, at],
      [{ to: counter.address, data: READ_COUNTER, gas: 1.5 }, at],
      [{ to: counter.address, data: READ_COUNTER, extra: nested }, at],
    ]) {
      for (let attempt = 0; attempt < 2; attempt += 1) {
        const before = clientCalls(proxy).length;
        const response = await raw(tg, 'eth_call', params);
        expect(response.status).toBe(200);
        expect(response.headers.get('x-cache')).toBeNull();
        // Whatever the node said (a result or its own error), passed on.
        expect(JSON.parse(response.text)).toHaveProperty('jsonrpc', '2.0');
        expect(clientCalls(proxy).length).toBe(before + 1);
      }
    }
  });
});

describe('realtime', () => {
  it('identical concurrent calls share one upstream call; nothing is kept without realtimeTtlMs', async () => {
    const slow = await upstream({ kind: 'proxy', url: anvil.node.url, delayMs: 300 });
    const tg = await cachingGateway([{ id: 'slow', url: slow.url }], { healthCheck: { intervalMs: 0 } });
    cleanups.push(() => tg.close());
    const answers = await Promise.all(Array.from({ length: 20 }, () => raw(tg, 'eth_gasPrice', [])));
    expect(slow.calls.filter((received) => received.methods[0] === 'eth_gasPrice')).toHaveLength(1);
    for (const answer of answers) expect(answer.text).toBe(answers[0]!.text);
    await raw(tg, 'eth_gasPrice', []);
    expect(slow.calls.filter((received) => received.methods[0] === 'eth_gasPrice')).toHaveLength(2);
  });

  it('with realtimeTtlMs the head is kept that long, and a cached head never goes backwards', async () => {
    let head = 100;
    const node = await upstream((received) => (received.methods[0] === 'eth_blockNumber' ? { kind: 'result', result: hex(head) } : { kind: 'rpc-error', code: -32601, message: 'no' }));
    let offsetMs = 0;
    const tg = await cachingGateway([{ id: 'node', url: node.url }], { healthCheck: { intervalMs: 0 }, cache: { realtimeTtlMs: 1_000 } }, {}, () => Date.now() + offsetMs);
    cleanups.push(() => tg.close());
    const numberOf = async () => JSON.parse((await raw(tg, 'eth_blockNumber', [])).text).result as string;
    expect(await numberOf()).toBe(hex(100));
    head = 101;
    expect(await numberOf()).toBe(hex(100)); // within the TTL: the cached head
    expect(node.calls).toHaveLength(1);
    offsetMs += 1_001;
    head = 99; // an upstream behind the head already served
    expect(await numberOf()).toBe(hex(100));
    offsetMs += 1_001;
    head = 105;
    expect(await numberOf()).toBe(hex(105));
    expect(node.calls).toHaveLength(3);
  });
});

describe('asset networks: by finalized slot', () => {
  it('getBlock at a finalized slot is kept; above it, never', async () => {
    const slots = { head: 1_000, finalized: 960 };
    const solana = await upstream((received) => {
      const body = received.body as { method: string; params?: unknown[] };
      if (body.method === 'getSlot') {
        const finalized = (body.params?.[0] as { commitment?: string } | undefined)?.commitment === 'finalized';
        return { kind: 'result', result: finalized ? slots.finalized : slots.head };
      }
      if (body.method === 'getBlock') return { kind: 'result', result: { blockhash: `slot-${String(body.params?.[0])}`, parentSlot: Number(body.params?.[0]) - 1, transactions: [] } };
      return { kind: 'rpc-error', code: -32601, message: 'no' };
    });
    const tg = await cachingGateway([{ id: 'rpc', url: solana.url }], { kind: 'asset', chainId: undefined, baseUrls: ['*/eth'] });
    cleanups.push(() => tg.close());
    await untilFinalized(tg, 'eth', 'rpc', slots.finalized);
    const getBlocks = () => solana.calls.filter((received) => received.methods[0] === 'getBlock').length;
    for (const [slot, cached] of [[950, true], [990, false]] as const) {
      const first = await raw(tg, 'getBlock', [slot]);
      expect(first.headers.get('x-cache')).toBe('miss');
      const before = getBlocks();
      const second = await raw(tg, 'getBlock', [slot]);
      expect(second.headers.get('x-cache')).toBe(cached ? 'hit' : 'miss');
      expect(second.text).toBe(first.text);
      expect(getBlocks()).toBe(cached ? before : before + 1);
    }
  });
});
