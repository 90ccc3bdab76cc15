// The back-fill of a `logs` subscription after a long move between upstreams (docs/websocket.md),
// against a real anvil: while no upstream socket carries the subscription, hundreds of blocks with
// logs are mined, more than an upstream answers in one eth_getLogs. Every upstream caps
// eth_getLogs at CAP blocks the way providers do, on its HTTP endpoint (a scripted proxy) and on its
// socket (a WebSocket proxy that answers over-wide calls with QuickNode's refusal itself). The
// back-fill goes through the eth_getLogs splitter over HTTP, so the client gets every log of the
// gap once, in order, and no upstream is asked for more than CAP blocks.
//
// The emitting contract is hand-written EVM bytecode (test/helpers/log-emitter.ts): every call
// leaves a Ping and a Pong log in its block. Automine is off: blocks are mined explicitly.

import { toHex, type Address } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { issueKey } from '../src/admin/key-issuer.js';
import { startAnvil, type AnvilNode } from '../src/devnet/anvil.js';
import { directRpc } from './helpers/anvil.js';
import { startTestGateway, type TestGateway } from './helpers/gateway.js';
import { buildEmittingChain } from './helpers/log-emitter.js';
import { startScriptedUpstream, type ReceivedCall, type RpcItem, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';
import { startWsProxy, type WsProxy, type WsRequest } from './helpers/ws-proxy.js';

/** The widest eth_getLogs range every upstream answers, over HTTP and over its socket. */
const CAP = 100;
/** Emitting calls mined while no socket carries the subscription, one every SPACING blocks. */
const GAP_CALLS = 30;
const SPACING = 10;
const REFUSAL = { code: -32614, message: `eth_getLogs is limited to a ${CAP} range` };
/** Catalogue prices of what the client is charged for here. */
const SUBSCRIBE_PRICE = 5;
const HEAD_PRICE = 50;
const LOG_BLOCK_PRICE = 300;

const num = (value: string) => Number.parseInt(value, 16);
const hex = (n: number) => `0x${n.toString(16)}`;

let anvil: AnvilNode;
let contract: Address;
let account: Address;
/** Emitting calls so far (each call's data is its index, so no two transactions are alike). */
let emitted = 0;

/** One emitting call mined in its own block, followed by `emptyAfter` empty blocks. */
async function emit(emptyAfter = 0): Promise<string> {
  const hash = (await directRpc(anvil.url, 'eth_sendTransaction', [{ from: account, to: contract, data: toHex(emitted, { size: 32 }), gas: '0x30000' }])) as string;
  emitted += 1;
  await directRpc(anvil.url, 'anvil_mine', [hex(1 + emptyAfter)]);
  return hash;
}

async function anvilHead(): Promise<number> {
  return num((await directRpc(anvil.url, 'eth_blockNumber', [])) as string);
}

/** A provider's cap on its HTTP endpoint: eth_getLogs wider than CAP blocks is refused; `broken` chunks get HTTP 500. */
function cappedHttp(broken: () => ReadonlySet<number>): (received: ReceivedCall) => ScriptedBehaviour {
  return (received) => {
    const body = received.body as RpcItem;
    if (body?.method === 'eth_getLogs') {
      const [filter] = body.params as Array<{ fromBlock?: string; toBlock?: string }>;
      if (filter?.fromBlock?.startsWith('0x') === true && filter.toBlock?.startsWith('0x') === true) {
        const from = num(filter.fromBlock);
        if (broken().has(from)) return { kind: 'status', status: 500 };
        if (num(filter.toBlock) - from + 1 > CAP) return { kind: 'rpc-error', ...REFUSAL };
      }
    }
    return { kind: 'proxy', url: anvil.url };
  };
}

/** The same cap on the upstream's socket: the proxy refuses an eth_getLogs over CAP blocks (tags read as the node has them). */
async function cappedSocket(request: WsRequest): Promise<unknown> {
  if (request.method !== 'eth_getLogs') return undefined;
  const [filter] = request.params as Array<{ fromBlock?: string; toBlock?: string }>;
  const bound = async (value: string | undefined) => (value === undefined || !value.startsWith('0x') ? anvilHead() : num(value));
  const width = (await bound(filter?.toBlock)) - (await bound(filter?.fromBlock)) + 1;
  return width > CAP ? { jsonrpc: '2.0', id: request.id, error: REFUSAL } : undefined;
}

/** The eth_getLogs ranges an HTTP upstream received since `mark`, in numbers. */
function logsRanges(upstream: ScriptedUpstream, mark: number): Array<{ from: number; to: number }> {
  return upstream.calls.slice(mark).flatMap((received) => {
    const body = received.body as RpcItem;
    if (body?.method !== 'eth_getLogs') return [];
    const [filter] = body.params as Array<{ fromBlock: string; toBlock: string }>;
    return [{ from: num(filter!.fromBlock), to: num(filter!.toBlock) }];
  });
}

interface Client {
  ws: WebSocket;
  messages: any[];
  call(method: string, params: unknown[]): Promise<any>;
  /** The results of a subscription's events so far, in arrival order. */
  events(subscription: string): any[];
}

let ids = 1;
async function openClient(url: string): Promise<Client> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  const messages: any[] = [];
  ws.on('message', (data: Buffer) => messages.push(JSON.parse(data.toString('utf8'))));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  return {
    ws,
    messages,
    async call(method, params) {
      const id = ids++;
      ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
      await until(() => messages.some((message) => message.id === id), `the answer to ${method}`, 10_000);
      return messages.find((message) => message.id === id);
    },
    events: (subscription) => messages.filter((message) => message.method === 'eth_subscription' && message.params.subscription === subscription).map((message) => message.params.result),
  };
}

/** One network: two upstreams, each capped on HTTP and on its socket; the standby socket refuses connections until a test lets it. */
interface Upstreams {
  carrying: WsProxy;
  standby: WsProxy;
  http: ScriptedUpstream[];
  /** Chunks (by first block) both HTTP endpoints fail with HTTP 500 while listed. */
  broken: Set<number>;
}

async function startUpstreams(): Promise<Upstreams> {
  const target = anvil.url.replace('http://', 'ws://');
  const broken = new Set<number>();
  return {
    carrying: await startWsProxy(target, { answer: cappedSocket }),
    standby: await startWsProxy(target, { answer: cappedSocket, refusing: true }),
    http: [await startScriptedUpstream(cappedHttp(() => broken)), await startScriptedUpstream(cappedHttp(() => broken))],
    broken,
  };
}

function networkOf(id: string, upstreams: Upstreams): Record<string, unknown> & { id: string } {
  return {
    id,
    kind: 'evm',
    chainId: anvil.chainId,
    hedge: { enabled: false },
    subscriptions: { reconnectDelayMs: 100 },
    upstreams: [
      { id: 'carrying', url: upstreams.http[0]!.url, wsUrl: upstreams.carrying.url, getLogs: { maxRange: CAP } },
      { id: 'standby', url: upstreams.http[1]!.url, wsUrl: upstreams.standby.url, getLogs: { maxRange: CAP } },
    ],
  };
}

let tg: TestGateway;
let plain: Upstreams;
let flaky: Upstreams;

beforeAll(async () => {
  anvil = await startAnvil();
  ({ contract } = await buildEmittingChain(anvil.url, { sparseCalls: 0, gap: 0, denseBlocks: 0, densePerBlock: 0, tail: 0 }));
  account = ((await directRpc(anvil.url, 'eth_accounts', [])) as Address[])[0]!;
  plain = await startUpstreams();
  flaky = await startUpstreams();
  tg = await startTestGateway({ networks: [networkOf('plain', plain), networkOf('flaky', flaky)] });
}, 60_000);

afterAll(async () => {
  await tg?.close();
  for (const upstreams of [plain, flaky]) {
    await upstreams?.carrying.kill().catch(() => undefined);
    await upstreams?.standby.kill().catch(() => undefined);
    for (const http of upstreams?.http ?? []) await http.close();
  }
  await anvil?.stop();
});

/**
 * A client with a fresh team subscribed to newHeads and the contract's logs on `network`, carried
 * by `upstreams.carrying`, having received three logs' blocks; then that socket dies and
 * GAP_CALLS emitting calls are mined SPACING blocks apart while no upstream takes the stream.
 * First, empty blocks: a back-fill starts 8 blocks before the last head delivered, and would
 * bring the logs an earlier test left in those blocks too (logs of blocks before the
 * subscription: not what these tests are about).
 */
async function subscribeThenLoseTheSocket(network: string, upstreams: Upstreams) {
  await directRpc(anvil.url, 'anvil_mine', ['0x10']);
  const team = await tg.store.createTeam({ name: `backfill-${network}`, dailyCredits: 100_000_000 });
  const { secret } = await issueKey(tg.store, { teamId: team.id });
  const client = await openClient(tg.url(network, secret).replace('http://', 'ws://').replace(`/${network}/v3/`, `/${network}/ws/v3/`));
  const heads = (await client.call('eth_subscribe', ['newHeads'])).result as string;
  const logs = (await client.call('eth_subscribe', ['logs', { address: contract }])).result as string;
  expect(upstreams.carrying.subscribeCalls).toContain('logs');
  const startBlock = (await anvilHead()) + 1;
  const sent: string[] = [];
  for (let index = 0; index < 3; index += 1) {
    sent.push(await emit());
    await until(() => client.events(logs).length === 2 * sent.length, `log pair ${index + 1}`, 10_000);
  }
  await upstreams.carrying.kill();
  for (let index = 0; index < GAP_CALLS; index += 1) sent.push(await emit(SPACING - 1));
  const marks = upstreams.http.map((http) => http.calls.length);
  const used = async () => {
    const [result] = await tg.store.applyLedger([{ type: 'peek', teamId: team.id, day: new Date().toISOString().slice(0, 10) }] as const);
    return result.teamUsed;
  };
  return { client, heads, logs, startBlock, sent, marks, used };
}

/**
 * After the move: one more emitting call, carried live, then an empty block whose head the client
 * must see; events are delivered in order, so anything still due (a late duplicate) came before it.
 */
async function finish(client: Client, heads: string, logs: string, sent: string[]): Promise<number> {
  sent.push(await emit());
  await until(() => client.events(logs).length >= 2 * sent.length, `all ${2 * sent.length} logs`, 20_000);
  const last = await anvilHead();
  await directRpc(anvil.url, 'anvil_mine', ['0x1']);
  await until(() => client.events(heads).some((head) => num(head.number) === last + 1), 'the sentinel head', 10_000);
  return last;
}

/** What the client got against what anvil has: every log of the blocks, once, in order, none removed. */
async function expectEveryLogOnce(client: Client, logs: string, startBlock: number, lastBlock: number, sent: string[]): Promise<void> {
  const expected = (await directRpc(anvil.url, 'eth_getLogs', [{ address: contract, fromBlock: hex(startBlock), toBlock: hex(lastBlock) }])) as any[];
  expect(expected).toHaveLength(2 * (3 + GAP_CALLS + 1));
  const got = client.events(logs);
  expect(got.map((log) => `${log.blockHash}:${log.logIndex}`)).toEqual(expected.map((log) => `${log.blockHash}:${log.logIndex}`));
  expect(got.every((log) => log.removed !== true)).toBe(true);
  expect(got.filter((_, index) => index % 2 === 0).map((log) => log.transactionHash)).toEqual(sent);
}

/** The eth_getLogs ranges both HTTP endpoints received since the marks, in block order: all within the cap and its aligned grid. */
function expectCappedChunks(upstreams: Upstreams, marks: number[]): Array<{ from: number; to: number }> {
  const ranges = upstreams.http.flatMap((http, index) => logsRanges(http, marks[index]!)).sort((x, y) => x.from - y.from);
  for (const range of ranges) {
    expect(range.to - range.from + 1).toBeLessThanOrEqual(CAP);
    expect(Math.floor(range.from / CAP)).toBe(Math.floor(range.to / CAP));
  }
  return ranges;
}

describe('logs subscriptions back-filled through the eth_getLogs splitter', () => {
  it('a gap of 300 blocks with logs, three times an upstream’s cap: every log once, in order, from capped aligned chunks over HTTP, the back-fill uncharged', async () => {
    const { client, heads, logs, startBlock, sent, marks, used } = await subscribeThenLoseTheSocket('plain', plain);
    const lastBefore = num(client.events(heads).at(-1).number);
    const gapHead = await anvilHead();
    expect(gapHead - lastBefore).toBeGreaterThanOrEqual(GAP_CALLS * SPACING);

    plain.standby.refuse(false);
    await until(() => plain.standby.subscribeCalls.includes('logs'), 'the move to the standby', 10_000);
    const lastBlock = await finish(client, heads, logs, sent);
    await expectEveryLogOnce(client, logs, startBlock, lastBlock, sent);

    // The back-fill went over HTTP, in chunks of at most CAP blocks on the aligned grid, covering
    // every block from a few before the last head delivered to the new socket's head without a hole.
    expect(plain.standby.requests).not.toContain('eth_getLogs');
    const ranges = expectCappedChunks(plain, marks);
    expect(ranges.length).toBeGreaterThanOrEqual(Math.ceil((GAP_CALLS * SPACING) / CAP));
    expect(ranges[0]!.from).toBeLessThanOrEqual(lastBefore);
    expect(ranges.at(-1)!.to).toBeGreaterThanOrEqual(gapHead);
    for (let index = 1; index < ranges.length; index += 1) expect(ranges[index]!.from).toBe(ranges[index - 1]!.to + 1);
    expect(tg.logLines.some((line) => line.includes('logs subscription back-filled after a move') && line.includes('"network":"plain"'))).toBe(true);

    // Charged: the two eth_subscribe calls and the events delivered, not the back-fill's eth_getLogs.
    const logBlocks = new Set(client.events(logs).map((log) => log.blockHash)).size;
    const expectedSpend = 2 * SUBSCRIBE_PRICE + client.events(heads).length * HEAD_PRICE + logBlocks * LOG_BLOCK_PRICE;
    await until(async () => (await used()) === expectedSpend, `a spend of ${expectedSpend}`, 10_000);
    client.ws.close();
  }, 60_000);

  it('a back-fill whose chunk fails on every upstream leaves the upstream and is asked again from the same block: nothing skipped, nothing out of order', async () => {
    const { client, heads, logs, startBlock, sent, marks } = await subscribeThenLoseTheSocket('flaky', flaky);
    // A chunk in the middle of the gap fails on both HTTP endpoints until the gateway has given up once.
    const middle = Math.floor(((await anvilHead()) - (GAP_CALLS * SPACING) / 2) / CAP) * CAP;
    flaky.broken.add(middle);
    const failed = () => tg.logLines.filter((line) => line.includes('subscriptions moving off an upstream') && line.includes('"backfill_failed"') && line.includes('"network":"flaky"'));
    flaky.standby.refuse(false);
    await until(() => failed().length >= 1, 'a failed back-fill', 15_000);
    // Nothing of the gap reached the client meanwhile: its live events wait behind the back-fill.
    expect(client.events(logs)).toHaveLength(2 * 3);
    flaky.broken.clear();
    const lastBlock = await finish(client, heads, logs, sent);
    await expectEveryLogOnce(client, logs, startBlock, lastBlock, sent);
    expect(flaky.standby.requests).not.toContain('eth_getLogs');
    expect(expectCappedChunks(flaky, marks).some((range) => range.from === middle)).toBe(true);
    client.ws.close();
  }, 60_000);
});
