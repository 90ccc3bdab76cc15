// Filters pinned to the upstream that created them (docs/routing.md#filters), through a
// real gateway in front of two DIFFERENT anvil nodes, each behind a counting proxy: every filter
// call lands on the node that created the filter and answers with that node's blocks and logs;
// ids of another key, altered or malformed ids, and ids of an upstream removed by a reload are
// `-32000 filter not found`, uncharged, with no upstream call; a second gateway on the same store
// (a replica) serves the first one's ids. Scripted upstreams show that filter calls are never
// hedged nor failed over.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createPublicClient, http } from 'viem';
import { issueKey } from '../src/admin/key-issuer.js';
import { parseConfig } from '../src/config/load.js';
import type { GatewayConfig } from '../src/config/schema.js';
import { startAnvil, type AnvilNode } from '../src/devnet/anvil.js';
import { startGateway } from '../src/gateway.js';
import { createFilterIds } from '../src/routing/filter-ids.js';
import { createLogger } from '../src/logging/logger.js';
import { utcDay } from '../src/metering/meter.js';
import { openStore } from '../src/store/index.js';
import { directRpc } from './helpers/anvil.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { useScriptedUpstreams, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';

/** The catalogue is not merged yet: the methods these tests call are priced in the network's map. */
const METHODS = {
  eth_newFilter: 80,
  eth_newBlockFilter: 80,
  eth_newPendingTransactionFilter: 80,
  eth_getFilterChanges: 140,
  eth_getFilterLogs: 255,
  eth_uninstallFilter: 80,
  eth_blockNumber: 80,
};
const CREATING = new Set(['eth_newFilter', 'eth_newBlockFilter', 'eth_newPendingTransactionFilter']);
/** Init code that emits one LOG0 (no topics, no data) from the contract being created. */
const LOG_EMITTING_INIT_CODE = '0x60006000a0';

let nodes: AnvilNode[] = [];
beforeAll(async () => {
  nodes = await Promise.all([startAnvil(), startAnvil()]);
  // Different chains: node b is ahead, so no block of one can have a hash of the other.
  for (let i = 0; i < 5; i += 1) await directRpc(nodes[1]!.url, 'evm_mine', []);
}, 60_000);
afterAll(async () => {
  await Promise.all(nodes.map((node) => node.stop()));
});

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const upstream = useScriptedUpstreams();

/**
 * A counting proxy in front of a node. While `refuseCreation()` says so it answers filter
 * creation with HTTP 503, so the gateway's failover places the filter on the other upstream.
 */
function proxyTo(node: AnvilNode, refuseCreation: () => boolean): Promise<ScriptedUpstream> {
  return upstream((call) =>
    call.methods.some((method) => CREATING.has(method)) && refuseCreation() ? { kind: 'status', status: 503 } : { kind: 'proxy', url: node.url },
  );
}

const call = (method: string, params: unknown[] = [], id: unknown = 1) => ({ jsonrpc: '2.0', id, method, params });
const countOf = (proxy: ScriptedUpstream, method: string) => proxy.calls.filter((received) => received.methods.includes(method)).length;

async function teamSpend(tg: TestGateway): Promise<number> {
  const [result] = await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day: utcDay(Date.now()) }]);
  return result!.teamUsed;
}

async function latestHash(node: AnvilNode): Promise<string> {
  return ((await directRpc(node.url, 'eth_getBlockByNumber', ['latest', false])) as { hash: string }).hash;
}

/** The hash of the block that holds a transaction, once the node has mined it (automine: at once, or nearly). */
async function minedIn(node: AnvilNode, txHash: string): Promise<string> {
  for (let tries = 0; ; tries += 1) {
    const receipt = (await directRpc(node.url, 'eth_getTransactionReceipt', [txHash])) as { blockHash: string } | null;
    if (receipt !== null) return receipt.blockHash;
    if (tries > 100) throw new Error(`transaction ${txHash} not mined`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** Two proxies (a → nodes[0], b → nodes[1]) behind one gateway; `placeOn` chooses where the next filter is created. */
async function twoNodeGateway(network: Record<string, unknown> = {}) {
  let target: 'a' | 'b' | undefined;
  const a = await proxyTo(nodes[0]!, () => target === 'b');
  const b = await proxyTo(nodes[1]!, () => target === 'a');
  const tg = await startTestGateway({
    networks: [
      {
        id: 'eth',
        kind: 'evm',
        chainId: 31337,
        methods: METHODS,
        // The refused creations must not open a circuit; hedging stays on (filter calls ignore it).
        circuitBreaker: { failureThreshold: 1000 },
        hedge: { enabled: true, delayMs: 5 },
        upstreams: [
          { id: 'a', url: a.url },
          { id: 'b', url: b.url },
        ],
        ...network,
      },
    ],
  });
  cleanups.push(() => tg.close());
  const placeOn = (where: 'a' | 'b' | undefined) => {
    target = where;
  };
  return { tg, a, b, placeOn };
}

async function createFilter(tg: TestGateway, method: string, params: unknown[] = []): Promise<string> {
  const res = await rpc(tg.url('eth'), call(method, params));
  expect(res.body.error).toBeUndefined();
  expect(res.body.result).toMatch(/^0x[0-9a-f]+$/);
  return res.body.result as string;
}

describe('filters across two upstreams on two different anvil nodes', () => {
  it('20 rounds: every filter call lands on the upstream that created it and answers with that node\'s blocks and logs', async () => {
    const { tg, a, b, placeOn } = await twoNodeGateway();
    const filters: Array<{ id: string; node: 0 | 1; kind: 'block' | 'log' }> = [];
    for (const [where, node] of [['a', 0], ['b', 1]] as const) {
      placeOn(where);
      filters.push({ id: await createFilter(tg, 'eth_newBlockFilter'), node, kind: 'block' });
      filters.push({ id: await createFilter(tg, 'eth_newBlockFilter'), node, kind: 'block' });
      filters.push({ id: await createFilter(tg, 'eth_newFilter', [{}]), node, kind: 'log' });
    }
    placeOn(undefined);
    // Each upstream got the creations placed on it (and maybe refused others first); which node
    // holds which filter is proven below by the blocks each poll returns.
    for (const proxy of [a, b]) expect(proxy.calls.filter((received) => received.methods.some((m) => CREATING.has(m))).length).toBeGreaterThanOrEqual(3);
    expect(new Set(filters.map((filter) => filter.id)).size).toBe(6);

    const seen = { a: { changes: 0 }, b: { changes: 0 } };
    for (let round = 0; round < 20; round += 1) {
      // One block with one log on each node (automine), sent to the nodes directly.
      const mined: string[] = [];
      for (const node of nodes) {
        const [from] = (await directRpc(node.url, 'eth_accounts', [])) as string[];
        const txHash = await directRpc(node.url, 'eth_sendTransaction', [{ from, data: LOG_EMITTING_INIT_CODE, gas: '0x186a0' }]);
        mined.push(await minedIn(node, txHash as string));
      }
      const replies = await Promise.all(filters.map((filter, index) => rpc(tg.url('eth'), call('eth_getFilterChanges', [filter.id], `${round}-${index}`))));
      for (const [index, filter] of filters.entries()) {
        const reply = replies[index]!;
        expect(reply.body.error).toBeUndefined();
        if (filter.kind === 'block') {
          expect(reply.body.result, `round ${round} filter ${index} mined ${JSON.stringify(mined)}`).toEqual([mined[filter.node]]);
        } else {
          expect(reply.body.result).toHaveLength(1);
          expect(reply.body.result[0].blockHash).toBe(mined[filter.node]);
        }
        seen[filter.node === 0 ? 'a' : 'b'].changes += 1;
      }
    }
    expect(countOf(a, 'eth_getFilterChanges')).toBe(seen.a.changes);
    expect(countOf(b, 'eth_getFilterChanges')).toBe(seen.b.changes);
    expect(seen.a.changes).toBe(60);

    // eth_getFilterLogs on the log filters: the creating node's logs.
    for (const filter of filters.filter((candidate) => candidate.kind === 'log')) {
      const before = { a: countOf(a, 'eth_getFilterLogs'), b: countOf(b, 'eth_getFilterLogs') };
      const logs = await rpc(tg.url('eth'), call('eth_getFilterLogs', [filter.id]));
      expect(logs.body.error).toBeUndefined();
      const direct = (await directRpc(nodes[filter.node]!.url, 'eth_getLogs', [{}])) as unknown[];
      expect(logs.body.result).toEqual(direct);
      expect(countOf(a, 'eth_getFilterLogs') - before.a).toBe(filter.node === 0 ? 1 : 0);
      expect(countOf(b, 'eth_getFilterLogs') - before.b).toBe(filter.node === 1 ? 1 : 0);
    }

    // Every call answered was charged its price: 6 creations, 120 polls, 2 log reads.
    expect(await teamSpend(tg)).toBe(6 * 80 + 120 * 140 + 2 * 255);
    const metrics = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    expect(metrics).not.toMatch(/tollgate_hedges_total\{network="eth"/);
  }, 60_000);

  it("another key's id, an altered id and malformed ids get -32000 filter not found, uncharged, with no upstream call", async () => {
    const { tg, a, b, placeOn } = await twoNodeGateway();
    placeOn('b');
    const id = await createFilter(tg, 'eth_newBlockFilter');
    placeOn(undefined);
    const other = await issueKey(tg.store, { teamId: tg.team.id });
    const spent = await teamSpend(tg);
    const upstreamCalls = a.calls.length + b.calls.length;

    const flip = (text: string, at: number) => `${text.slice(0, at)}${text[at] === '0' ? '1' : '0'}${text.slice(at + 1)}`;
    const attempts: Array<[string, string | undefined, unknown]> = [
      ["another key's id", other.secret, id],
      ['a byte of the upstream tag altered', undefined, flip(id, 6)],
      ["a byte of the upstream's filter id altered", undefined, flip(id, 24)],
      ['a byte of the MAC altered', undefined, flip(id, id.length - 3)],
      ['the id cut short', undefined, id.slice(0, -2)],
      ['a node-style id', undefined, '0x1'],
      ['not hex', undefined, 'filter-1'],
      ['upper-case hex of a valid id, altered', undefined, flip(id, 40).toUpperCase().replace('0X', '0x')],
    ];
    for (const [what, key, filterId] of attempts) {
      for (const method of ['eth_getFilterChanges', 'eth_getFilterLogs', 'eth_uninstallFilter']) {
        const res = await rpc(tg.url('eth', key), call(method, [filterId], what));
        expect(res.status, `${what} / ${method}`).toBe(200);
        expect(res.body, `${what} / ${method}`).toEqual({ jsonrpc: '2.0', id: what, error: { code: -32000, message: 'filter not found' } });
        expect(res.headers.get('x-credits-cost')).toBe('0');
      }
    }
    // A filter id that is not a string is a params error, also uncharged.
    const wrongType = await rpc(tg.url('eth'), call('eth_getFilterChanges', [42]));
    expect(wrongType.body.error.code).toBe(-32602);
    // In a batch, each item on its own: the forged one fails, the real one is answered by b.
    const batch = await rpc(tg.url('eth'), [call('eth_getFilterChanges', [flip(id, 30)], 'forged'), call('eth_getFilterChanges', [id], 'real')]);
    expect(batch.body[0].error).toEqual({ code: -32000, message: 'filter not found' });
    expect(batch.body[1].result).toEqual([]);

    expect(a.calls.length + b.calls.length).toBe(upstreamCalls + 1);
    expect(countOf(b, 'eth_getFilterChanges')).toBe(1);
    expect(await teamSpend(tg)).toBe(spent + 140);
    // The owner's id still works with its own key.
    const own = await rpc(tg.url('eth'), call('eth_getFilterChanges', [id]));
    expect(own.body.result).toEqual([]);
  });

  it('uninstall goes to the creating upstream; a second uninstall says false, consistently, from the same upstream', async () => {
    const { tg, a, b, placeOn } = await twoNodeGateway();
    placeOn('a');
    const id = await createFilter(tg, 'eth_newBlockFilter');
    placeOn(undefined);
    expect((await rpc(tg.url('eth'), call('eth_uninstallFilter', [id]))).body.result).toBe(true);
    for (let i = 0; i < 3; i += 1) expect((await rpc(tg.url('eth'), call('eth_uninstallFilter', [id]))).body.result).toBe(false);
    expect(countOf(a, 'eth_uninstallFilter')).toBe(4);
    expect(countOf(b, 'eth_uninstallFilter')).toBe(0);
    // The node no longer knows the filter: its own error passes through (an upstream answer, charged).
    const gone = await rpc(tg.url('eth'), call('eth_getFilterChanges', [id]));
    expect(gone.body.error).toEqual({ code: -32000, message: 'filter not found' });
    expect(gone.headers.get('x-credits-cost')).toBe('140');
    expect(countOf(a, 'eth_getFilterChanges')).toBe(1);
  });

  it('a second gateway on the same store (a replica) serves the first one\'s filter ids on the same upstream', async () => {
    const { tg, a, b, placeOn } = await twoNodeGateway();
    placeOn('b');
    const id = await createFilter(tg, 'eth_newBlockFilter');
    placeOn(undefined);
    const replica = await startTestGateway({
      store: tg.store,
      networks: [{ id: 'eth', kind: 'evm', chainId: 31337, methods: METHODS, upstreams: [{ id: 'a', url: a.url }, { id: 'b', url: b.url }] }],
    });
    cleanups.push(() => replica.close());
    await directRpc(nodes[1]!.url, 'evm_mine', []);
    const res = await rpc(replica.url('eth', tg.apiKey), call('eth_getFilterChanges', [id]));
    expect(res.body.result).toEqual([await latestHash(nodes[1]!)]);
    expect(countOf(b, 'eth_getFilterChanges')).toBe(1);
    expect(countOf(a, 'eth_getFilterChanges')).toBe(0);
  });

  it('viem createBlockFilter + getFilterChanges through the gateway with two upstreams', async () => {
    const { tg, a, b } = await twoNodeGateway({ selection: 'weighted' });
    const client = createPublicClient({ transport: http(tg.url('eth')) });
    const filter = await client.createBlockFilter();
    const creator = countOf(a, 'eth_newBlockFilter') > 0 ? 0 : 1;
    for (const node of nodes) for (let i = 0; i < 2; i += 1) await directRpc(node.url, 'evm_mine', []);
    const expected = await Promise.all([1, 0].map((back) => directRpc(nodes[creator]!.url, 'eth_getBlockByNumber', [`latest`, false]).then(async (latest) => {
      const number = BigInt((latest as { number: string }).number) - BigInt(back);
      return ((await directRpc(nodes[creator]!.url, 'eth_getBlockByNumber', [`0x${number.toString(16)}`, false])) as { hash: string }).hash;
    })));
    expect(await client.getFilterChanges({ filter })).toEqual(expected);
    expect(await client.getFilterChanges({ filter })).toEqual([]);
    expect(await client.uninstallFilter({ filter })).toBe(true);
    const pinned = creator === 0 ? a : b;
    const otherProxy = creator === 0 ? b : a;
    expect(countOf(pinned, 'eth_getFilterChanges')).toBe(2);
    expect(countOf(otherProxy, 'eth_getFilterChanges')).toBe(0);
  });
});

describe('a config reload that removes the creating upstream', () => {
  it("makes its filters 'filter not found' (uncharged, no upstream call) while the other upstream's filters keep working", async () => {
    const proxies = [await proxyTo(nodes[0]!, () => false), await proxyTo(nodes[1]!, () => false)];
    const network = (upstreams: Array<{ id: string; url: string }>) => ({
      id: 'eth',
      kind: 'evm',
      chainId: 31337,
      baseUrls: ['*/eth'],
      healthCheck: { intervalMs: 0 },
      methods: METHODS,
      upstreams,
    });
    const raw = (upstreams: Array<{ id: string; url: string }>) => ({
      server: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0, token: TEST_ADMIN_TOKEN },
      networks: [network(upstreams)],
    });
    let current: GatewayConfig = parseConfig(raw([{ id: 'a', url: proxies[0]!.url }, { id: 'b', url: proxies[1]!.url }]));
    const store = await openStore({ driver: 'sqlite', path: ':memory:' });
    const team = await store.createTeam({ name: 'reload', dailyCredits: 1_000_000 });
    const { secret } = await issueKey(store, { teamId: team.id });
    const gateway = await startGateway(current, { store, logger: createLogger({ level: 'silent' }), loadConfig: () => current });
    cleanups.push(async () => {
      await gateway.close();
      await store.close();
    });
    const url = `${gateway.rpcOrigin}/eth/v3/${secret}`;
    // a is first by config order; b gets the second filter after a refuses it.
    const onA = (await rpc(url, call('eth_newBlockFilter'))).body.result as string;
    proxies[0]!.setBehaviour({ kind: 'status', status: 503 });
    const onB = (await rpc(url, call('eth_newBlockFilter'))).body.result as string;
    proxies[0]!.setBehaviour({ kind: 'proxy', url: nodes[0]!.url });
    expect(countOf(proxies[1]!, 'eth_newBlockFilter')).toBe(1);

    current = parseConfig(raw([{ id: 'b', url: proxies[1]!.url }]));
    await gateway.reload();
    const before = proxies[0]!.calls.length + proxies[1]!.calls.length;
    const spend = async () => (await store.applyLedger([{ type: 'peek', teamId: team.id, day: utcDay(Date.now()) }]))[0]!.teamUsed;
    const spentBefore = await spend();
    const lost = await rpc(url, call('eth_getFilterChanges', [onA]));
    expect(lost.body.error).toEqual({ code: -32000, message: 'filter not found' });
    expect(lost.headers.get('x-credits-cost')).toBe('0');
    expect(proxies[0]!.calls.length + proxies[1]!.calls.length).toBe(before);
    expect(await spend()).toBe(spentBefore);
    // b is still configured: its filter still works.
    expect((await rpc(url, call('eth_getFilterChanges', [onB]))).body.error).toBeUndefined();

    // An upstream re-added under the same id but another URL is another node: its old ids are gone too.
    current = parseConfig(raw([{ id: 'a', url: `${proxies[0]!.url}/other` }, { id: 'b', url: proxies[1]!.url }]));
    await gateway.reload();
    expect((await rpc(url, call('eth_getFilterChanges', [onA]))).body.error).toEqual({ code: -32000, message: 'filter not found' });
  });
});

describe('filter calls with scripted upstreams', () => {
  const scriptedFilterNode = (changesDelayMs: number): ScriptedBehaviour | ((received: { methods: string[] }) => ScriptedBehaviour) => (received) =>
    received.methods[0] === 'eth_newBlockFilter' ? { kind: 'result', result: '0x1' } : { kind: 'result', result: ['0xabc'], delayMs: changesDelayMs };

  async function scriptedGateway(first: ScriptedUpstream, second: ScriptedUpstream) {
    const tg = await startTestGateway({
      networks: [
        {
          id: 'eth',
          kind: 'evm',
          chainId: 31337,
          methods: METHODS,
          hedge: { enabled: true, delayMs: 10 },
          upstreams: [
            { id: 'a', url: first.url, timeoutMs: 2_000 },
            { id: 'b', url: second.url },
          ],
        },
      ],
    });
    cleanups.push(() => tg.close());
    return tg;
  }

  it('are never hedged: a slow pinned upstream is waited for, the other gets no call', async () => {
    const a = await upstream(scriptedFilterNode(150));
    const b = await upstream(scriptedFilterNode(0));
    const tg = await scriptedGateway(a, b);
    const id = await createFilter(tg, 'eth_newBlockFilter');
    const res = await rpc(tg.url('eth'), call('eth_getFilterChanges', [id]));
    expect(res.body.result).toEqual(['0xabc']);
    // The upstream got its own id back, not the gateway's.
    expect((a.calls.at(-1)!.body as { params: unknown[] }).params).toEqual(['0x1']);
    expect(b.calls).toHaveLength(0);
  });

  it('are never failed over: a failure of the pinned upstream is -32603 with its attempt, uncharged', async () => {
    const a = await upstream(scriptedFilterNode(0));
    const b = await upstream(scriptedFilterNode(0));
    const tg = await scriptedGateway(a, b);
    const id = await createFilter(tg, 'eth_newBlockFilter');
    a.setBehaviour({ kind: 'status', status: 500 });
    const spent = await teamSpend(tg);
    const res = await rpc(tg.url('eth'), call('eth_getFilterChanges', [id]));
    expect(res.status).toBe(502);
    expect(res.body.error).toEqual({ code: -32603, message: 'every upstream failed', data: { attempts: [{ upstream: 'a', reason: 'http_500' }] } });
    expect(b.calls).toHaveLength(0);
    expect(await teamSpend(tg)).toBe(spent);
  });

  it('a creation answered with something that is not a filter id is an upstream fault: the next upstream creates it', async () => {
    const a = await upstream({ kind: 'result', result: { not: 'an id' } });
    const b = await upstream(scriptedFilterNode(0));
    const tg = await scriptedGateway(a, b);
    const id = await createFilter(tg, 'eth_newBlockFilter');
    expect((await rpc(tg.url('eth'), call('eth_getFilterChanges', [id]))).body.result).toEqual(['0xabc']);
    expect(b.calls.map((received) => received.methods[0])).toEqual(['eth_newBlockFilter', 'eth_getFilterChanges']);
  });
});

describe('the filter id codec', () => {
  const upstreamA = { id: 'a', config: { url: 'http://a.example' } };
  const upstreamB = { id: 'b', config: { url: 'http://b.example' } };
  const scope = { network: 'eth', keyId: 'key-1' };

  it('decodes its own ids to the upstream and its filter id, with the same secret on another instance (a replica)', () => {
    const secret = 's'.repeat(32);
    const id = createFilterIds(secret).encode(scope, upstreamB, '0x1f')!;
    expect(id).toMatch(/^0x01[0-9a-f]+$/);
    expect(createFilterIds(secret).decode(scope, id, [upstreamA, upstreamB])).toEqual({ upstream: upstreamB, upstreamFilterId: '0x1f' });
  });

  it('refuses ids of another secret, network or key, and upstreams whose URL changed', () => {
    const ids = createFilterIds('s'.repeat(32));
    const id = ids.encode(scope, upstreamA, '0x1f')!;
    expect(createFilterIds('t'.repeat(32)).decode(scope, id, [upstreamA])).toBeUndefined();
    expect(ids.decode({ ...scope, network: 'other' }, id, [upstreamA])).toBeUndefined();
    expect(ids.decode({ ...scope, keyId: 'key-2' }, id, [upstreamA])).toBeUndefined();
    expect(ids.decode(scope, id, [{ id: 'a', config: { url: 'http://elsewhere.example' } }])).toBeUndefined();
  });

  it('carries only 1–255 printable ASCII characters of upstream filter id; refuses a short secret', () => {
    const ids = createFilterIds('s'.repeat(32));
    expect(ids.encode(scope, upstreamA, '')).toBeUndefined();
    expect(ids.encode(scope, upstreamA, 'x'.repeat(256))).toBeUndefined();
    expect(ids.encode(scope, upstreamA, 'filter é')).toBeUndefined();
    const longest = ids.encode(scope, upstreamA, 'x'.repeat(255))!;
    expect(ids.decode(scope, longest, [upstreamA])?.upstreamFilterId).toBe('x'.repeat(255));
    expect(() => createFilterIds('short')).toThrow(/32 characters/);
  });

  it('a configured filters.idSecret is used instead of the store\'s: two gateways with it decode each other\'s ids', async () => {
    const secret = 'configured-filter-secret-0123456789';
    const node = await upstream({ kind: 'result', result: '0x7' });
    const network = { id: 'eth', kind: 'evm', chainId: 31337, methods: METHODS, upstreams: [{ id: 'a', url: node.url }] };
    const first = await startTestGateway({ networks: [network], config: { filters: { idSecret: secret } } });
    cleanups.push(() => first.close());
    const id = await createFilter(first, 'eth_newBlockFilter');
    expect(createFilterIds(secret).decode({ network: 'eth', keyId: first.keyId }, id, [{ id: 'a', config: { url: node.url } }])?.upstreamFilterId).toBe('0x7');
    // The store's generated secret is not the one in use.
    const stored = await first.store.sharedSecret('filter-ids', 'unused-candidate-0123456789abcdef');
    expect(createFilterIds(stored).decode({ network: 'eth', keyId: first.keyId }, id, [{ id: 'a', config: { url: node.url } }])).toBeUndefined();
  });
});
