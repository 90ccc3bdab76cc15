// Several gateway replicas sharing one real redis-server (README, Running several replicas): two
// `tollgate serve` processes (dist/cli.js) in front of one scripted upstream, with keys, daily
// balances and throughput limits shared through Redis. Covers exactness across replicas, a Redis
// crash under load (fail closed, nothing charged, recovery without a gateway restart), failOpen,
// `tollgate migrate` from SQLite, and a clear start-up failure without Redis. What runs on time
// (the shared credits-per-second limit, revocation reaching the other replica within
// auth.keyCacheTtlMs, a cached lookup going stale) is checked on in-process gateways whose clock
// the test moves: a spawned process's clock cannot be moved, and nothing here waits for real
// time to pass. The spawned replicas are awaited on what they do (readiness, answers, the ledger).
//
// Redis runs with an fsync-always append-only file here, so that what it acknowledged survives
// the SIGKILL of the outage test and the ledger can be compared with the responses received.

import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { openStore, type Store } from '../src/store/index.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { ensureBuilt } from './helpers/build.js';
import { killSpawned, spawnCli, spawnGateway, type GatewayProcess } from './helpers/spawn-gateway.js';
import { useRedis } from './helpers/redis.js';
import { refusedUrl, startScriptedUpstream, type RpcItem, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';

// The scripted upstreams in this file answer made-up blocks (only their hash is right), so block
// verification is off on its EVM networks: verification has its own suites (block-verification,
// right-answers), and this file tests something else.

const COST = 80;
const KEY_CACHE_TTL_MS = 500;
const ADMIN_TOKEN = 'replica-admin-token-0123456789';

const redis = useRedis({ persistent: true });
const workDir = mkdtempSync(join(tmpdir(), 'tollgate-replicas-'));
const keyPrefix = `replicas:${randomBytes(4).toString('hex')}:`;

const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);

// ---------------------------------------------------------------------------------------------
// Build and processes

function writeConfig(name: string, store: Record<string, unknown>, upstreamUrl: string): string {
  const path = join(workDir, `${name}.yaml`);
  // JSON is YAML.
  const config = {
    server: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN },
    auth: { keyCacheTtlMs: KEY_CACHE_TTL_MS },
    store,
    // Every call goes upstream: no request of a load test is a cache hit.
    cache: { maxBytes: 0 },
    networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, baseUrls: ['*/eth'], upstreams: [{ id: 'u1', url: upstreamUrl, connections: 128 }] }],
  };
  writeFileSync(path, JSON.stringify(config, null, 2));
  return path;
}

// ---------------------------------------------------------------------------------------------
// Requests

let hashCounter = 0;
const salt = randomBytes(4).toString('hex');
function uniqueHash(): string {
  hashCounter += 1;
  return `0x${salt}${hashCounter.toString(16).padStart(56, '0')}`;
}

/** The block an honest node returns: its hash is the one asked for. */
function blockFor(item: unknown): Record<string, unknown> {
  const params = (item as RpcItem).params as unknown[];
  return { hash: params[0], number: '0x1', transactions: [] };
}

interface Answer {
  /** The replica that answered. */
  via: string;
  status: number;
  body: { result?: unknown; error?: { code: number; message: string; data?: Record<string, unknown> } } | undefined;
  sentAt: number;
  doneAt: number;
}

interface Replica {
  name: string;
  process: GatewayProcess;
  pool: Pool;
}

async function blockCall(replica: Replica, secret: string): Promise<Answer> {
  const sentAt = performance.now();
  const { statusCode, body } = await replica.pool.request({
    path: `/eth/v3/${secret}`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: hashCounter, method: 'eth_getBlockByHash', params: [uniqueHash(), false] }),
  });
  const text = await body.text();
  return { via: replica.name, status: statusCode, body: text === '' ? undefined : (JSON.parse(text) as Answer['body']), sentAt, doneAt: performance.now() };
}

/** Runs `tasks` with at most `limit` in flight. */
async function withConcurrency<T>(count: number, limit: number, task: (index: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, count) }, async () => {
      while (next < count) {
        const index = next++;
        results[index] = await task(index);
      }
    }),
  );
  return results;
}

/** Closed-loop load: `perReplica` workers per replica send calls back to back until `stop()`. */
function startLoad(replicas: Replica[], secret: string, perReplica: number) {
  const answers: Answer[] = [];
  let running = true;
  const workers = replicas.flatMap((replica) =>
    Array.from({ length: perReplica }, async () => {
      while (running) {
        try {
          answers.push(await blockCall(replica, secret));
        } catch (error) {
          // A connection-level failure means a gateway went away: recorded (the test fails on it),
          // and this worker stops rather than calling a gone gateway in a tight loop.
          answers.push({ via: replica.name, status: -1, body: { error: { code: 0, message: String(error) } }, sentAt: performance.now(), doneAt: performance.now() });
          return;
        }
      }
    }),
  );
  return {
    answers,
    workers: replicas.length * perReplica,
    async stop(): Promise<void> {
      running = false;
      await Promise.all(workers);
    },
  };
}

const ok = (answer: Answer): boolean => answer.status === 200 && answer.body !== undefined && 'result' in answer.body;

async function getStatus(url: string): Promise<number> {
  const response = await fetch(url);
  await response.arrayBuffer();
  return response.status;
}

// ---------------------------------------------------------------------------------------------
// Fixtures

let upstream: ScriptedUpstream;
let store: Store;
let replicaA: Replica;
let replicaB: Replica;
let replicas: Replica[];
const gatewayConfig = () => ({ driver: 'redis', url: redis.url, keyPrefix });

beforeAll(async () => {
  await ensureBuilt();
  upstream = await startScriptedUpstream({ kind: 'result', result: blockFor, delayMs: 10 });
  store = await openStore({ driver: 'redis', url: redis.url, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false });
  const configFile = writeConfig('replica', gatewayConfig(), upstream.url);
  const [a, b] = await Promise.all([spawnGateway(configFile, { cwd: workDir }), spawnGateway(configFile, { cwd: workDir })]);
  replicaA = { name: 'A', process: a!, pool: new Pool(a!.rpcOrigin, { connections: 100 }) };
  replicaB = { name: 'B', process: b!, pool: new Pool(b!.rpcOrigin, { connections: 100 }) };
  replicas = [replicaA, replicaB];
}, 120_000);

afterAll(async () => {
  await Promise.all((replicas ?? []).map((replica) => replica.pool.close()));
  await killSpawned();
  await store?.close();
  await upstream?.close();
  rmSync(workDir, { recursive: true, force: true });
});

async function newTeamKey(dailyCredits: number, creditsPerSecond: number | null = null) {
  const team = await store.createTeam({ name: `team-${randomBytes(4).toString('hex')}`, dailyCredits, creditsPerSecond });
  const { key, secret } = await issueKey(store, { teamId: team.id });
  return { team, keyId: key.id, secret };
}

async function ledgerOf(teamId: string, fromDay: string, toDay = utcDay(Date.now())) {
  const rows = await store.usage({ teamId, fromDay, toDay });
  const [peek] = await store.applyLedger([{ type: 'peek', teamId, day: toDay }]);
  return {
    credits: rows.reduce((sum, row) => sum + row.credits, 0),
    requests: rows.reduce((sum, row) => sum + row.requests, 0),
    teamUsed: peek!.teamUsed,
  };
}

/**
 * Polls until both replicas answer a call with a result (Redis may still be reconnecting);
 * every answer received on the way is pushed to `received`. Returns how long it took.
 */
async function waitUntilServing(secret: string, received: Answer[]): Promise<number> {
  const started = performance.now();
  let last: Answer[] = [];
  try {
    await until(async () => {
      last = await Promise.all(replicas.map((replica) => blockCall(replica, secret)));
      received.push(...last);
      return last.every(ok);
    }, 'both replicas to serve again');
  } catch (error) {
    throw new Error(`${(error as Error).message}; last answers: ${JSON.stringify(last.map((a) => [a.via, a.status, a.body]))}`, { cause: error });
  }
  return performance.now() - started;
}

/** Both replicas' /readyz status is `status`. */
async function allReady(status: number): Promise<boolean> {
  const statuses = await Promise.all(replicas.map((replica) => getStatus(`${replica.process.adminOrigin}/readyz`)));
  return statuses.every((each) => each === status);
}

/**
 * Two gateways in this process sharing the Redis of the spawned replicas (same key prefix), each
 * with its own store connection and meter, both on the clock `now`.
 */
async function inProcessReplicas(now: () => number): Promise<{ replicas: [TestGateway, TestGateway]; close(): Promise<void> }> {
  const stores: Store[] = [];
  const gateways: TestGateway[] = [];
  try {
    for (let index = 0; index < 2; index += 1) {
      const replicaStore = await openStore({ driver: 'redis', url: redis.url, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false });
      stores.push(replicaStore);
      gateways.push(
        await startTestGateway({
          networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'u1', url: upstream.url }] }],
          config: { store: gatewayConfig(), auth: { keyCacheTtlMs: KEY_CACHE_TTL_MS }, cache: { maxBytes: 0 } },
          store: replicaStore,
          now,
        }),
      );
    }
  } catch (error) {
    for (const gateway of gateways) await gateway.close();
    for (const each of stores) await each.close();
    throw error;
  }
  return {
    replicas: [gateways[0]!, gateways[1]!],
    async close() {
      for (const gateway of gateways) await gateway.close();
      for (const each of stores) await each.close();
    },
  };
}

const blockCallBody = () => ({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [uniqueHash(), false] });

// ---------------------------------------------------------------------------------------------

describe('two gateway replicas sharing one Redis', () => {
  it('spend a team’s 80,000 credits exactly: 2,000 concurrent calls over both replicas, 1,000 answered, 1,000 get 402', async () => {
    const day = utcDay(Date.now());
    const { team, secret } = await newTeamKey(80_000);
    const answers = await withConcurrency(2_000, 200, (index) => blockCall(replicas[index % 2]!, secret));

    const statuses = new Map<number, number>();
    for (const answer of answers) statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
    expect(Object.fromEntries(statuses)).toEqual({ 200: 1_000, 402: 1_000 });
    expect(answers.filter(ok)).toHaveLength(1_000);
    for (const answer of answers.filter((a) => a.status === 402)) {
      expect(answer.body?.error).toMatchObject({ code: -32005, data: { reason: 'daily_credits_exhausted', limit: 80_000, cost: COST } });
    }
    // Both replicas spent from the one balance.
    const servedBy = [0, 1].map((replica) => answers.filter((answer, index) => index % 2 === replica && ok(answer)).length);
    expect(servedBy[0]).toBeGreaterThan(0);
    expect(servedBy[1]).toBeGreaterThan(0);

    const ledger = await ledgerOf(team.id, day);
    expect(ledger).toEqual({ credits: 80_000, requests: 1_000, teamUsed: 80_000 });
    console.info(`[replicas] 2,000 calls: 200 → ${servedBy[0]} via A + ${servedBy[1]} via B; ledger ${ledger.credits} credits, team used ${ledger.teamUsed}`);
  });

  it('survive Redis being killed under load: fail closed (503, -32603), charge nothing unanswered, recover on restart', async () => {
    const day = utcDay(Date.now());
    const { team, secret } = await newTeamKey(1_000_000_000);
    const load = startLoad(replicas, secret, 10);
    await until(() => replicas.every((replica) => load.answers.some((answer) => answer.via === replica.name && ok(answer))), 'both replicas to serve the load');

    await redis.kill();
    // Both replicas notice: readiness turns red. Calls sent from then on, answered before the
    // restart, are the outage's; wait for enough of them.
    await until(() => allReady(503), 'both replicas to report not ready');
    const noticedAt = performance.now();
    const outageAnswers = () => load.answers.filter((answer) => answer.sentAt > noticedAt);
    await until(() => outageAnswers().length > 20, 'more than 20 answers to calls sent during the outage');
    // Both processes are alive: liveness stays green, readiness stays red.
    for (const replica of replicas) {
      expect(replica.process.child.exitCode, replica.process.output()).toBeNull();
      expect(await getStatus(`${replica.process.adminOrigin}/healthz`)).toBe(200);
      expect(await getStatus(`${replica.process.adminOrigin}/readyz`)).toBe(503);
    }
    const restartAt = performance.now();
    await redis.restart();
    const probes: Answer[] = [];
    const recoveredInMs = await waitUntilServing(secret, probes);
    const recoveredAt = performance.now();
    await until(
      () => replicas.every((replica) => load.answers.some((answer) => answer.via === replica.name && answer.sentAt > recoveredAt && ok(answer))),
      'the load to be served again by both replicas',
    );
    await load.stop();
    for (const replica of replicas) expect(replica.process.child.exitCode, replica.process.output()).toBeNull();
    for (const replica of replicas) expect(await getStatus(`${replica.process.adminOrigin}/readyz`)).toBe(200);

    // While Redis was down (requests sent after both replicas reported not ready, answered
    // before the restart): every one got 503 with -32603 TG_ERR_STORE_UNAVAILABLE.
    const duringOutage = load.answers.filter((answer) => answer.sentAt > noticedAt && answer.doneAt < restartAt);
    expect(duringOutage.length).toBeGreaterThan(20);
    const outageStatuses = new Set(duringOutage.map((answer) => `${answer.status} ${answer.body?.error?.code}`));
    expect([...outageStatuses]).toEqual(['503 -32603']);
    expect(load.answers.filter((answer) => answer.status === -1)).toEqual([]);
    expect(load.answers.every((answer) => ok(answer) || (answer.status === 503 && answer.body?.error?.code === -32603))).toBe(true);

    // The ledger against what clients received. A 200 is sent only after its settle was
    // acknowledged, and Redis acknowledges only what it fsynced (appendfsync always), so every
    // received answer is in the ledger. The converse has one gap: a settle Redis applied and
    // persisted whose reply the kill cut off is charged, yet the client got 503. At most one
    // such settle per call in flight at the kill (the load's workers, one call each).
    const received = load.answers.filter(ok).length + probes.filter(ok).length;
    // This process's own store connection reconnects on its own schedule (ioredis retries every
    // 200-2,000 ms, and with no offline queue a command sent meanwhile fails at once): the replicas
    // serving again says nothing about it.
    await until(() => store.ping().then(() => true, () => false), "the test's own store connection to reach Redis again");
    const ledger = await ledgerOf(team.id, day);
    const slack = ledger.credits - received * COST;
    console.info(
      `[replicas] redis kill: ${load.answers.length} calls, ${received} answered with a result, ${duringOutage.length} × 503 during the outage; ` +
        `ledger ${ledger.credits} credits vs received ${received * COST} (+${slack}); recovered ${Math.round(recoveredInMs)} ms after restart`,
    );
    expect(slack).toBeGreaterThanOrEqual(0);
    expect(slack).toBeLessThanOrEqual(load.workers * COST);
    // Reservations whose settle or refund was cut off by the kill are given back by the replicas
    // themselves once Redis answers again (retried every 2 s), without waiting for the
    // stale-reservation sweep: team used comes back to settled usage exactly.
    expect(ledger.teamUsed).toBeGreaterThanOrEqual(ledger.credits);
    await until(async () => (await ledgerOf(team.id, day)).teamUsed === ledger.credits, 'the replicas to give back the reservations the kill cut off');
    expect((await ledgerOf(team.id, day)).teamUsed).toBe(ledger.credits);
  });

  it('with failOpen: true, serve a key already used while Redis is down, and charge nothing for it', async () => {
    const failOpenStore = await openStore({ driver: 'redis', url: redis.url, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 1_000, failOpen: true });
    // The gateway's clock (its key cache TTL among others), moved by the test.
    let clock = Date.now();
    const tg = await startTestGateway({
      now: () => clock,
      networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'u1', url: upstream.url }] }],
      config: {
        store: { ...gatewayConfig(), failOpen: true },
        auth: { keyCacheTtlMs: KEY_CACHE_TTL_MS },
        cache: { maxBytes: 0 },
      },
      store: failOpenStore,
      dailyCredits: 1_000_000,
    });
    try {
      const day = utcDay(clock);
      const call = () => rpc(tg.url('eth'), { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [uniqueHash(), false] });
      const first = await call();
      expect(first.status).toBe(200);
      expect(first.headers.get('x-credits-cost')).toBe('80');
      expect((await ledgerOf(tg.team.id, day, day)).credits).toBe(80);

      await redis.kill();
      try {
        clock += KEY_CACHE_TTL_MS + 1; // the key's cached lookup is stale: only the fallback remains
        const served = await call();
        expect(served.status).toBe(200);
        expect(served.body.result).toMatchObject({ number: '0x1' });
        expect(served.headers.get('x-credits-cost')).toBe('0');
        // A batch: its local answers' charges go to the store as one group, which fails as a
        // whole; each answer is still served, uncharged.
        const chainId = (id: number) => ({ jsonrpc: '2.0', id, method: 'eth_chainId', params: [] });
        const batch = await rpc(tg.url('eth'), [chainId(1), { jsonrpc: '2.0', id: 2, method: 'eth_getBlockByHash', params: [uniqueHash(), false] }, chainId(3)]);
        expect(batch.status).toBe(200);
        expect(batch.body.map((reply: { id: number; result?: unknown }) => [reply.id, reply.result !== undefined])).toEqual([[1, true], [2, true], [3, true]]);
        expect(batch.body[0].result).toBe('0x1');
        expect(batch.headers.get('x-credits-cost')).toBe('0');
        // A key this replica never saw cannot be checked: 503, fail-open or not.
        const unknown = await rpc(tg.url('eth', 'tg_unknownkeyunknownkeyunknownkey'), { jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] });
        expect(unknown.status).toBe(503);
        expect(unknown.body.error.code).toBe(-32603);
        expect(await getStatus(`${tg.gateway.adminOrigin}/readyz`)).toBe(503);
      } finally {
        await redis.restart();
      }
      // Both connections: the ledger below is read through the test's own store, which reconnects on its own schedule.
      await until(() => Promise.all([failOpenStore.ping(), store.ping()]).then(() => true, () => false), 'both stores to reach Redis again');
      expect(await ledgerOf(tg.team.id, day, day)).toEqual({ credits: 80, requests: 1, teamUsed: 80 });
    } finally {
      await tg.close();
      await failOpenStore.close();
    }
  });

  it('`tollgate migrate` copies a SQLite key and today’s usage into Redis: the key works on a Redis gateway, usage includes it', async () => {
    const sqlitePath = join(workDir, 'migrate-source.db');
    const migratedPrefix = `migrated:${randomBytes(4).toString('hex')}:`;
    const day = utcDay(Date.now());
    const source = await openStore({ driver: 'sqlite', path: sqlitePath });
    const team = await source.createTeam({ name: 'migrated-team', dailyCredits: 10_000 });
    const { key, secret } = await issueKey(source, { teamId: team.id, label: 'from sqlite' });
    const subject = { teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_getBlockByHash', cost: COST, day, teamDailyCredits: 10_000, keyDailyCap: null, teamCreditsPerSecond: null };
    await source.applyLedger([1, 2, 3].map(() => ({ type: 'charge' as const, subject, nowMs: Date.now() })));
    await source.close();

    const cli = spawnCli(['migrate', '--from', `sqlite:${sqlitePath}`, '--to', redis.url, '--key-prefix', migratedPrefix], { cwd: workDir });
    expect((await cli.exited).code, cli.output()).toBe(0);
    expect(JSON.parse(cli.stdout())).toMatchObject({ teams: 1, keys: 1, usageRows: 1, hourlyUsageRows: 1, toDay: day, credits: 240 });

    const target = await openStore({ driver: 'redis', url: redis.url, keyPrefix: migratedPrefix, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false });
    const tg = await startTestGateway({
      networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'u1', url: upstream.url }] }],
      config: { store: { driver: 'redis', url: redis.url, keyPrefix: migratedPrefix }, cache: { maxBytes: 0 } },
      store: target,
    });
    try {
      const answer = await rpc(tg.url('eth', secret), { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [uniqueHash(), false] });
      expect(answer.status).toBe(200);
      expect(answer.body.result).toMatchObject({ number: '0x1' });
      // The day total came along: the balance after this call counts the migrated 240 credits.
      expect(answer.headers.get('x-credits-remaining')).toBe(String(10_000 - 240 - COST));

      const report = await fetch(`${tg.gateway.adminOrigin}/v1/usage?key=${key.id}`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
      expect(report.status).toBe(200);
      expect(((await report.json()) as { totals: unknown }).totals).toEqual({ credits: 240 + COST, requests: 4 });
    } finally {
      await tg.close();
      await target.close();
    }
  });

  it('refuse to start with a clear message when Redis cannot be reached', async () => {
    const nowhere = (await refusedUrl()).replace('http://', 'redis://');
    const configFile = writeConfig('unreachable', { driver: 'redis', url: nowhere, keyPrefix }, upstream.url);
    const cli = spawnCli(['serve', '--config', configFile], { cwd: workDir });
    const { code } = await cli.exited;
    expect(code).not.toBe(0);
    expect(code).not.toBeNull();
    expect(cli.output()).toContain('cannot reach Redis');
    expect(cli.output()).toContain(nowhere.replace('redis://', ''));
  });
});

describe('two in-process replicas sharing one Redis, on one clock the test moves', () => {
  it('share one credits-per-second limit: one second’s burst at once, then rate × the time that passes, whichever replica asks', async () => {
    let clock = Date.now();
    const { replicas: pair, close } = await inProcessReplicas(() => clock);
    try {
      const day = utcDay(clock);
      const rate = 4_000; // 50 calls of 80 per second
      const { team, secret } = await newTeamKey(1_000_000_000, rate);
      /** `count` concurrent calls, alternating between the replicas, all at the clock's current time. */
      const burst = async (count: number) => {
        const answers = await withConcurrency(count, 40, async (index) => ({ via: index % 2, ...(await rpc(pair[index % 2]!.url('eth', secret), blockCallBody())) }));
        const served = answers.filter((answer) => answer.status === 200);
        const limited = answers.filter((answer) => answer.status === 429);
        expect(served.length + limited.length, JSON.stringify(answers.find((answer) => answer.status !== 200 && answer.status !== 429)?.body)).toBe(count);
        for (const answer of limited) expect(answer.body.error).toMatchObject({ code: -32005, data: { reason: 'rate_limited' } });
        return { served: served.length, servedVia: [0, 1].map((replica) => served.filter((answer) => answer.via === replica).length) };
      };

      // The bucket starts full: one second's credits, drawn from by both replicas together.
      const first = await burst(80);
      expect(first.served).toBe(rate / COST);
      expect(first.servedVia[0]).toBeGreaterThan(0);
      expect(first.servedVia[1]).toBeGreaterThan(0);
      // No time has passed: nothing more, from either replica.
      expect((await burst(20)).served).toBe(0);
      // Half a second refills half a second's credits.
      clock += 500;
      expect((await burst(40)).served).toBe(rate / 2 / COST);
      // A full second (or more) refills to one second's burst, not beyond.
      clock += 3_000;
      expect((await burst(80)).served).toBe(rate / COST);

      // The ledger agrees with the answers: 1 + ½ + 1 seconds' worth of credits.
      expect((await ledgerOf(team.id, day, utcDay(clock))).credits).toBe(2.5 * rate);
    } finally {
      await close();
    }
  });

  it('stop accepting a key revoked through the other replica’s admin API within auth.keyCacheTtlMs', async () => {
    let clock = Date.now();
    const { replicas: [a, b], close } = await inProcessReplicas(() => clock);
    try {
      const { keyId, secret } = await newTeamKey(1_000_000);
      const status = async (replica: TestGateway) => (await rpc(replica.url('eth', secret), blockCallBody())).status;
      // Both replicas have the key in their lookup cache.
      expect(await status(a)).toBe(200);
      expect(await status(b)).toBe(200);

      const response = await fetch(`${a.gateway.adminOrigin}/v1/keys/${keyId}/revoke`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` },
      });
      expect(response.status).toBe(200);
      expect(((await response.json()) as { key: { revokedAt: unknown } }).key.revokedAt).not.toBeNull();

      // The replica that revoked forgets the key at once.
      const onA = await rpc(a.url('eth', secret), blockCallBody());
      expect(onA.status).toBe(401);
      expect(onA.body.error.code).toBe(-32016);

      // The other one answers from its cached lookup until the TTL has passed, then reads Redis.
      clock += KEY_CACHE_TTL_MS - 1;
      expect(await status(b), 'the cached lookup still says the key is valid').toBe(200);
      clock += 2;
      const onB = await rpc(b.url('eth', secret), blockCallBody());
      expect(onB.status).toBe(401);
      expect(onB.body.error).toMatchObject({ code: -32016, message: 'invalid API key' });
    } finally {
      await close();
    }
  });
});
