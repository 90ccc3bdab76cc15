// Upstreams as budgets, end to end (docs/budgets.md): real gateways on loopback in front of real
// anvil behind recording proxies, and a real redis-server shared by two replicas.
// - A declared rate limit holds across both replicas in every one-second window the upstream
//   sees; the overflow goes to the other upstream; with both at their limits, calls past the
//   deadline get -32005 / HTTP 429 with Retry-After, uncharged, and nothing else.
// - An upstream that declares nothing but answers 429 above 40 calls a second is learned: after
//   the first seconds under 2% of the calls it gets are 429s, and clients see none.
// - `selection: cheapest` sends each method to its cheaper upstream, fails over to the other
//   without a client error, and the units metrics equal the proxies' own counts × their prices.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { openStore } from '../src/store/index.js';
import type { Store } from '../src/store/types.js';
import { useSeededAnvil } from './helpers/anvil.js';
import { ensureBuilt } from './helpers/build.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { useRedis } from './helpers/redis.js';
import { startScriptedUpstream, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { killSpawned, spawnGateway } from './helpers/spawn-gateway.js';

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

/**
 * The most calls an upstream limited to `limit` a second may be seen to receive in one second:
 * 5% more, or two calls, whichever is more. Arrival times carry the delays of the gateway
 * processes and of loopback, and 5% of a 20-call limit is one call: less than one delayed call
 * per replica.
 */
const tolerated = (limit: number): number => limit + Math.max(Math.floor(limit * 0.05), 2);

/** The most arrivals within any one-second window (each window starting at an arrival). */
function busiestSecond(arrivals: readonly number[]): number {
  const sorted = [...arrivals].sort((a, b) => a - b);
  let best = 0;
  let start = 0;
  for (let end = 0; end < sorted.length; end += 1) {
    while (sorted[end]! - sorted[start]! >= 1_000) start += 1;
    best = Math.max(best, end - start + 1);
  }
  return best;
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

const metric = (tg: TestGateway, name: string, labels: string): Promise<number> => metricAt(tg.gateway.adminOrigin, name, labels);

async function metricAt(adminOrigin: string, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name}{${labels}}`));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

const gateways: TestGateway[] = [];
const cleanUps: Array<() => void> = [];
afterEach(async () => {
  for (const tg of gateways.splice(0)) await tg.close();
  for (const proxy of proxies.splice(0)) await proxy.upstream.close();
  for (const cleanUp of cleanUps.splice(0)) cleanUp();
});

describe('a declared rate limit, two replicas on one redis-server', () => {
  const keyPrefix = `budget-${Math.random().toString(36).slice(2)}:`;
  let store: Store;
  beforeAll(async () => {
    await ensureBuilt();
    store = await openStore({ driver: 'redis', url: redis.url, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 5_000, failOpen: false });
  });
  afterAll(() => store.close());
  afterEach(() => killSpawned());

  /**
   * Two gateway processes on one redis-server, serving one team's key. Processes of their own,
   * so that when a call reaches an upstream proxy here is not delayed by the gateways' work.
   */
  async function replicas(networks: Array<Record<string, unknown> & { id: string }>): Promise<{ urls: string[]; teamId: string; admin: string[] }> {
    const team = await store.createTeam({ name: `budget-${Math.random().toString(36).slice(2)}`, dailyCredits: 1_000_000_000 });
    const { secret } = await issueKey(store, { teamId: team.id });
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-budgets-'));
    cleanUps.push(() => rmSync(dir, { recursive: true, force: true }));
    const config = join(dir, 'gw.yaml');
    // JSON is YAML.
    writeFileSync(
      config,
      JSON.stringify({
        server: { host: '127.0.0.1', port: 0 },
        admin: { host: '127.0.0.1', port: 0, token: TEST_ADMIN_TOKEN },
        store: { driver: 'redis', url: redis.url, keyPrefix },
        networks: networks.map((network) => ({ baseUrls: ['*/eth'], healthCheck: { intervalMs: 0 }, ...network })),
      }),
    );
    const started = await Promise.all([0, 1].map(() => spawnGateway(config, { keep: (line) => line.msg !== 'request' })));
    return { urls: started.map((gateway) => `${gateway.rpcOrigin}/eth/v3/${secret}`), teamId: team.id, admin: started.map((gateway) => gateway.adminOrigin) };
  }

  /**
   * A few seconds of light load through both replicas, then the proxies' records cleared: the
   * gateways' connections to the upstreams exist before the measured run. A cold gateway opens
   * them during its first calls, and a connection that takes long to open delays the calls
   * granted before it was ready into the next second (docs/budgets.md).
   */
  async function warmUp(urls: readonly string[], upstreams: readonly RecordingProxy[]): Promise<void> {
    const answers = await drive(urls, 20, 2, balanceOf);
    expect(answers.filter(({ answer }) => answer.status !== 200)).toEqual([]);
    for (const proxy of upstreams) {
      proxy.arrivals.length = 0;
      proxy.upstream.calls.length = 0;
    }
  }

  async function teamSpend(teamId: string): Promise<number> {
    const today = new Date().toISOString().slice(0, 10);
    const rows = await store.usage({ teamId, fromDay: today, toDay: today });
    return rows.reduce((sum, row) => sum + row.credits, 0);
  }

  it('A never sees more than 50 calls in any second at 3× that load for 20 s; the rest go to B and no client sees an error', async () => {
    const a = await recordingProxy();
    const b = await recordingProxy();
    const { urls, admin } = await replicas([
      {
        id: 'eth',
        kind: 'evm',
        chainId: 31337,
        // B only takes what A cannot (weight 0: a fallback).
        selection: 'weighted',
        upstreams: [
          { id: 'a', url: a.upstream.url, rateLimit: { requestsPerSecond: 50 } },
          { id: 'b', url: b.upstream.url, weight: 0 },
        ],
      },
    ]);
    await warmUp(urls, [a, b]);
    const answers = await drive(urls, 150, 20, balanceOf);
    expect(answers.filter(({ answer }) => answer.status !== 200 || answer.body.error !== undefined)).toEqual([]);
    expect(busiestSecond(a.arrivals)).toBeLessThanOrEqual(tolerated(50));
    // A was kept busy near its limit (the limit was exercised, not merely unreached)…
    expect(a.arrivals.length).toBeGreaterThanOrEqual(0.8 * 50 * 20);
    // …and B took the rest (and any call A failed, as failover does).
    expect(b.arrivals.length).toBeGreaterThanOrEqual(3_000 - a.arrivals.length);
    expect(await metricAt(admin[0]!, 'tollgate_upstream_over_budget_total', 'network="eth",upstream="a"')).toBeGreaterThan(0);
  }, 90_000);

  it('with B at its limit too, calls that cannot wait get -32005 / 429 with Retry-After, uncharged, and nothing else', async () => {
    const a = await recordingProxy();
    const b = await recordingProxy();
    const { urls, teamId } = await replicas([
      {
        id: 'eth',
        kind: 'evm',
        chainId: 31337,
        requestTimeoutMs: 1_000,
        selection: 'weighted',
        upstreams: [
          { id: 'a', url: a.upstream.url, rateLimit: { requestsPerSecond: 50 } },
          { id: 'b', url: b.upstream.url, weight: 0, rateLimit: { requestsPerSecond: 20 } },
        ],
      },
    ]);
    await warmUp(urls, [a, b]);
    const spentBefore = await teamSpend(teamId);
    const answers = await drive(urls, 150, 6, balanceOf);
    const refused = answers.filter(({ answer }) => answer.status === 429);
    const served = answers.filter(({ answer }) => answer.status === 200 && answer.body.result !== undefined);
    const others = answers.filter(({ answer }) => answer.status !== 429 && answer.body?.result === undefined).map(({ answer }) => [answer.status, answer.body]);
    expect(others).toEqual([]);
    expect(refused.length).toBeGreaterThan(0);
    for (const { answer } of refused) {
      expect(answer.body.error).toMatchObject({ code: -32005, message: 'every upstream of this network is at its rate limit', data: { reason: 'upstream_budget' } });
      expect(answer.headers.get('retry-after')).toBe('1');
      expect(answer.headers.get('x-credits-cost')).toBe('0');
    }
    expect(busiestSecond(a.arrivals)).toBeLessThanOrEqual(tolerated(50));
    expect(busiestSecond(b.arrivals)).toBeLessThanOrEqual(tolerated(20));
    // Charged: exactly the answered calls, at their price; the refused ones cost nothing.
    const price = Number(served[0]!.answer.headers.get('x-credits-cost'));
    expect(price).toBeGreaterThan(0);
    expect((await teamSpend(teamId)) - spentBefore).toBe(served.length * price);
    // Every answered call reached an upstream (a failed-over one more than once).
    expect(a.arrivals.length + b.arrivals.length).toBeGreaterThanOrEqual(served.length);
  }, 90_000);
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
    const tg = await startTestGateway({
      networks: [
        {
          id: 'eth',
          kind: 'evm',
          chainId: 31337,
          selection: 'cheapest',
          upstreams: [
            { id: 'a', url: a.upstream.url, price: { units: A, usdPerMillion: 2 } },
            { id: 'b', url: b.upstream.url, price: { units: B } },
          ],
        },
      ],
    });
    gateways.push(tg);
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

    const unitsOf = (proxy: RecordingProxy, price: Record<string, number>) =>
      proxy.upstream.calls.reduce((sum, received) => sum + received.methods.reduce((inner, method) => inner + (price[method] ?? price['*']!), 0), 0);
    expect(await metric(tg, 'tollgate_upstream_units_total', 'network="eth",upstream="a"')).toBe(unitsOf(a, A));
    expect(await metric(tg, 'tollgate_upstream_units_total', 'network="eth",upstream="b"')).toBe(unitsOf(b, B));
    expect(await metric(tg, 'tollgate_upstream_usd_total', 'network="eth",upstream="a"')).toBeCloseTo((unitsOf(a, A) * 2) / 1_000_000, 12);
    const hits = Number(await metric(tg, 'tollgate_cache_upstream_calls_saved_total', 'network="eth",method="eth_getBlockByHash",reason="memory"'));
    expect(hits).toBeGreaterThanOrEqual(4);
    expect(await metric(tg, 'tollgate_upstream_units_saved_total', 'network="eth",upstream="a"')).toBe(hits * 10);
  }, 60_000);
});
