// The blocks a subscription's upstream gives to fill a gap in `newHeads` (after a move to it) are
// verified before any is delivered, as blocks served over HTTP are: an upstream that alters one
// (a header that no longer hashes to its hash) or hands a real block of another height (not the
// parent of the next) is left, ranked lower for calls too, and the next upstream fills the gap.
// The client sees every head once, in order, each exactly as the chain has it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startAnvil, type AnvilNode } from '../src/devnet/anvil.js';
import { directRpc } from './helpers/anvil.js';
import { startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { startWsProxy, type WsProxy, type WsRequest } from './helpers/ws-proxy.js';
import { until } from './helpers/until.js';

type Block = Record<string, unknown> & { number: string; hash: string; parentHash: string; timestamp: string };

let anvil: AnvilNode;
let gateway: TestGateway;
const proxies: Record<string, WsProxy> = {};

const blockAt = async (number: number): Promise<Block> => (await directRpc(anvil.url, 'eth_getBlockByNumber', [`0x${number.toString(16)}`, false])) as Block;
const headNumber = async (): Promise<number> => Number(await directRpc(anvil.url, 'eth_blockNumber', []));

/** A proxy that answers `eth_getBlockByNumber` for a given height with `lie(realBlock)` (`latest` passes on). */
function lyingAnswer(lie: (block: Block) => Promise<Block>) {
  return async (request: WsRequest) => {
    if (request.method !== 'eth_getBlockByNumber' || request.params[0] === 'latest') return undefined;
    const real = await blockAt(Number(request.params[0]));
    return { jsonrpc: '2.0', id: request.id, result: await lie(real) };
  };
}

beforeAll(async () => {
  anvil = await startAnvil();
  const target = anvil.url.replace('http://', 'ws://');
  // Per network: the first upstream carries the stream, the second lies when filling gaps, the third is honest.
  proxies.altered = await startWsProxy(target, { answer: lyingAnswer(async (block) => ({ ...block, timestamp: `0x${(Number(block.timestamp) + 1).toString(16)}` })) });
  proxies.shifted = await startWsProxy(target, { answer: lyingAnswer(async (block) => blockAt(Math.max(0, Number(block.number) - 1))) });
  for (const name of ['first1', 'honest1', 'first2', 'honest2']) proxies[name] = await startWsProxy(target);
  const network = (id: string, upstreams: string[]) => ({
    id,
    kind: 'evm',
    chainId: anvil.chainId,
    methods: { eth_blockNumber: 80 },
    upstreams: upstreams.map((name) => ({ id: name, url: anvil.url, wsUrl: proxies[name]!.url })),
    subscriptions: { reconnectDelayMs: 200 },
  });
  gateway = await startTestGateway({
    networks: [network('altered', ['first1', 'altered', 'honest1']), network('shifted', ['first2', 'shifted', 'honest2'])],
  });
}, 30_000);

afterAll(async () => {
  await gateway?.close();
  for (const proxy of Object.values(proxies)) await proxy.kill().catch(() => undefined);
  await anvil?.stop();
});

/** The value of a metric's series for one upstream of a network (and the given other labels), or undefined. */
async function metric(name: string, network: string, upstream: string, labels = ''): Promise<number | undefined> {
  const response = await fetch(`${gateway.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
  const text = await response.text();
  const line = text.split('\n').find((row) => row.startsWith(`${name}{`) && row.includes(`network="${network}"`) && row.includes(`upstream="${upstream}"`) && row.includes(labels));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

describe.each([
  { network: 'altered', first: 'first1', liar: 'altered', honest: 'honest1', lie: 'a header altered (its hash kept)' },
  { network: 'shifted', first: 'first2', liar: 'shifted', honest: 'honest2', lie: 'a real block of another height' },
])('a gap filled by an upstream that answers $lie', ({ network, first, liar, honest }) => {
  it('is not delivered: the upstream is left (unverified_block) and the next one fills the gap; every head once, in order, as the chain has it', async () => {
    const ws = new WebSocket(gateway.url(network).replace('http://', 'ws://').replace(`/${network}/v3/`, `/${network}/ws/v3/`), { perMessageDeflate: false });
    const messages: any[] = [];
    ws.on('message', (data: Buffer) => messages.push(JSON.parse(data.toString('utf8'))));
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_subscribe', params: ['newHeads'] }));
    await until(() => messages.some((message) => message.id === 1), 'the subscription confirmed');
    const subscription = messages.find((message) => message.id === 1).result as string;
    const heads = () => messages.filter((message) => message.params?.subscription === subscription).map((message) => message.params.result as Block);
    expect(proxies[first]!.subscribeCalls).toEqual(['newHeads']);

    const start = (await headNumber()) + 1;
    await directRpc(anvil.url, 'evm_mine', []);
    await until(() => heads().some((head) => Number(head.number) === start), 'the first head');
    // The carrying upstream falls silent while three blocks are mined, then dies: the next one
    // must fill the gap of three heads before its latest.
    proxies[first]!.freeze();
    for (let index = 0; index < 4; index += 1) await directRpc(anvil.url, 'evm_mine', []);
    const latest = await headNumber();
    await proxies[first]!.kill();
    await until(() => heads().some((head) => Number(head.number) === latest), `head ${latest}`, 20_000);

    expect(proxies[liar]!.requests).toContain('eth_getBlockByNumber');
    expect(proxies[honest]!.subscribeCalls).toEqual(['newHeads']);
    expect(await metric('tollgate_ws_upstream_failovers_total', network, liar, 'reason="unverified_block"')).toBe(1);
    // Routing heard of both: the upstream whose socket died and the liar rank below the honest one
    // for calls over HTTP too (all three have the same HTTP endpoint, first in the config order
    // otherwise), and neither circuit is opened by what their sockets did.
    const response = await fetch(gateway.url(network), { method: 'POST', headers: { 'content-type': 'application/json', 'cache-control': 'no-cache' }, body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'eth_blockNumber', params: [] }) });
    const requestId = response.headers.get('x-request-id');
    expect(((await response.json()) as { result: string }).result).toBe(`0x${(await headNumber()).toString(16)}`);
    await until(() => gateway.logLines.some((line) => line.includes(`"requestId":"${requestId}"`)), 'the call logged');
    expect(JSON.parse(gateway.logLines.find((line) => line.includes(`"requestId":"${requestId}"`))!).upstream).toBe(honest);
    expect(await metric('tollgate_upstream_circuit_state', network, first)).toBe(0);
    expect(await metric('tollgate_upstream_circuit_state', network, liar)).toBe(0);
    const received = heads().filter((head) => Number(head.number) >= start);
    expect(received.map((head) => Number(head.number))).toEqual(Array.from({ length: latest - start + 1 }, (_, index) => start + index));
    for (const head of received) {
      const canonical = await blockAt(Number(head.number));
      expect({ hash: head.hash, parentHash: head.parentHash, timestamp: head.timestamp }).toEqual({ hash: canonical.hash, parentHash: canonical.parentHash, timestamp: canonical.timestamp });
    }
    ws.close();
  }, 40_000);
});
