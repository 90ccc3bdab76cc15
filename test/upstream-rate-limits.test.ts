// A declared rate limit held across replicas (docs/budgets.md): two gateway processes on one
// real redis-server, in front of real anvil behind counting upstreams that are processes of
// their own (so arrival times are what a provider would see, not delayed by this test's event
// loop). At 3× the limit for 20 s, A never sees more than 50 calls (+5%) in any one-second
// window, the rest go to B, and no client sees an error; with B at its limit too, calls that
// cannot wait get -32005 / HTTP 429 with Retry-After, uncharged, and nothing else.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { openStore } from '../src/store/index.js';
import type { Store } from '../src/store/types.js';
import { useSeededAnvil } from './helpers/anvil.js';
import { ensureBuilt } from './helpers/build.js';
import { rpc, TEST_ADMIN_TOKEN } from './helpers/gateway.js';
import { useRedis } from './helpers/redis.js';
import { killSpawned, spawnGateway } from './helpers/spawn-gateway.js';

const anvil = useSeededAnvil();
const redis = useRedis();

interface CountingUpstream {
  url: string;
  /** Arrival times (epoch ms) of the calls it received since the last reset. */
  arrivals(): Promise<number[]>;
  reset(): Promise<void>;
  child: ChildProcess;
}

const children: ChildProcess[] = [];
const cleanUps: Array<() => void> = [];

async function firstLine(child: ChildProcess): Promise<string> {
  for await (const line of createInterface({ input: child.stdout! })) return line as string;
  throw new Error('the counting upstream exited before it listened');
}

async function countingUpstream(): Promise<CountingUpstream> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/helpers/counting-upstream-process.ts', anvil.node.url], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  const { port } = JSON.parse(await firstLine(child)) as { port: number };
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    child,
    arrivals: async () => (await (await fetch(`${url}/arrivals`)).json()) as number[],
    reset: async () => void (await fetch(`${url}/reset`, { method: 'POST' })),
  };
}

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

/** The most calls an upstream limited to `limit` a second may be seen to receive in one second: 5% more. */
const tolerated = (limit: number): number => Math.floor(limit * 1.05);

type Answer = Awaited<ReturnType<typeof rpc>>;

/**
 * Sends `perSecond` calls a second for `seconds`, a few every 20 ms (load, not synchronisation:
 * the test then awaits every answer). Calls alternate between `urls`; each gets fresh params so
 * no cache or coalescing stands between the clients and the upstreams.
 */
async function drive(urls: readonly string[], perSecond: number, seconds: number): Promise<Answer[]> {
  const started = performance.now();
  const answers: Array<Promise<Answer>> = [];
  let sent = 0;
  const total = perSecond * seconds;
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const due = Math.min(total, Math.floor(((performance.now() - started) / 1000) * perSecond));
      for (; sent < due; sent += 1) answers.push(rpc(urls[sent % urls.length]!, balanceOf(sent)));
      if (sent >= total) {
        clearInterval(timer);
        resolve();
      }
    }, 20);
  });
  return Promise.all(answers);
}

let nextAddress = 0x10_000;
const balanceOf = (id: number) => ({ jsonrpc: '2.0', id, method: 'eth_getBalance', params: [`0x${(nextAddress++).toString(16).padStart(40, '0')}`, 'latest'] });

const keyPrefix = `rate-limits-${Math.random().toString(36).slice(2)}:`;
let store: Store;
beforeAll(async () => {
  await ensureBuilt();
  store = await openStore({ driver: 'redis', url: redis.url, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 5_000, failOpen: false });
});
afterAll(() => store.close());
afterEach(async () => {
  await killSpawned();
  for (const child of children.splice(0)) child.kill();
  for (const cleanUp of cleanUps.splice(0)) cleanUp();
});

/** Two gateway processes on one redis-server, serving one team's key. */
async function replicas(upstreams: ReadonlyArray<Record<string, unknown>>, requestTimeoutMs = 10_000): Promise<{ urls: string[]; teamId: string; admin: string[] }> {
  const team = await store.createTeam({ name: `rate-limits-${Math.random().toString(36).slice(2)}`, dailyCredits: 1_000_000_000 });
  const { secret } = await issueKey(store, { teamId: team.id });
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-rate-limits-'));
  cleanUps.push(() => rmSync(dir, { recursive: true, force: true }));
  const config = join(dir, 'gw.yaml');
  // JSON is YAML. B only takes what A cannot (weight 0: a fallback).
  const network = { id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], healthCheck: { intervalMs: 0 }, selection: 'weighted', requestTimeoutMs, upstreams };
  writeFileSync(
    config,
    JSON.stringify({
      server: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0, token: TEST_ADMIN_TOKEN },
      store: { driver: 'redis', url: redis.url, keyPrefix },
      networks: [network],
    }),
  );
  const started = await Promise.all([0, 1].map(() => spawnGateway(config, { keep: (line) => line.msg !== 'request' })));
  return { urls: started.map((gateway) => `${gateway.rpcOrigin}/eth/v3/${secret}`), teamId: team.id, admin: started.map((gateway) => gateway.adminOrigin) };
}

/**
 * Two seconds of light load through both replicas, then the upstreams' records cleared: the
 * gateways' connections to the upstreams exist before the measured run. A cold gateway opens
 * them during its first calls, and a connection slow to open delays the calls granted before it
 * was ready into the next second (docs/budgets.md).
 */
async function warmUp(urls: readonly string[], upstreams: readonly CountingUpstream[]): Promise<void> {
  const answers = await drive(urls, 20, 2);
  expect(answers.filter((answer) => answer.status !== 200)).toEqual([]);
  for (const upstream of upstreams) await upstream.reset();
}

async function teamSpend(teamId: string): Promise<number> {
  const today = new Date().toISOString().slice(0, 10);
  const rows = await store.usage({ teamId, fromDay: today, toDay: today });
  return rows.reduce((sum, row) => sum + row.credits, 0);
}

async function overBudget(adminOrigin: string): Promise<number> {
  const text = await (await fetch(`${adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith('tollgate_upstream_over_budget_total{network="eth",upstream="a"}'));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('a declared rate limit, two replicas on one redis-server', () => {
  it('A never sees more than 50 calls in any second at 3× that load for 20 s; the rest go to B and no client sees an error', async () => {
    const [a, b] = await Promise.all([countingUpstream(), countingUpstream()]);
    const { urls, admin } = await replicas([
      { id: 'a', url: a.url, rateLimit: { requestsPerSecond: 50 } },
      { id: 'b', url: b.url, weight: 0 },
    ]);
    await warmUp(urls, [a, b]);
    const answers = await drive(urls, 150, 20);
    expect(answers.filter((answer) => answer.status !== 200 || answer.body.error !== undefined)).toEqual([]);
    const [atA, atB] = await Promise.all([a.arrivals(), b.arrivals()]);
    expect(busiestSecond(atA)).toBeLessThanOrEqual(tolerated(50));
    // A was kept busy near its limit (the limit was exercised, not merely unreached)…
    expect(atA.length).toBeGreaterThanOrEqual(0.8 * 50 * 20);
    // …and B took the rest (and any call A failed, as failover does).
    expect(atB.length).toBeGreaterThanOrEqual(3_000 - atA.length);
    expect((await overBudget(admin[0]!)) + (await overBudget(admin[1]!))).toBeGreaterThan(0);
  }, 90_000);

  it('with B at its limit too, calls that cannot wait get -32005 / 429 with Retry-After, uncharged, and nothing else', async () => {
    const [a, b] = await Promise.all([countingUpstream(), countingUpstream()]);
    const { urls, teamId } = await replicas(
      [
        { id: 'a', url: a.url, rateLimit: { requestsPerSecond: 50 } },
        { id: 'b', url: b.url, weight: 0, rateLimit: { requestsPerSecond: 20 } },
      ],
      2_000,
    );
    await warmUp(urls, [a, b]);
    const spentBefore = await teamSpend(teamId);
    const answers = await drive(urls, 150, 6);
    const refused = answers.filter((answer) => answer.status === 429);
    const served = answers.filter((answer) => answer.status === 200 && answer.body.result !== undefined);
    expect(answers.filter((answer) => answer.status !== 429 && answer.body?.result === undefined).map((answer) => [answer.status, answer.body])).toEqual([]);
    expect(refused.length).toBeGreaterThan(0);
    for (const answer of refused) {
      expect(answer.body.error).toMatchObject({ code: -32005, message: 'every upstream of this network is at its rate limit', data: { reason: 'upstream_budget' } });
      expect(answer.headers.get('retry-after')).toBe('1');
      expect(answer.headers.get('x-credits-cost')).toBe('0');
    }
    const [atA, atB] = await Promise.all([a.arrivals(), b.arrivals()]);
    expect(busiestSecond(atA)).toBeLessThanOrEqual(tolerated(50));
    expect(busiestSecond(atB)).toBeLessThanOrEqual(tolerated(20));
    // Charged: exactly the answered calls, at their price; the refused ones cost nothing.
    const price = Number(served[0]!.headers.get('x-credits-cost'));
    expect(price).toBeGreaterThan(0);
    expect((await teamSpend(teamId)) - spentBefore).toBe(served.length * price);
    // Every answered call reached an upstream (a failed-over one more than once).
    expect(atA.length + atB.length).toBeGreaterThanOrEqual(served.length);
  }, 90_000);
});
