// Gateway replicas on Redis Cluster: two (and later two more) `tollgate serve` processes
// (dist/cli.js) sharing a real local cluster of six redis-servers (three masters, three
// replicas, no persistence), in front of one scripted upstream. Shows that teams spread over
// every master and spend exactly, that every key of a team sits in one slot, what a master
// killed under load costs (recovery time, credits the failover lost) with and without
// `store.waitReplicas`, and that a single-Redis store migrated to the cluster serves unchanged.

import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Cluster } from 'ioredis';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { openStore, type Store, type Team } from '../src/store/index.js';
import { ensureBuilt } from './helpers/build.js';
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
const teamTag = (teamId: string) => `${keyPrefix}{t:${teamId}}:`;

// ---------------------------------------------------------------------------------------------
// Processes and requests

let upstream: ScriptedUpstream;
let store: Store;
const clusterStore = (extra: Record<string, unknown> = {}) => ({ driver: 'redis', cluster: cluster.get().seeds, keyPrefix, ...extra });

function writeConfig(name: string, storeConfig: Record<string, unknown>, cached: boolean): string {
  const path = join(workDir, `${name}.yaml`);
  const config = {
    server: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN },
    auth: { keyCacheTtlMs: KEY_CACHE_TTL_MS },
    store: storeConfig,
    // Without the cache every call goes upstream: a reserve and a settle each.
    ...(cached ? {} : { cache: { maxBytes: 0 } }),
    networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, baseUrls: ['*/eth'], upstreams: [{ id: 'u1', url: upstream.url, connections: 128 }] }],
  };
  writeFileSync(path, JSON.stringify(config, null, 2));
  return path;
}

interface Replica {
  process: GatewayProcess;
  pool: Pool;
}

async function startReplicas(name: string, storeConfig: Record<string, unknown>, options: { cached: boolean }): Promise<Replica[]> {
  const configFile = writeConfig(name, storeConfig, options.cached);
  // Per-request log lines are not kept: only the start-up line is read.
  const keep = (line: Record<string, unknown>) => line.msg === 'gateway listening';
  const started = await Promise.all([spawnGateway(configFile, { cwd: workDir, keep }), spawnGateway(configFile, { cwd: workDir, keep })]);
  return started.map((process) => ({ process, pool: new Pool(process.rpcOrigin, { connections: 64 }) }));
}

async function stopReplicas(replicas: readonly Replica[]): Promise<void> {
  await Promise.all(replicas.map((replica) => replica.pool.close()));
  await Promise.all(replicas.map((replica) => replica.process.stop('SIGTERM')));
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
        const mastersOfTeams = new Set<string>();
        for (const { team, keyId } of teams) {
          const keysOfTeam: string[] = [];
          for (const node of client.nodes('master')) {
            let cursor = '0';
            do {
              const [next, found] = await node.scan(cursor, 'MATCH', `${teamTag(team.id)}*`, 'COUNT', 1000);
              keysOfTeam.push(...found);
              if (found.length > 0) mastersOfTeams.add(`${node.options.port}`);
              cursor = next;
            } while (cursor !== '0');
          }
          const day = utcDay(Date.now());
          // Its day total, its key's day total, its usage hashes (daily and hourly) carry its tag (its
          // reservations index is gone once every reservation settled: Redis drops an empty zset).
          expect(keysOfTeam.sort()).toEqual([`used:team:${day}`, `used:key:${keyId}:${day}`, `usage:c:${day}`, `usage:r:${day}`, `usage:h:${day}`].map((name) => `${teamTag(team.id)}${name}`).sort());
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
});
