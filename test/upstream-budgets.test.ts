// Upstreams as budgets, end to end (docs/budgets.md): real gateways on loopback in front of real
// anvil behind recording proxies, and a real redis-server shared by two replicas.
// - Two store connections (two replicas) on one redis-server share an upstream's window: never
//   more permits than the limit, nor than a slice's share at once.
// - An upstream that declares nothing but answers 429 above 40 calls a second is learned: after
//   the first seconds under 2% of the calls it gets are 429s, and clients see none.
// - `selection: cheapest` sends each method to its cheaper upstream, fails over to the other
//   without a client error, and the units metrics equal the proxies' own counts × their prices.

import { afterEach, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { openStore } from '../src/store/index.js';
import type { Store, UsageRow } from '../src/store/types.js';
import { useSeededAnvil } from './helpers/anvil.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { useRedis } from './helpers/redis.js';
import { startScriptedUpstream, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';

const anvil = useSeededAnvil();
const redis = useRedis();

/** A proxy in front of anvil that notes when each call arrived (performance.now()) and can be told to answer otherwise. */
interface RecordingProxy {
  upstream: ScriptedUpstream;
  arrivals: number[];
  /** Replaces the answer (e.g. a 500) while set; proxies to anvil otherwise. */
  override: ScriptedBehaviour | undefined;
  /** The calls of one method it received. */
  count(method: string): number;
}

const proxies: RecordingProxy[] = [];
async function recordingProxy(answer?: (arrivedAt: number) => ScriptedBehaviour | undefined): Promise<RecordingProxy> {
  const proxy: RecordingProxy = {
    upstream: undefined as unknown as ScriptedUpstream,
    arrivals: [],
    override: undefined,
    count: (method) => proxy.upstream.calls.filter((call) => call.methods.includes(method)).length,
  };
  proxy.upstream = await startScriptedUpstream(() => {
    const at = performance.now();
    proxy.arrivals.push(at);
    return proxy.override ?? answer?.(at) ?? { kind: 'proxy', url: anvil.node.url };
  });
  proxies.push(proxy);
  return proxy;
}

type Answer = Awaited<ReturnType<typeof rpc>>;

/**
 * Sends `perSecond` calls a second for `seconds`, a few every 20 ms (load, not synchronisation:
 * the test then awaits every answer). Calls alternate between `urls`; each gets fresh params so
 * no cache or coalescing stands between the clients and the upstreams.
 */
async function drive(urls: readonly string[], perSecond: number, seconds: number, body: (n: number) => unknown): Promise<Array<{ at: number; answer: Answer }>> {
  const started = performance.now();
  const answers: Array<Promise<{ at: number; answer: Answer }>> = [];
  let sent = 0;
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const elapsed = performance.now() - started;
      const due = Math.min(perSecond * seconds, Math.floor((elapsed / 1000) * perSecond));
      for (; sent < due; sent += 1) {
        const n = sent;
        answers.push(rpc(urls[n % urls.length]!, body(n)).then((answer) => ({ at: performance.now() - started, answer })));
      }
      if (sent >= perSecond * seconds) {
        clearInterval(timer);
        resolve();
      }
    }, 20);
  });
  return Promise.all(answers);
}

const balanceOf = (n: number) => ({ jsonrpc: '2.0', id: n, method: 'eth_getBalance', params: [`0x${(n + 1).toString(16).padStart(40, '0')}`, 'latest'] });

/** The units a recording proxy's calls cost at `price` (a map with "*"): what the provider billed. */
function unitsAt(proxy: RecordingProxy, price: Record<string, number>): number {
  return proxy.upstream.calls.reduce((sum, received) => sum + received.methods.reduce((inner, method) => inner + (price[method] ?? price['*']!), 0), 0);
}

/** A gateway whose one network is on `selection: cheapest` in front of proxies a and b, with these prices. */
async function cheapestGateway(a: RecordingProxy, b: RecordingProxy, priceA: Record<string, unknown>, priceB: Record<string, unknown>, store?: Store): Promise<TestGateway> {
  const networks = [
    {
      id: 'eth',
      kind: 'evm',
      chainId: 31337,
      selection: 'cheapest',
      upstreams: [
        { id: 'a', url: a.upstream.url, price: priceA },
        { id: 'b', url: b.upstream.url, price: priceB },
      ],
    },
  ];
  const tg = await startTestGateway({ networks, store });
  gateways.push(tg);
  return tg;
}

async function metric(tg: TestGateway, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name}{${labels}}`));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const gateways: TestGateway[] = [];
afterEach(async () => {
  for (const tg of gateways.splice(0)) await tg.close();
  for (const proxy of proxies.splice(0)) await proxy.upstream.close();
});

describe("an upstream's window shared through one redis-server", () => {
  it('two replicas\' connections never take more than the limit in a window, nor more than the slice allows at once; a refused permit says when one frees', async () => {
    const keyPrefix = `budget-${Math.random().toString(36).slice(2)}:`;
    const open = () => openStore({ driver: 'redis', url: redis.url, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 5_000, failOpen: false });
    const replicas: Store[] = [await open(), await open()];
    try {
      const take = (scope: string, limit: number, sliceLimit: number) =>
        Promise.all(Array.from({ length: 80 }, (_, i) => replicas[i % 2]!.takeUpstreamPermit!(scope, limit, 1_000, 100, sliceLimit)));
      const whole = await take('eth/a', 50, 50);
      expect(whole.filter((wait) => wait === 0)).toHaveLength(50);
      for (const wait of whole.filter((wait) => wait !== 0)) expect(wait).toBeLessThanOrEqual(1_000);
      const spread = await take('eth/b', 50, 10);
      expect(spread.filter((wait) => wait === 0)).toHaveLength(10);
      for (const wait of spread.filter((wait) => wait !== 0)) expect(wait).toBeLessThanOrEqual(100);
      // Scopes are separate windows.
      expect(await replicas[0]!.takeUpstreamPermit!('eth/c', 1, 1_000, 100, 1)).toBe(0);
    } finally {
      await Promise.all(replicas.map((store) => store.close()));
    }
  });
});

describe('auto-tune', () => {
  it('an upstream that answers 429 above 40 calls a second is learned: after the first seconds under 2% of its calls are 429s, and clients see none', async () => {
    // The provider's own limiter: a sliding second of the calls it accepted.
    const accepted: number[] = [];
    const limited: number[] = [];
    const c = await recordingProxy((at) => {
      while (accepted.length > 0 && accepted[0]! <= at - 1_000) accepted.shift();
      if (accepted.length >= 40) {
        limited.push(at);
        return { kind: 'status', status: 429, body: 'Too Many Requests' };
      }
      accepted.push(at);
      return undefined;
    });
    const d = await recordingProxy();
    const tg = await startTestGateway({
      networks: [{ id: 'eth', kind: 'evm', chainId: 31337, selection: 'weighted', upstreams: [{ id: 'c', url: c.upstream.url }, { id: 'd', url: d.upstream.url, weight: 0 }] }],
    });
    gateways.push(tg);
    const started = performance.now();
    const answers = await drive([tg.url('eth')], 60, 15, balanceOf);
    expect(answers.filter(({ answer }) => answer.status !== 200 || answer.body.error !== undefined)).toEqual([]);
    expect(limited.length).toBeGreaterThan(0);
    const settledFrom = started + 5_000;
    const laterCalls = c.arrivals.filter((at) => at >= settledFrom).length;
    const laterLimited = limited.filter((at) => at >= settledFrom).length;
    expect(laterCalls).toBeGreaterThan(30 * 10);
    expect(laterLimited / laterCalls).toBeLessThan(0.02);
  }, 60_000);
});

describe('selection: cheapest and what each upstream cost', () => {
  it('each method goes to its cheaper upstream, fails over to the other without a client error, and the units metrics are the proxies\' counts × prices', async () => {
    const a = await recordingProxy();
    const b = await recordingProxy();
    const A = { eth_call: 10, eth_getLogs: 100, '*': 10 };
    const B = { eth_call: 30, eth_getLogs: 20, '*': 30 };
    const tg = await cheapestGateway(a, b, { units: A, usdPerMillion: 2 }, { units: B, usdPerMillion: 2 });
    const call = (n: number) => ({ jsonrpc: '2.0', id: n, method: 'eth_call', params: [{ to: `0x${(n + 0x1000).toString(16).padStart(40, '0')}`, data: '0x' }, 'latest'] });
    const logs = (n: number) => ({ jsonrpc: '2.0', id: n, method: 'eth_getLogs', params: [{ fromBlock: 'latest', toBlock: 'latest', topics: [`0x${(n + 1).toString(16).padStart(64, '0')}`] }] });
    for (let n = 0; n < 40; n += 1) {
      for (const body of [call(n), logs(n)]) {
        const answer = await rpc(tg.url('eth'), body);
        expect(answer.body.error, JSON.stringify(body)).toBeUndefined();
      }
    }
    expect(a.count('eth_call')).toBeGreaterThanOrEqual(38);
    expect(b.count('eth_getLogs')).toBeGreaterThanOrEqual(38);

    // The cheaper one for eth_call fails: B takes its calls, and no client sees an error.
    a.override = { kind: 'status', status: 500 };
    for (let n = 40; n < 50; n += 1) expect((await rpc(tg.url('eth'), call(n))).body.error).toBeUndefined();
    expect(b.count('eth_call')).toBeGreaterThanOrEqual(10);

    // Cache hits spare the cheapest upstream's units: a block by hash, asked 5 times, fetched once.
    const latest = (await rpc(tg.url('eth'), { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByNumber', params: ['0x1', false] })).body.result;
    a.override = undefined;
    const byHash = { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [latest.hash, false] };
    for (let i = 0; i < 5; i += 1) expect((await rpc(tg.url('eth'), byHash)).body.result.hash).toBe(latest.hash);

    expect(await metric(tg, 'tollgate_upstream_units_total', 'network="eth",upstream="a"')).toBe(unitsAt(a, A));
    expect(await metric(tg, 'tollgate_upstream_units_total', 'network="eth",upstream="b"')).toBe(unitsAt(b, B));
    expect(await metric(tg, 'tollgate_upstream_usd_total', 'network="eth",upstream="a"')).toBeCloseTo((unitsAt(a, A) * 2) / 1_000_000, 12);
    const hits = Number(await metric(tg, 'tollgate_cache_upstream_calls_saved_total', 'network="eth",method="eth_getBlockByHash",reason="memory"'));
    expect(hits).toBeGreaterThanOrEqual(4);
    expect(await metric(tg, 'tollgate_upstream_units_saved_total', 'network="eth",upstream="a"')).toBe(hits * 10);
  }, 60_000);
});

describe('what each team cost at the providers', () => {
  it("records per team, key and method the units of every call its calls sent (the proxies' own counts × prices, exactly) and the units its cache hits saved; the usage API and CSV show them", async () => {
    const a = await recordingProxy();
    const b = await recordingProxy();
    const A = { eth_call: 26, eth_getBlockByNumber: 16, eth_getBlockByHash: 16, '*': 10 };
    const B = { eth_call: 80, eth_getLogs: 255, '*': 80 };
    const tg = await cheapestGateway(a, b, { units: A, usdPerMillion: 0.5 }, { units: B, usdPerMillion: 0.5 });
    const other = await tg.store.createTeam({ name: `other-${Math.random().toString(36).slice(2)}`, dailyCredits: 1_000_000 });
    const otherKey = await issueKey(tg.store, { teamId: other.id });
    const spent = () => ({ a: unitsAt(a, A), b: unitsAt(b, B) });

    // Team one: reads, a block fetched once and then answered from the cache three times, and a
    // call that fails on A (500) and is answered by B: both attempts are billed, one is charged.
    const block = (await rpc(tg.url('eth'), { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByNumber', params: ['0x1', false] })).body.result;
    for (let n = 0; n < 5; n += 1) expect((await rpc(tg.url('eth'), { jsonrpc: '2.0', id: n, method: 'eth_call', params: [{ to: `0x${(n + 0x2000).toString(16).padStart(40, '0')}`, data: '0x' }, 'latest'] })).body.error).toBeUndefined();
    for (let i = 0; i < 4; i += 1) expect((await rpc(tg.url('eth'), { jsonrpc: '2.0', id: i, method: 'eth_getBlockByHash', params: [block.hash, false] })).body.result.hash).toBe(block.hash);
    a.override = { kind: 'status', status: 500 };
    expect((await rpc(tg.url('eth'), { jsonrpc: '2.0', id: 9, method: 'eth_call', params: [{ to: `0x${(0x3000).toString(16).padStart(40, '0')}`, data: '0x' }, 'latest'] })).body.error).toBeUndefined();
    a.override = undefined;
    const afterOne = spent();

    // Team two: its own calls, on the same upstreams.
    for (let n = 0; n < 3; n += 1) expect((await rpc(tg.url('eth', otherKey.secret), { jsonrpc: '2.0', id: n, method: 'eth_getLogs', params: [{ fromBlock: 'latest', toBlock: 'latest', topics: [`0x${(n + 7).toString(16).padStart(64, '0')}`] }] })).body.error).toBeUndefined();
    const afterTwo = spent();

    const today = new Date().toISOString().slice(0, 10);
    const totals = async (teamId: string) => {
      const rows = await tg.store.usage({ teamId, fromDay: today, toDay: today });
      return {
        units: rows.reduce((sum, row) => sum + (row.upstreamUnits ?? 0), 0),
        usd: rows.reduce((sum, row) => sum + (row.upstreamUsd ?? 0), 0),
        saved: rows.reduce((sum, row) => sum + (row.savedUnits ?? 0), 0),
      };
    };
    const oneUnits = afterOne.a + afterOne.b;
    const twoUnits = afterTwo.a - afterOne.a + (afterTwo.b - afterOne.b);
    // Written every couple of seconds, off the request path: wait for the write, then compare exactly.
    await until(async () => (await totals(tg.team.id)).units === oneUnits && (await totals(other.id)).units === twoUnits, 'the provider spend of both teams in the store');
    const one = await totals(tg.team.id);
    expect(one.usd).toBeCloseTo(((afterOne.a + afterOne.b) * 0.5) / 1_000_000, 12);
    // Three of the four block calls were cache hits, each saving the cheapest price of eth_getBlockByHash (A's 16).
    expect(one.saved).toBe(3 * 16);
    expect((await totals(other.id)).saved).toBe(0);
    // The failed-over call: A billed a 500 it answered, B the answer; the team was charged once.
    const rows = await tg.store.usage({ teamId: tg.team.id, fromDay: today, toDay: today });
    const calls = rows.find((row) => row.method === 'eth_call')!;
    expect(calls.requests).toBe(6);
    expect(calls.upstreamUnits).toBe(6 * 26 + 80);

    const csv = await (await fetch(`${tg.gateway.adminOrigin}/v1/usage.csv?team=${tg.team.id}&days=1`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    const [header, ...lines] = csv.trimEnd().split('\r\n');
    expect(header).toBe('day,team_id,key_id,network,method,credits,requests,upstream_units,upstream_usd,saved_units');
    const callLine = lines.find((line) => line.includes(',eth_call,'))!.split(',');
    expect(callLine.slice(7).map(Number)).toEqual([6 * 26 + 80, calls.upstreamUsd, 0]);
    const byHash = lines.find((line) => line.includes(',eth_getBlockByHash,'))!.split(',');
    expect(Number(byHash[9])).toBe(3 * 16);
    const api = (await (await fetch(`${tg.gateway.adminOrigin}/v1/usage?team=${tg.team.id}&days=1`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).json()) as { rows: UsageRow[] };
    expect(api.rows.find((row) => row.method === 'eth_call')).toMatchObject({ upstreamUnits: 6 * 26 + 80, savedUnits: 0 });
  }, 60_000);
});

describe('upstream quotas', () => {
  it('uses an upstream whose quota for the day is spent last, and a replica on the same store learns it from the store', async () => {
    const a = await recordingProxy();
    const b = await recordingProxy();
    const store = await openStore({ driver: 'sqlite', path: ':memory:' });
    const priceA = { units: { '*': 10 }, quota: { units: 50, per: 'day' } };
    const priceB = { units: { '*': 20 } };
    const tg = await cheapestGateway(a, b, priceA, priceB, store);
    const call = (gateway: TestGateway, n: number) => rpc(gateway.url('eth'), { jsonrpc: '2.0', id: n, method: 'eth_call', params: [{ to: `0x${(n + 0x4000).toString(16).padStart(40, '0')}`, data: '0x' }, 'latest'] });
    for (let n = 0; n < 8; n += 1) expect((await call(tg, n)).body.error).toBeUndefined();
    // A costs 10 a call and allows 50 a day: five calls, then B (dearer) takes them, no client error.
    expect(a.count('eth_call')).toBe(5);
    expect(b.count('eth_call')).toBe(3);

    const today = new Date().toISOString().slice(0, 10);
    await until(async () => (await store.upstreamUnits(['eth/a'], today))[0] === 50, "A's units of the day in the store");
    const replica = await cheapestGateway(a, b, priceA, priceB, store);
    // The replica reads the totals as it starts: once it has, A gets none of its calls either.
    await until(async () => {
      const before = b.count('eth_call');
      await call(replica, 100 + before);
      return b.count('eth_call') > before;
    }, 'the replica to route past the spent upstream');
    const atA = a.count('eth_call');
    for (let n = 200; n < 205; n += 1) expect((await call(replica, n)).body.error).toBeUndefined();
    expect(a.count('eth_call')).toBe(atA);
    // The gateways write their last totals as they close: before the store does.
    for (const gateway of gateways.splice(0)) await gateway.close();
    await store.close();
  }, 60_000);
});
