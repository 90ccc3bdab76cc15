// eth_getLogs at any range through a real gateway, in front of a real anvil behind two recording
// proxies that cap eth_getLogs the way providers do:
//   A refuses ranges over 100 blocks with QuickNode's words, B over 500 with Alchemy's, and
//   either one answers Infura's "query returned more than N results" past a result count.
// anvil itself has no cap: its own answer for a range is the reference, log for log.
// Block counts are a tenth of the production-sized example (caps of 1,000 and 5,000 blocks, a
// 20,000-block call): the same 20 chunks, but a chain anvil can mine in seconds (its cost per
// mined block grows with the chain's length, so 20,000 blocks take many minutes).
//
// The emitting contract is hand-written EVM bytecode (test/helpers/log-emitter.ts): every call
// leaves a Ping and a Pong log in its block.

import { Contract, JsonRpcProvider } from 'ethers';
import { createPublicClient, http, type Address } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { startAnvil, type AnvilNode } from '../src/devnet/anvil.js';
import { utcDay } from '../src/metering/meter.js';
import { directRpc } from './helpers/anvil.js';
import { untilFinalized } from './helpers/cache-chain.js';
import { buildEmittingChain, LOG_EMITTER_ABI as ABI, PING_TOPIC as PING, PONG_TOPIC as PONG } from './helpers/log-emitter.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ReceivedCall, type RpcItem, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';

/** Result count past which either proxy answers Infura's "more than N results". */
const MAX_RESULTS = 50;
const A_RANGE = 100;
const B_RANGE = 500;
/** Blocks mined between two emitting blocks in the sparse part (so most blocks carry no log). */
const GAP = 10;
/** Emitting calls in the sparse part: one block each, GAP empty blocks after each. */
const SPARSE_CALLS = 200;
/** Blocks of the dense part, each with DENSE_PER_BLOCK calls (2 logs each): one chunk over MAX_RESULTS. */
const DENSE_BLOCKS = 30;
const DENSE_PER_BLOCK = 3;
const PRICE = 255;

let node: AnvilNode;
let contract: Address;
let firstLogBlock: number;
let denseFrom: number;
let head: number;
let a: ScriptedUpstream;
let b: ScriptedUpstream;
/** The same two caps in front of anvil for the probed network (so its probes do not mix with a's and b's calls). */
let probedA: ScriptedUpstream;
let probedB: ScriptedUpstream;
let tg: TestGateway;
/** Chunk ranges that fail on both upstreams (HTTP 500), set by a test. */
const brokenFrom = new Set<number>();

const call = (method: string, params: unknown[], id: unknown = 1) => ({ jsonrpc: '2.0', id, method, params });
const num = (value: string) => Number.parseInt(value, 16);
const hex = (n: number) => `0x${n.toString(16)}`;

/** The eth_getLogs filters a proxy received, with their ranges in numbers. */
function logsCalls(upstream: ScriptedUpstream, from = 0, to = upstream.calls.length): Array<{ from: number; to: number }> {
  return upstream.calls.slice(from, to).flatMap((received) => {
    const body = received.body as RpcItem;
    if (body?.method !== 'eth_getLogs') return [];
    const [filter] = body.params as Array<{ fromBlock: string; toBlock: string }>;
    return [{ from: num(filter!.fromBlock), to: num(filter!.toBlock) }];
  });
}

/**
 * A provider's cap in front of anvil: eth_getLogs wider than `maxRange` gets `refusal`; an answer
 * with more than MAX_RESULTS logs becomes Infura's error; a chunk in `brokenFrom` gets HTTP 500.
 */
function cappedProxy(maxRange: number, refusal: { code: number; message: string }): (received: ReceivedCall) => ScriptedBehaviour {
  return (received) => {
    const body = received.body as RpcItem;
    if (body?.method === 'eth_getLogs' || body?.method === 'eth_getFilterLogs') {
      const [filter] = body.method === 'eth_getLogs' ? (body.params as Array<{ fromBlock?: string; toBlock?: string; blockHash?: string }>) : [{}];
      if (filter!.fromBlock?.startsWith('0x') && filter!.toBlock?.startsWith('0x')) {
        const from = num(filter!.fromBlock);
        if (brokenFrom.has(from)) return { kind: 'status', status: 500 };
        if (num(filter!.toBlock) - from + 1 > maxRange) return { kind: 'rpc-error', ...refusal };
      }
      return {
        kind: 'proxy',
        url: node.url,
        transform: (response) => {
          const answer = response as { id: unknown; result?: unknown[] };
          if (Array.isArray(answer.result) && answer.result.length > MAX_RESULTS) {
            return { jsonrpc: '2.0', id: answer.id, error: { code: -32005, message: `query returned more than ${MAX_RESULTS} results` } };
          }
          return answer;
        },
      };
    }
    return { kind: 'proxy', url: node.url };
  };
}

async function teamSpend(): Promise<number> {
  const [result] = await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day: utcDay(Date.now()) }]);
  return result!.teamUsed;
}

function lastLogLine(): Record<string, unknown> {
  const lines = tg.logLines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => Array.isArray(line.methods));
  return lines.at(-1)!;
}

beforeAll(async () => {
  node = await startAnvil();
  // Hundreds of blocks with logs, thousands without; then a dense part; then enough empty blocks
  // that anvil's finalized block (64 behind its head) is past the dense part.
  ({ contract, firstLogBlock, denseFrom, head } = await buildEmittingChain(node.url, { sparseCalls: SPARSE_CALLS, gap: GAP, denseBlocks: DENSE_BLOCKS, densePerBlock: DENSE_PER_BLOCK, tail: 150 }));

  a = await startScriptedUpstream(cappedProxy(A_RANGE, { code: -32614, message: `eth_getLogs is limited to a ${A_RANGE.toLocaleString('en')} range` }));
  b = await startScriptedUpstream(
    cappedProxy(B_RANGE, { code: -32602, message: 'You can make eth_getLogs requests with up to a 500 block range. Based on your parameters, this block range should work: [0x0, 0x1f3]' }),
  );
  probedA = await startScriptedUpstream(cappedProxy(A_RANGE, { code: -32614, message: `eth_getLogs is limited to a ${A_RANGE} range` }));
  probedB = await startScriptedUpstream(cappedProxy(B_RANGE, { code: -32602, message: 'You can make eth_getLogs requests with up to a 500 block range.' }));
  const upstream = (id: string, url: string, maxRange?: number) => ({ id, url, ...(maxRange === undefined ? {} : { getLogs: { maxRange } }) });
  tg = await startTestGateway({
    networks: [
      // Caps declared: split into aligned chunks of the smallest (A's), B takes any chunk on failover.
      { id: 'eth', kind: 'evm', chainId: 31337, hedge: { enabled: false }, getLogs: { maxRange: 2_500, concurrency: 4 }, upstreams: [upstream('a', a.url, A_RANGE), upstream('b', b.url, B_RANGE)] },
      // Caps unknown to the gateway: the upstreams' refusals alone drive the bisection.
      { id: 'blind', kind: 'evm', chainId: 31337, hedge: { enabled: false }, getLogs: { maxRange: 0 }, upstreams: [upstream('a', a.url), upstream('b', b.url)] },
      // Probed (finality known), so finalized chunks are kept by the response cache.
      { id: 'cached', kind: 'evm', chainId: 31337, hedge: { enabled: false }, healthCheck: { intervalMs: 100, timeoutMs: 2_000 }, getLogs: { maxRange: 2_500 }, upstreams: [upstream('a', probedA.url, A_RANGE), upstream('b', probedB.url, B_RANGE)] },
      { id: 'tight', kind: 'evm', chainId: 31337, hedge: { enabled: false }, getLogs: { maxRange: 50, maxAddresses: 2, maxTopics: 3 }, upstreams: [upstream('a', a.url, A_RANGE)] },
    ],
  });
}, 120_000);

afterAll(async () => {
  await tg?.close();
  await a?.close();
  await b?.close();
  await probedA?.close();
  await probedB?.close();
  await node?.stop();
});

describe('eth_getLogs at any range on anvil', () => {
  it('the chain has hundreds of blocks with logs and thousands without', async () => {
    expect(head).toBeGreaterThan(SPARSE_CALLS * (GAP + 1) + DENSE_BLOCKS);
    const all = (await directRpc(node.url, 'eth_getLogs', [{ address: contract, fromBlock: '0x0', toBlock: 'latest' }])) as unknown[];
    expect(all).toHaveLength(2 * (SPARSE_CALLS + DENSE_BLOCKS * DENSE_PER_BLOCK));
  });

  it('1. a 2,000-block call equals anvil’s own answer, log for log, in order, from 20 aligned chunks, charged once', async () => {
    const from = 0;
    const to = from + 1_999;
    expect(to).toBeLessThan(denseFrom);
    const before = { a: a.calls.length, b: b.calls.length, spend: await teamSpend() };
    const res = await rpc(tg.url('eth'), call('eth_getLogs', [{ address: contract, fromBlock: hex(from), toBlock: hex(to) }]));
    expect(res.body.error).toBeUndefined();
    const expected = (await directRpc(node.url, 'eth_getLogs', [{ address: contract, fromBlock: hex(from), toBlock: hex(to) }])) as unknown[];
    expect(expected.length).toBeGreaterThan(300);
    expect(res.body.result).toEqual(expected);

    const chunks = [...logsCalls(a, before.a), ...logsCalls(b, before.b)].sort((x, y) => x.from - y.from);
    expect(chunks).toEqual(Array.from({ length: 20 }, (_, index) => ({ from: from + index * 100, to: from + index * 100 + 99 })));
    expect(res.headers.get('x-credits-cost')).toBe(String(PRICE));
    expect((await teamSpend()) - before.spend).toBe(PRICE);
    expect(lastLogLine()).toMatchObject({ methods: ['eth_getLogs'], upstreamCalls: 20, credits: PRICE });
  });

  it('2. overlapping windows of two clients share their aligned finalized chunks: the second asks upstreams only for the chunks the first did not cover', async () => {
    await untilFinalized(tg, 'cached', 'a', 1_000);
    await untilFinalized(tg, 'cached', 'b', 1_000);
    const other = await issueKey(tg.store, { teamId: tg.team.id });
    const first = { from: 250, to: 749 };
    const second = { from: 420, to: 999 };
    const filterOf = (window: { from: number; to: number }) => ({ address: contract, fromBlock: hex(window.from), toBlock: hex(window.to) });
    const [a, b] = [probedA, probedB];
    const mark = { a: a.calls.length, b: b.calls.length };
    const one = await rpc(tg.url('cached'), call('eth_getLogs', [filterOf(first)]));
    const middle = { a: a.calls.length, b: b.calls.length };
    const two = await rpc(tg.url('cached', other.secret), call('eth_getLogs', [filterOf(second)]));
    expect(one.body.result).toEqual(await directRpc(node.url, 'eth_getLogs', [filterOf(first)]));
    expect(two.body.result).toEqual(await directRpc(node.url, 'eth_getLogs', [filterOf(second)]));
    const sorted = (list: Array<{ from: number; to: number }>) => list.sort((x, y) => x.from - y.from);
    expect(sorted([...logsCalls(a, mark.a, middle.a), ...logsCalls(b, mark.b, middle.b)])).toEqual([
      { from: 250, to: 299 },
      { from: 300, to: 399 },
      { from: 400, to: 499 },
      { from: 500, to: 599 },
      { from: 600, to: 699 },
      { from: 700, to: 749 },
    ]);
    // 500-599 and 600-699 are the same aligned chunks in both windows: answered by the cache.
    expect(sorted([...logsCalls(a, middle.a), ...logsCalls(b, middle.b)])).toEqual([
      { from: 420, to: 499 },
      { from: 700, to: 799 },
      { from: 800, to: 899 },
      { from: 900, to: 999 },
    ]);
    expect(lastLogLine()).toMatchObject({ methods: ['eth_getLogs'], upstreamCalls: 4, cache: 'miss', credits: PRICE });
    // The same window again: every chunk from the cache, no upstream call, the price once.
    const before = { a: a.calls.length, b: b.calls.length };
    const again = await rpc(tg.url('cached', other.secret), call('eth_getLogs', [filterOf(second)]));
    expect(again.body.result).toEqual(two.body.result);
    expect(logsCalls(a, before.a).length + logsCalls(b, before.b).length).toBe(0);
    expect(again.headers.get('x-cache')).toBe('hit');
    expect(again.headers.get('x-credits-cost')).toBe(String(PRICE));
    expect(lastLogLine()).toMatchObject({ upstreamCalls: 0 });

    // Past the finalized block nothing is kept: a window over the head asks again for its
    // unfinalized tail (and for finalized chunks without logs, which the cache keeps only once the
    // answering upstream's head is past them), never for a finalized chunk it answered with logs.
    const finalized = num(((await directRpc(node.url, 'eth_getBlockByNumber', ['finalized', false])) as { number: string }).number);
    await untilFinalized(tg, 'cached', 'a', finalized);
    await untilFinalized(tg, 'cached', 'b', finalized);
    const tip = filterOf({ from: Math.floor(denseFrom / 100) * 100 - 200, to: head });
    const tipMark = { a: a.calls.length, b: b.calls.length };
    const firstTip = await rpc(tg.url('cached'), call('eth_getLogs', [tip]));
    expect(firstTip.body.result).toEqual(await directRpc(node.url, 'eth_getLogs', [tip]));
    const againMark = { a: a.calls.length, b: b.calls.length };
    const secondTip = await rpc(tg.url('cached'), call('eth_getLogs', [tip]));
    expect(secondTip.body.result).toEqual(firstTip.body.result);
    const logsIn = async (chunk: { from: number; to: number }) => ((await directRpc(node.url, 'eth_getLogs', [filterOf(chunk)])) as unknown[]).length;
    const askedFirst = [...logsCalls(a, tipMark.a, againMark.a), ...logsCalls(b, tipMark.b, againMark.b)];
    const askedAgain = [...logsCalls(a, againMark.a), ...logsCalls(b, againMark.b)];
    expect(askedAgain.some((chunk) => chunk.to === head)).toBe(true);
    // Asked again below the finalized block: only chunks without logs, or ones refused as too large (a refusal is not kept).
    for (const chunk of askedAgain) {
      if (chunk.to > finalized) continue;
      const count = await logsIn(chunk);
      expect(count === 0 || count > MAX_RESULTS, `${JSON.stringify(chunk)}: ${count} logs`).toBe(true);
    }
    const keptWithLogs = [];
    for (const chunk of askedFirst) if (chunk.to <= finalized && (await logsIn(chunk)) > 0 && (await logsIn(chunk)) <= MAX_RESULTS) keptWithLogs.push(chunk);
    expect(keptWithLogs.length).toBeGreaterThan(0);
  });

  it('3. a chunk with too many results is bisected; the merged answer is still exact', async () => {
    const from = Math.floor(denseFrom / 100) * 100 - 300;
    const to = head;
    expect(to).toBeGreaterThan(denseFrom + DENSE_BLOCKS);
    const mark = { a: a.calls.length, b: b.calls.length };
    const res = await rpc(tg.url('eth'), call('eth_getLogs', [{ address: contract, fromBlock: hex(from), toBlock: hex(to) }]));
    const expected = (await directRpc(node.url, 'eth_getLogs', [{ address: contract, fromBlock: hex(from), toBlock: hex(to) }])) as unknown[];
    expect(res.body.error).toBeUndefined();
    expect(res.body.result).toEqual(expected);
    const asked = [...logsCalls(a, mark.a), ...logsCalls(b, mark.b)];
    // A chunk with the dense blocks was asked whole of both (each refused: too many results), then in halves, and smaller.
    const refusedWhole = asked.filter((chunk, index) => chunk.to - chunk.from + 1 === 100 && asked.findIndex((other) => other.from === chunk.from && other.to === chunk.to) !== index);
    expect(refusedWhole.length).toBeGreaterThan(0);
    for (const chunk of refusedWhole) {
      expect(chunk.to).toBeGreaterThanOrEqual(denseFrom);
      expect(chunk.from).toBeLessThan(denseFrom + DENSE_BLOCKS);
    }
    const [first] = refusedWhole;
    expect(asked.some((chunk) => chunk.from >= first!.from && chunk.to <= first!.to && chunk.to - chunk.from + 1 < 50)).toBe(true);
    expect(res.headers.get('x-credits-cost')).toBe(String(PRICE));
    expect(lastLogLine().upstreamCalls).toBe(asked.length);

    // With no cap declared, the upstreams' own refusals (QuickNode's and Alchemy's words) bisect the whole range.
    const blindMark = { a: a.calls.length, b: b.calls.length };
    const blind = await rpc(tg.url('blind'), call('eth_getLogs', [{ address: contract, fromBlock: hex(firstLogBlock), toBlock: hex(firstLogBlock + 1_999) }]));
    expect(blind.body.result).toEqual(await directRpc(node.url, 'eth_getLogs', [{ address: contract, fromBlock: hex(firstLogBlock), toBlock: hex(firstLogBlock + 1_999) }]));
    const blindAsked = [...logsCalls(a, blindMark.a), ...logsCalls(b, blindMark.b)];
    expect(blindAsked[0]).toEqual({ from: firstLogBlock, to: firstLogBlock + 1_999 });
    expect(Math.max(...blindAsked.filter((chunk) => chunk.to - chunk.from + 1 <= A_RANGE).map((chunk) => chunk.to - chunk.from + 1))).toBeLessThanOrEqual(A_RANGE);
    // Dozens of refusals, and both upstreams are still healthy: a refusal is an answer, not a failure.
    expect(blindAsked.length).toBeGreaterThan(20);
    const metrics = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    for (const upstream of ['a', 'b']) expect(metrics).toContain(`tollgate_upstream_healthy{network="blind",upstream="${upstream}"} 1`);
    expect(metrics).toMatch(/tollgate_upstream_requests_total\{network="blind",upstream="a",outcome="logs_too_large"\} [1-9]/);
  });

  it('4. a chunk that fails on both upstreams fails the call: an error, no partial list, uncharged', async () => {
    brokenFrom.add(600);
    try {
      const spend = await teamSpend();
      const mark = { a: a.calls.length, b: b.calls.length };
      const res = await rpc(tg.url('eth'), call('eth_getLogs', [{ address: contract, fromBlock: hex(0), toBlock: hex(1_999) }]));
      expect(res.status).toBe(502);
      expect(res.body.result).toBeUndefined();
      expect(res.body.error.code).toBe(-32603);
      expect(res.body.error.message).toBe('every upstream failed for the logs of blocks 0x258-0x2bb');
      // Both tried (in the selector's order, which follows their latencies).
      const attempts = [...(res.body.error.data.attempts as Array<{ upstream: string }>)].sort((x, y) => x.upstream.localeCompare(y.upstream));
      expect(attempts).toEqual([
        { upstream: 'a', reason: 'http_500' },
        { upstream: 'b', reason: 'http_500' },
      ]);
      expect(res.headers.get('x-credits-cost')).toBe('0');
      expect(await teamSpend()).toBe(spend);
      // Chunks not started when the failure was known were never asked for.
      expect(logsCalls(a, mark.a).length + logsCalls(b, mark.b).length).toBeLessThan(20 + 2);
    } finally {
      brokenFrom.clear();
    }
  });

  it('5. limits and bad ranges get -32602 naming them, uncharged; tags resolve', async () => {
    const spend = await teamSpend();
    const mark = a.calls.length;
    const refused: Array<[unknown, string]> = [
      [{ fromBlock: '0x0', toBlock: hex(50) }, "invalid params: a range of 51 blocks is over this network's getLogs.maxRange (50)"],
      [{ address: [contract, contract, contract] }, "invalid params: 3 addresses is over this network's getLogs.maxAddresses (2)"],
      [{ topics: [[PING, PONG], null, [PING, PONG]] }, "invalid params: 4 topics is over this network's getLogs.maxTopics (3)"],
      [{ fromBlock: '0x20', toBlock: '0x10' }, 'invalid params: fromBlock (0x20) is after toBlock (0x10)'],
      [{ blockHash: `0x${'11'.repeat(32)}`, fromBlock: '0x1' }, 'invalid params: blockHash cannot be combined with fromBlock or toBlock'],
    ];
    for (const [filter, message] of refused) {
      const res = await rpc(tg.url('tight'), call('eth_getLogs', [filter]));
      expect(res.body.error, JSON.stringify(filter)).toMatchObject({ code: -32602, message });
      expect(res.headers.get('x-credits-cost')).toBe('0');
    }
    expect(a.calls.length).toBe(mark);
    // Known only once the tags are resolved: refused after one upstream call, still uncharged.
    const resolvedWide = await rpc(tg.url('tight'), call('eth_getLogs', [{ fromBlock: 'earliest', toBlock: 'latest' }]));
    expect(resolvedWide.body.error).toMatchObject({ code: -32602, message: `invalid params: a range of ${head + 1} blocks is over this network's getLogs.maxRange (50)` });
    expect(resolvedWide.headers.get('x-credits-cost')).toBe('0');
    const wrongOrder = await rpc(tg.url('eth'), call('eth_getLogs', [{ fromBlock: 'latest', toBlock: hex(5) }]));
    expect(wrongOrder.body.error).toMatchObject({ code: -32602, message: `invalid params: fromBlock (${hex(head)}) is after toBlock (0x5)` });
    expect(await teamSpend()).toBe(spend);

    // Tags resolve to the numbers anvil gives them; the answers equal anvil's for the same tags.
    for (const [fromBlock, toBlock] of [
      ['earliest', hex(300)],
      ['finalized', 'latest'],
      ['safe', 'latest'],
      [hex(head - 300), 'pending'],
      ['latest', 'latest'],
    ] as const) {
      const filter = { address: contract, fromBlock, toBlock };
      const res = await rpc(tg.url('eth'), call('eth_getLogs', [filter]));
      expect(res.body.error, JSON.stringify(filter)).toBeUndefined();
      expect(res.body.result, JSON.stringify(filter)).toEqual(await directRpc(node.url, 'eth_getLogs', [filter]));
    }
    // How a tag was resolved: one eth_getBlockByNumber("finalized") upstream, then the numbers.
    const finalized = num(((await directRpc(node.url, 'eth_getBlockByNumber', ['finalized', false])) as { number: string }).number);
    const marks = { a: a.calls.length, b: b.calls.length };
    const pinned = await rpc(tg.url('eth'), call('eth_getLogs', [{ address: contract, fromBlock: 'finalized', toBlock: hex(finalized + 10) }]));
    expect(pinned.body.error).toBeUndefined();
    const sent = [...a.calls.slice(marks.a), ...b.calls.slice(marks.b)].map((received) => received.body as RpcItem);
    expect(sent.map((body) => body.method)).toEqual(['eth_getBlockByNumber', 'eth_getLogs']);
    expect(sent[0]!.params).toEqual(['finalized', false]);
    expect((sent[1]!.params as Array<Record<string, unknown>>)[0]).toMatchObject({ fromBlock: hex(finalized), toBlock: hex(finalized + 10) });
    expect(lastLogLine().upstreamCalls).toBe(2);
  });

  it('6. viem getLogs / getContractEvents and ethers queryFilter over wide ranges work unchanged', async () => {
    const from = BigInt(firstLogBlock);
    const to = BigInt(head);
    const viaGateway = createPublicClient({ transport: http(tg.url('eth')) });
    const direct = createPublicClient({ transport: http(node.url) });
    const pings = await viaGateway.getLogs({ address: contract, event: ABI[0], fromBlock: from, toBlock: to });
    expect(pings).toEqual(await direct.getLogs({ address: contract, event: ABI[0], fromBlock: from, toBlock: to }));
    expect(pings.length).toBeGreaterThan(200);
    expect(pings[0]!.args).toEqual({ blockNumber: from, value: 0n });
    const events = await viaGateway.getContractEvents({ address: contract, abi: ABI, fromBlock: from, toBlock: to });
    expect(events).toEqual(await direct.getContractEvents({ address: contract, abi: ABI, fromBlock: from, toBlock: to }));
    expect(events.filter((event) => event.eventName === 'Pong')).toHaveLength(pings.length);

    const provider = new JsonRpcProvider(tg.url('eth'), 31337, { staticNetwork: true });
    const directProvider = new JsonRpcProvider(node.url, 31337, { staticNetwork: true });
    try {
      const abi = ['event Ping(uint256 indexed blockNumber, uint256 value)', 'event Pong(uint256 value)'];
      const found = await new Contract(contract, abi, provider).queryFilter('Pong', firstLogBlock, 'latest');
      const expected = await new Contract(contract, abi, directProvider).queryFilter('Pong', firstLogBlock, 'latest');
      expect(found.map((event) => [event.blockNumber, event.index, event.transactionHash, (event as { args?: unknown[] }).args?.[0]])).toEqual(
        expected.map((event) => [event.blockNumber, event.index, event.transactionHash, (event as { args?: unknown[] }).args?.[0]]),
      );
      expect(found.length).toBe(pings.length);
    } finally {
      provider.destroy();
      directProvider.destroy();
    }
  });

  it('eth_getFilterLogs its node declines as too large is answered by the same splitter from the filter’s criteria', async () => {
    const criteria = { address: contract, fromBlock: '0x0', toBlock: hex(1_999) };
    const created = await rpc(tg.url('eth'), call('eth_newFilter', [criteria]));
    expect(created.body.error).toBeUndefined();
    const spend = await teamSpend();
    const mark = { a: a.calls.length, b: b.calls.length };
    const res = await rpc(tg.url('eth'), call('eth_getFilterLogs', [created.body.result]));
    expect(res.body.error).toBeUndefined();
    const expected = (await directRpc(node.url, 'eth_getLogs', [criteria])) as unknown[];
    expect(expected.length).toBeGreaterThan(MAX_RESULTS);
    expect(res.body.result).toEqual(expected);
    // One eth_getFilterLogs on the filter's node (declined: more than MAX_RESULTS), then the 20 chunks.
    const sent = [...a.calls.slice(mark.a), ...b.calls.slice(mark.b)].map((received) => (received.body as RpcItem).method);
    expect(sent.filter((method) => method === 'eth_getFilterLogs')).toHaveLength(1);
    expect(sent.filter((method) => method === 'eth_getLogs')).toHaveLength(20);
    expect(lastLogLine().upstreamCalls).toBe(21);
    expect((await teamSpend()) - spend).toBe(PRICE);

    // Uninstalled, the filter is gone: its node's answer, not the remembered criteria.
    expect((await rpc(tg.url('eth'), call('eth_uninstallFilter', [created.body.result]))).body.result).toBe(true);
    const gone = await rpc(tg.url('eth'), call('eth_getFilterLogs', [created.body.result]));
    expect(gone.body.result).toBeUndefined();
    expect(gone.body.error.message).toMatch(/filter not found/i);
  });

  it('the metric counts the upstream calls of each eth_getLogs call', async () => {
    const text = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    const count = text.split('\n').find((line) => line.startsWith('tollgate_logs_upstream_calls_count{network="eth",method="eth_getLogs"}'));
    const bucket20 = text.split('\n').find((line) => line.startsWith('tollgate_logs_upstream_calls_bucket{network="eth",method="eth_getLogs",le="20"}'));
    expect(Number(count?.split(' ').pop())).toBeGreaterThan(5);
    expect(Number(bucket20?.split(' ').pop())).toBeGreaterThan(0);
  });
});
