// Gateway replicas on Redis Cluster: two (and later two more) `tollgate serve` processes
// (dist/cli.js) sharing a real local cluster of six redis-servers (three masters, three
// replicas, no persistence), in front of one scripted upstream. Shows that teams spread over
// every master and spend exactly, that every key of a team sits in one slot, what a master
// killed under load costs (recovery time, credits the failover lost), what `store.waitReplicas`
// does to a commit, and that a single-Redis store migrated to the cluster serves unchanged.

import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster } from 'ioredis';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { generateSecret, hashSecret } from '../src/auth/api-key.js';
import { openStore, type Store, type Team } from '../src/store/index.js';
import { clusterTeamPrefix } from '../src/store/redis-keyspace.js';
import { ensureBuilt } from './helpers/build.js';
import { redisSnapshot } from '../bench/redis-cost.js';
import { useRedis, useRedisCluster } from './helpers/redis.js';
import { startScriptedUpstream, type RpcItem, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { killSpawned, spawnCli, spawnGateway, type GatewayProcess } from './helpers/spawn-gateway.js';
import { until } from './helpers/until.js';

const COST = 80;
const ADMIN_TOKEN = 'cluster-admin-token-0123456789';
const KEY_CACHE_TTL_MS = 500;

const cluster = useRedisCluster();
const singleRedis = useRedis();
const workDir = mkdtempSync(join(tmpdir(), 'tollgate-cluster-'));
const keyPrefix = `cl${randomBytes(3).toString('hex')}:`;
const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);
const teamPrefix = (teamId: string) => clusterTeamPrefix(keyPrefix, teamId);

// ---------------------------------------------------------------------------------------------
// Processes and requests

let upstream: ScriptedUpstream;
let store: Store;
const clusterStore = (extra: Record<string, unknown> = {}) => ({ driver: 'redis', cluster: cluster.get().seeds, keyPrefix, ...extra });

function writeConfig(name: string, storeConfig: Record<string, unknown>, cached: boolean | Record<string, unknown>): string {
  const path = join(workDir, `${name}.yaml`);
  const config = {
    server: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN },
    auth: { keyCacheTtlMs: KEY_CACHE_TTL_MS },
    store: storeConfig,
    // Without the cache every call goes upstream: a reserve and a settle each.
    ...(cached === true ? {} : cached === false ? { cache: { maxBytes: 0 } } : { cache: cached }),
    networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, baseUrls: ['*/eth'], upstreams: [{ id: 'u1', url: upstream.url, connections: 128 }] }],
  };
  writeFileSync(path, JSON.stringify(config, null, 2));
  return path;
}

interface Replica {
  process: GatewayProcess;
  pool: Pool;
}

/** `cached`: the default in-process cache (true), none (false), or this `cache` section. */
async function startReplicas(name: string, storeConfig: Record<string, unknown>, options: { cached: boolean | Record<string, unknown> }): Promise<Replica[]> {
  const configFile = writeConfig(name, storeConfig, options.cached);
  // Per-request log lines are not kept: only the start-up line is read.
  const keep = (line: Record<string, unknown>) => line.msg === 'gateway listening' || ['warn', 'error', 'fatal'].includes(String(line.level)) || (typeof line.status === 'number' && line.status >= 500);
  const started = await Promise.all([spawnGateway(configFile, { cwd: workDir, keep }), spawnGateway(configFile, { cwd: workDir, keep })]);
  return started.map((process) => ({ process, pool: new Pool(process.rpcOrigin, { connections: 64 }) }));
}

async function stopReplicas(replicas: readonly Replica[]): Promise<void> {
  await Promise.all(replicas.map((replica) => replica.pool.close()));
  await Promise.all(replicas.map((replica) => replica.process.stop('SIGINT')));
}

let hashCounter = 0;
const salt = randomBytes(4).toString('hex');
const uniqueHash = () => `0x${salt}${(hashCounter++).toString(16).padStart(56, '0')}`;
const blockFor = (item: unknown) => ({ hash: ((item as RpcItem).params as unknown[])[0], number: '0x1', transactions: [] });

interface Answer {
  status: number;
  /** The JSON-RPC items answered with a result, and with a 402-style credits error. */
  results: number;
  refused: number;
  /** X-Credits-Remaining of a single call, as a number. */
  remaining: number | undefined;
  errorCode?: number;
  firstError?: unknown;
  sentAt: number;
  doneAt: number;
}

/** One request of `items` eth_getBlockByHash calls (a batch when more than one), each of a new block unless `hash` is given. */
async function call(replica: Replica, secret: string, items = 1, hash?: string): Promise<Answer> {
  const sentAt = performance.now();
  const calls = Array.from({ length: items }, (_, index) => ({ jsonrpc: '2.0', id: index, method: 'eth_getBlockByHash', params: [hash ?? uniqueHash(), false] }));
  try {
    const { statusCode, headers, body } = await replica.pool.request({
      path: `/eth/v3/${secret}`,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(items === 1 ? calls[0] : calls),
    });
    const parsed = (await body.json()) as unknown;
    const list = (Array.isArray(parsed) ? parsed : [parsed]) as Array<{ result?: unknown; error?: { code: number; data?: { reason?: string } } }>;
    const remaining = headers['x-credits-remaining'];
    return {
      status: statusCode,
      results: list.filter((item) => item.result !== undefined).length,
      refused: list.filter((item) => item.error?.data?.reason === 'daily_credits_exhausted').length,
      remaining: typeof remaining === 'string' ? Number(remaining) : undefined,
      errorCode: list.find((item) => item.error !== undefined && item.error.data?.reason !== 'daily_credits_exhausted')?.error?.code,
      firstError: list.find((item) => item.error !== undefined && item.error.data?.reason !== 'daily_credits_exhausted')?.error,
      sentAt,
      doneAt: performance.now(),
    };
  } catch {
    return { status: -1, results: 0, refused: 0, remaining: undefined, sentAt, doneAt: performance.now() };
  }
}

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

async function newTeam(dailyCredits: number): Promise<{ team: Team; secret: string; keyId: string }> {
  const team = await store.createTeam({ name: `team-${randomBytes(4).toString('hex')}`, dailyCredits });
  const { key, secret } = await issueKey(store, { teamId: team.id });
  return { team, secret, keyId: key.id };
}

async function ledgerOf(teamId: string) {
  const day = utcDay(Date.now());
  const rows = await store.usage({ teamId, fromDay: day, toDay: day });
  const [peek] = await store.applyLedger([{ type: 'peek', teamId, day }]);
  return { credits: rows.reduce((sum, row) => sum + row.credits, 0), requests: rows.reduce((sum, row) => sum + row.requests, 0), teamUsed: peek!.teamUsed };
}

async function readyStatus(replica: Replica): Promise<number> {
  const response = await fetch(`${replica.process.adminOrigin}/readyz`);
  await response.arrayBuffer();
  return response.status;
}

/** Closed-loop load: `perTeam` workers per team and replica send single calls back to back until stopped. */
function startLoad(replicas: readonly Replica[], teams: ReadonlyArray<{ team: Team; secret: string }>, perTeam: number) {
  const answers = new Map<string, Answer[]>(teams.map(({ team }) => [team.id, []]));
  let running = true;
  const workers = teams.flatMap(({ team, secret }) =>
    replicas.flatMap((replica) =>
      Array.from({ length: perTeam }, async () => {
        while (running) answers.get(team.id)!.push(await call(replica, secret));
      }),
    ),
  );
  return {
    answers,
    workers: workers.length,
    async stop() {
      running = false;
      await Promise.all(workers);
    },
  };
}

// ---------------------------------------------------------------------------------------------

beforeAll(async () => {
  await ensureBuilt();
  upstream = await startScriptedUpstream({ kind: 'result', result: blockFor, delayMs: 2 });
  store = await openStore({ driver: 'redis', cluster: cluster.get().seeds, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false });
}, 120_000);

afterAll(async () => {
  await killSpawned();
  await store?.close();
  await upstream?.close();
  rmSync(workDir, { recursive: true, force: true });
});

describe('gateways on Redis Cluster', () => {
  it('30 teams over all three masters: 80,000 credits buy exactly 1,000 answers per team through two gateways; every key of a team sits in one slot', async () => {
    const replicas = await startReplicas('exact', clusterStore(), { cached: true });
    try {
      const teams = await Promise.all(Array.from({ length: 30 }, () => newTeam(80_000)));
      const started = performance.now();
      // 1,100 calls per team in batches of 20, all teams at once over both gateways: the gateways'
      // ledger batches mix teams of every master. The calls are cache hits (one block, cached by
      // the first call): each is one charge, so the machine's CPU goes to the ledger.
      const block = uniqueHash();
      const requests = teams.flatMap((team) => Array.from({ length: 55 }, () => team));
      const answers = await withConcurrency(requests.length, 64, async (index) => ({ teamId: requests[index]!.team.id, answer: await call(replicas[index % 2]!, requests[index]!.secret, 20, block) }));
      for (const { team } of teams) {
        const mine = answers.filter((entry) => entry.teamId === team.id).map((entry) => entry.answer);
        const odd = mine.find((answer) => answer.status !== 200 || answer.results + answer.refused !== 20);
        expect(odd, JSON.stringify(odd)).toBeUndefined();
        expect(mine.reduce((sum, answer) => sum + answer.results, 0)).toBe(1_000);
        expect(mine.reduce((sum, answer) => sum + answer.refused, 0)).toBe(100);
        expect(await ledgerOf(team.id)).toEqual({ credits: 80_000, requests: 1_000, teamUsed: 80_000 });
      }

      // Where the keys are, as the cluster itself says (SCAN on every master, CLUSTER KEYSLOT).
      const client = new Cluster(cluster.get().seeds.slice(0, 1).map((url) => ({ host: '127.0.0.1', port: Number(new URL(url).port) })), { lazyConnect: true });
      try {
        await client.connect();
        // Each gateway writes its requests to the teams' explorers within explorer.flushIntervalMs.
        await until(async () => (await Promise.all(teams.map(({ team }) => client.exists(`${teamPrefix(team.id)}requests`)))).every((found) => found === 1), "every team's recent requests");
        const mastersOfTeams = new Set<string>();
        for (const { team, keyId } of teams) {
          const keysOfTeam: string[] = [];
          for (const node of client.nodes('master')) {
            let cursor = '0';
            do {
              const [next, found] = await node.scan(cursor, 'MATCH', `${teamPrefix(team.id)}*`, 'COUNT', 1000);
              keysOfTeam.push(...found);
              if (found.length > 0) mastersOfTeams.add(`${node.options.port}`);
              cursor = next;
            } while (cursor !== '0');
          }
          const day = utcDay(Date.now());
          // Its day total, its key's day total, its usage hashes (daily and hourly) and its recent
          // requests (the request explorer) carry its tag (its reservations index is gone once every
          // reservation settled: Redis drops an empty zset).
          expect(keysOfTeam.sort()).toEqual([`d:${day}`, `k:${keyId}:${day}`, `uc:${day}`, `ur:${day}`, `uh:${day}`, 'requests'].map((name) => `${teamPrefix(team.id)}${name}`).sort());
          const slots = new Set(await Promise.all(keysOfTeam.map((key) => client.cluster('KEYSLOT', key))));
          expect(slots.size).toBe(1);
        }
        expect(client.nodes('master')).toHaveLength(3);
        expect(mastersOfTeams.size).toBe(3);
      } finally {
        client.disconnect();
      }
      console.info(`[cluster] (in ${Math.round(performance.now() - started)} ms) 30 teams × 1,100 calls in batches of 20 over two gateways: 1,000 answered and 100 refused per team; team keys on every one of the 3 masters`);
    } finally {
      await stopReplicas(replicas);
    }
  }, 120_000);

  it('the shared response cache on the cluster: what one gateway fetched, the other answers without the upstream; entries on every master', async () => {
    const seeds = cluster.get().seeds;
    // No in-process tier: every hit below comes from the cluster.
    const replicas = await startReplicas('shared-cache', clusterStore(), { cached: { maxBytes: 0, shared: { cluster: seeds, ttlSeconds: 600 } } });
    const client = new Cluster([{ host: '127.0.0.1', port: Number(new URL(seeds[0]!).port) }], { lazyConnect: true });
    const cacheKeysPerMaster = async (): Promise<number[]> =>
      Promise.all(client.nodes('master').map(async (node) => (await node.keys('tollgate:cache:*')).length));
    try {
      await client.connect();
      const { secret } = await newTeam(1_000_000);
      const fetchedByHash = () => upstream.calls.filter((received) => received.methods.includes('eth_getBlockByHash')).length;
      const hashes = Array.from({ length: 60 }, () => uniqueHash());
      const before = fetchedByHash();
      for (const hash of hashes) expect((await call(replicas[0]!, secret, 1, hash)).results).toBe(1);
      expect(fetchedByHash() - before).toBe(60);
      // Entries are written in the background: wait until the cluster holds all of them.
      await until(async () => (await cacheKeysPerMaster()).reduce((sum, count) => sum + count, 0) >= 60, 'the 60 blocks to be in the shared cache');
      for (const hash of hashes) expect((await call(replicas[1]!, secret, 1, hash)).results).toBe(1);
      expect(fetchedByHash() - before).toBe(60);
      const perMaster = await cacheKeysPerMaster();
      expect(perMaster).toHaveLength(3);
      expect(perMaster.every((count) => count > 0), `cache entries per master: ${perMaster.join(', ')}`).toBe(true);
    } finally {
      client.disconnect();
      await stopReplicas(replicas);
    }
  }, 120_000);

  /**
   * Load on six teams over two gateways (single calls, a reserve and a settle each), then the
   * master of one team is SIGKILLed. Returns what happened, per team and overall.
   */
  async function killMasterUnderLoad(label: string, replicas: readonly Replica[], options: { restartVictimOnPromotion?: boolean } = {}) {
    const nodes = cluster.get();
    // Six teams, two on each master at least: new teams until every master has two.
    const teams: Array<{ team: Team; secret: string; master: number }> = [];
    while (new Set(teams.map((entry) => entry.master)).size < 3 || [...new Set(teams.map((entry) => entry.master))].some((port) => teams.filter((entry) => entry.master === port).length < 2)) {
      const created = await newTeam(1_000_000_000);
      teams.push({ ...created, master: await nodes.masterOf(teamPrefix(created.team.id)) });
    }
    const victim = teams[0]!.master;
    const load = startLoad(replicas, teams, 3);
    try {
      return await killAndRecover(label, replicas, options, teams, victim, load);
    } finally {
      // Stopped on every path: a wait that failed must not leave the workers calling gateways
      // whose pools the caller is about to close.
      await load.stop();
    }
  }

  /** The part of {@link killMasterUnderLoad} that runs while `load` does: the kill, the recovery and the accounting. */
  async function killAndRecover(
    label: string,
    replicas: readonly Replica[],
    options: { restartVictimOnPromotion?: boolean },
    teams: Array<{ team: Team; secret: string; master: number }>,
    victim: number,
    load: ReturnType<typeof startLoad>,
  ) {
    const nodes = cluster.get();
    await until(() => teams.every(({ team }) => load.answers.get(team.id)!.filter((answer) => answer.status === 200).length >= 50), 'every team served 50 calls before the kill', 30_000);

    await nodes.nodes.find((node) => node.port === victim)!.kill();
    const killedAt = performance.now();
    // Readiness turns red while the ledger cannot commit on the lost master's slots…
    await until(async () => (await Promise.all(replicas.map(readyStatus))).every((status) => status === 503), 'both gateways to report not ready', 20_000);
    if (options.restartVictimOnPromotion === true) {
      // With waitReplicas the promoted master commits nothing until it has a replica again: the
      // killed node comes back (as an operator's supervisor would restart it) and rejoins as its replica.
      // Only once its replica serves its slots: a node without persistence that came back before
      // the failover would resume them empty, and its replica would copy the empty data set.
      const victimTeam = teamPrefix(teams[0]!.team.id);
      await until(async () => (await nodes.masterOf(victimTeam).catch(() => victim)) !== victim && (await nodes.healthy()), 'the cluster to promote the replica', 30_000);
      await nodes.nodes.find((node) => node.port === victim)!.restart();
    }
    // …and green again, with every team served through both gateways, once its replica is promoted.
    const onVictim = teams.filter((entry) => entry.master === victim);
    await until(
      async () => {
        if ((await Promise.all(replicas.map(readyStatus))).some((status) => status !== 200)) return false;
        const probes = await Promise.all(replicas.flatMap((replica) => onVictim.map(({ secret }) => call(replica, secret))));
        return probes.every((answer) => answer.status === 200);
      },
      'both gateways serving the killed master’s teams again',
      60_000,
    );
    const recoveredInMs = performance.now() - killedAt;
    // A moment of load on the recovered cluster, then stop.
    const recoveredAt = performance.now();
    await until(() => onVictim.every(({ team }) => load.answers.get(team.id)!.filter((answer) => answer.sentAt > recoveredAt && answer.status === 200).length >= 20), 'load served after recovery', 30_000);
    await load.stop();

    const perTeam = [];
    for (const { team, master } of teams) {
      const answers = load.answers.get(team.id)!;
      const received = answers.filter((answer) => answer.status === 200 && answer.results === 1).length;
      const failed = answers.filter((answer) => answer.status !== 200);
      // Reservations the kill cut off are given back by the gateways (a refund retried every 2 s) or
      // went with the lost master: wait until none is held. This process's own cluster connection
      // finds the promoted master on its own schedule (the gateways serving again says nothing
      // about it), and with no offline queue a read sent before then fails at once: not yet.
      await until(async () => {
        const ledger = await ledgerOf(team.id).catch(() => undefined);
        return ledger !== undefined && ledger.teamUsed === ledger.credits;
      }, `no credits held for ${team.id}`, 20_000);
      const ledger = await ledgerOf(team.id);
      perTeam.push({ team, master, received, failed, ledger, lostCredits: received * COST - ledger.credits, calls: answers.length });
    }
    const answeredDuring = (from: number, to: number) => [...load.answers.values()].flat().filter((answer) => answer.doneAt >= from && answer.doneAt <= to && answer.status === 200).length;
    const callsPerSecondBefore = answeredDuring(killedAt - 1_000, killedAt);
    console.info(
      `[cluster] ${label}: master :${victim} SIGKILLed under load (${load.workers} workers, ~${callsPerSecondBefore} calls/s answered in the second before); ` +
        `gateways ready and serving its teams again after ${(recoveredInMs / 1000).toFixed(1)} s (node timeout ${nodes.nodeTimeoutMs} ms); ` +
        perTeam.map((entry) => `${entry.master === victim ? 'lost master' : 'other'} team: ${entry.received} answered, ${entry.failed.length} failed, ledger ${entry.ledger.credits} credits, lost ${entry.lostCredits}`).join('; '),
    );
    return { teams: perTeam, victim, recoveredInMs, workers: load.workers };
  }

  /**
   * After recovery the team of the promoted master spends exactly again: its quota set to what it
   * spent plus 100 calls, 200 concurrent calls over both gateways (a new key, so both read the new
   * quota) get exactly 100 answers and 100 refusals, whatever the gateways remembered of its
   * balance from before the failover.
   */
  async function exactAfterRecovery(replicas: readonly Replica[], team: Team) {
    const before = (await ledgerOf(team.id)).teamUsed;
    await store.updateTeam(team.id, { dailyCredits: before + 100 * COST });
    const { secret } = await issueKey(store, { teamId: team.id });
    const answers = await withConcurrency(200, 40, (index) => call(replicas[index % 2]!, secret));
    expect(answers.filter((answer) => answer.status === 200 && answer.results === 1)).toHaveLength(100);
    expect(answers.filter((answer) => answer.status === 402 && answer.refused === 1)).toHaveLength(100);
    expect(await ledgerOf(team.id)).toMatchObject({ teamUsed: before + 100 * COST, credits: before + 100 * COST });
  }

  /** Restarts killed nodes (they rejoin as replicas) and waits until every master has a connected replica again. */
  async function healCluster() {
    const nodes = cluster.get();
    for (const node of nodes.nodes) if (!node.running()) await node.restart();
    await until(
      async () => (await nodes.healthy()) && [...(await nodes.replicasPerMaster()).values()].every((count) => count >= 1) && (await nodes.replicasSynced()),
      'every master to have a connected replica in sync again',
      60_000,
    );
  }

  it('a master SIGKILLed under load: readiness 503 until its replica is promoted, other masters’ teams served and exact throughout, exact balances after recovery; the credits lost are measured', async () => {
    const replicas = await startReplicas('failover', clusterStore(), { cached: false });
    try {
      const outcome = await killMasterUnderLoad('waitReplicas 0', replicas);
      for (const entry of outcome.teams.filter((each) => each.master !== outcome.victim)) {
        // Another master's team: served through the failover (a call whose reserve met the window
        // in which the cluster client reconnects to a node gets 503, charged nothing; a settle that
        // met it is sent again), and its ledger is exactly what was answered.
        expect(entry.failed.every((answer) => answer.status === 503 && answer.errorCode === -32603)).toBe(true);
        expect(entry.received).toBeGreaterThan(entry.failed.length * 5);
        expect(entry.ledger).toEqual({ credits: entry.received * COST, requests: entry.received, teamUsed: entry.received * COST });
      }
      for (const entry of outcome.teams.filter((each) => each.master === outcome.victim)) {
        // The lost master's team: calls during the failover failed with 503 (-32603), nothing else.
        expect(entry.failed.length).toBeGreaterThan(0);
        expect(entry.failed.every((answer) => answer.status === 503 && answer.errorCode === -32603), JSON.stringify(entry.failed.find((answer) => answer.status !== 503))).toBe(true);
        // Replication is asynchronous: what the master acknowledged in its last moments may be
        // missing on the promoted replica (lost > 0), and a commit whose reply the kill cut off
        // is charged without an answer (lost < 0), at most one per worker.
        expect(entry.lostCredits).toBeGreaterThanOrEqual(-outcome.workers * COST);
      }
      await exactAfterRecovery(replicas, outcome.teams.find((entry) => entry.master === outcome.victim)!.team);
    } finally {
      await stopReplicas(replicas);
      await healCluster();
    }
  }, 180_000);

  it('with store.waitReplicas: 1 a master SIGKILLed under load loses no answered call: every answered charge was on its replica before the answer', async () => {
    const replicas = await startReplicas('failover-wait', clusterStore({ waitReplicas: 1 }), { cached: false });
    try {
      const outcome = await killMasterUnderLoad('waitReplicas 1', replicas, { restartVictimOnPromotion: true });
      for (const entry of outcome.teams) {
        expect(entry.failed.every((answer) => answer.status === 503 && answer.errorCode === -32603), JSON.stringify(entry.failed.find((answer) => answer.status !== 503))).toBe(true);
        // Nothing answered is missing from the promoted replica (lost ≤ 0); a commit whose
        // acknowledgement the kill cut off is charged without an answer, at most one per worker.
        expect(entry.lostCredits).toBeLessThanOrEqual(0);
        expect(entry.lostCredits).toBeGreaterThanOrEqual(-outcome.workers * COST);
      }
      await exactAfterRecovery(replicas, outcome.teams.find((entry) => entry.master === outcome.victim)!.team);
    } finally {
      await stopReplicas(replicas);
      await healCluster();
    }
  }, 180_000);

  it('`tollgate migrate` from one Redis to the cluster: every team, key, secret, team token, alert setting, the filter ids’ key and every usage row (daily and hourly, 3 days) served unchanged', async () => {
    const day = (ago: number) => utcDay(Date.now() - ago * 86_400_000);
    const sourcePrefix = `single${randomBytes(3).toString('hex')}:`;
    const targetPrefix = `migrated${randomBytes(3).toString('hex')}:`;
    const singleConfig = { driver: 'redis' as const, url: singleRedis.url, keyPrefix: sourcePrefix, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false };
    const source = await openStore(singleConfig);
    const secrets: string[] = [];
    const tokenHashes: string[] = [];
    try {
      for (let index = 0; index < 6; index += 1) {
        const team = await source.createTeam({ name: `migrated-${index}-${randomBytes(3).toString('hex')}`, dailyCredits: 1_000_000, creditsPerSecond: index % 2 === 0 ? null : 5_000 });
        const { key, secret } = await issueKey(source, { teamId: team.id, label: `key ${index}`, dailyCap: index % 3 === 0 ? 500_000 : null, allowedNetworks: index === 1 ? ['eth'] : null });
        secrets.push(secret);
        // A rotated key: the old secret still valid for an hour, the new one too.
        const rotated = await issueKey(source, { teamId: team.id });
        const newSecret = generateSecret();
        await source.rotateKey(rotated.key.id, hashSecret(newSecret), Date.now() + 3_600_000);
        secrets.push(rotated.secret, newSecret);
        const tokenHash = randomBytes(32).toString('hex');
        tokenHashes.push(tokenHash);
        await source.createTeamToken({ teamId: team.id, tokenHash, label: `token ${index}` });
        if (index === 2) await source.setAlertSettings(team.id, { thresholds: [60, 95], webhookUrl: 'https://hooks.example.com/t', signingSecret: 'whsec_migrated' });
        const subject = { teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_getBlockByHash', cost: COST, teamDailyCredits: 1_000_000, keyDailyCap: null, teamCreditsPerSecond: null };
        await source.applyLedger([0, 1, 2].flatMap((ago) => Array.from({ length: ago + 1 + index }, () => ({ type: 'charge' as const, subject: { ...subject, day: day(ago) }, nowMs: Date.now() }))));
      }
      const filterKey = await source.sharedSecret('filter-ids', randomBytes(32).toString('hex'));

      const cli = spawnCli(['migrate', '--from', singleRedis.url, '--from-key-prefix', sourcePrefix, '--to', `cluster:${cluster.get().seeds.slice(0, 2).join(',')}`, '--key-prefix', targetPrefix, '--days', '3'], { cwd: workDir });
      expect((await cli.exited).code, cli.output()).toBe(0);
      expect(JSON.parse(cli.stdout())).toMatchObject({ teams: 6, keys: 12, teamTokens: 6, alertSettings: 1, sharedSecrets: 1, fromDay: day(2), toDay: day(0) });

      const target = await openStore({ ...singleConfig, url: undefined, cluster: cluster.get().seeds, keyPrefix: targetPrefix });
      try {
        const teams = await source.listTeams();
        expect((await target.listTeams()).sort((a, b) => a.id.localeCompare(b.id))).toEqual([...teams].sort((a, b) => a.id.localeCompare(b.id)));
        expect((await target.listKeys()).sort((a, b) => a.id.localeCompare(b.id))).toEqual((await source.listKeys()).sort((a, b) => a.id.localeCompare(b.id)));
        for (const secret of secrets) expect(await target.findKeyBySecretHash(hashSecret(secret))).toEqual(await source.findKeyBySecretHash(hashSecret(secret)));
        for (const tokenHash of tokenHashes) expect(await target.findTeamTokenByHash(tokenHash)).toEqual(await source.findTeamTokenByHash(tokenHash));
        expect((await target.listTeamTokens()).length).toBe(6);
        expect(await target.sharedSecret('filter-ids', 'a new one')).toBe(filterKey);
        for (const team of teams) {
          expect(await target.alertSettings(team.id)).toEqual(await source.alertSettings(team.id));
          for (const ago of [0, 1, 2]) {
            expect(await target.hourlyUsage({ teamId: team.id, day: day(ago) })).toEqual(await source.hourlyUsage({ teamId: team.id, day: day(ago) }));
            const [sourceUsed, targetUsed] = await Promise.all([source, target].map((each) => each.applyLedger([{ type: 'peek', teamId: team.id, day: day(ago) }])));
            expect(targetUsed).toEqual(sourceUsed);
          }
        }
        const rows = await source.usage({ fromDay: day(2), toDay: day(0) });
        expect(rows.length).toBe(18);
        expect(await target.usage({ fromDay: day(2), toDay: day(0) })).toEqual(rows);

        // A gateway on the cluster serves every migrated secret.
        const replicas = await startReplicas('migrated', { driver: 'redis', cluster: cluster.get().seeds, keyPrefix: targetPrefix }, { cached: false });
        try {
          for (const secret of secrets) expect((await call(replicas[0]!, secret)).status).toBe(200);
        } finally {
          await stopReplicas(replicas);
        }
      } finally {
        await target.close();
      }
    } finally {
      await source.close();
    }
  }, 120_000);

  it('with store.waitReplicas: N every ledger commit waits for N replicas (WAIT on the same master); more than there are fails the commit, which then answers 503', async () => {
    const commandCalls = async (command: string) => {
      let total = 0;
      for (const master of await cluster.get().masters()) total += (await redisSnapshot(`redis://127.0.0.1:${master.port}`)).calls.get(command) ?? 0;
      return total;
    };
    const waiting = await openStore({ driver: 'redis', cluster: cluster.get().seeds, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 5_000, failOpen: false, waitReplicas: 1 });
    const tooMany = await openStore({ driver: 'redis', cluster: cluster.get().seeds, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false, waitReplicas: 2 });
    try {
      const { team, keyId } = await newTeam(1_000_000);
      const subject = { teamId: team.id, keyId, network: 'eth', method: 'eth_getBlockByHash', cost: COST, day: utcDay(Date.now()), teamDailyCredits: 1_000_000, keyDailyCap: null, teamCreditsPerSecond: null };
      const waitsBefore = await commandCalls('wait');
      expect(await waiting.applyLedger([{ type: 'charge', subject, nowMs: Date.now() }])).toEqual([{ ok: true, teamUsed: COST }]);
      expect(await commandCalls('wait')).toBe(waitsBefore + 1);
      // Every master has one replica: a commit asking for two is applied on the master but not
      // acknowledged as asked, so the batch fails (the gateway answers 503 and gives the
      // reservation back, as for a lost reply).
      await expect(tooMany.applyLedger([{ type: 'charge', subject, nowMs: Date.now() }])).rejects.toThrow(/reached 1 of 2 replicas/);
      expect(await waiting.applyLedger([{ type: 'peek', teamId: team.id, day: subject.day }])).toEqual([{ ok: true, teamUsed: 2 * COST }]);
    } finally {
      await waiting.close();
      await tooMany.close();
    }
  }, 60_000);
});

