// What Redis Cluster costs Redis per call against one Redis, for docs/scaling.md: the commands
// and CPU per 1,000 calls (INFO commandstats and INFO cpu, summed over the cluster's masters and,
// separately, its replicas), the gateway's requests/s and latency, for a cache hit (one charge)
// and a forwarded call (a reserve and a settle), with `store.waitReplicas` 0 and 1.
//
//   npm run bench -- --only "Redis Cluster"        # from bench/run.ts
//   npx tsx bench/redis-cluster-cost.ts [--seconds 10] [--connections 50] [--pairs 24] [--stores 'one Redis;...']
//
// Each target is a `node dist/cli.js serve` process of its own on a store of its own: one local
// redis-server, one feeding a replica, three masters joined by `redis-cli --cluster create`, or
// six (three masters, three replicas): a cluster is compared with the single Redis that
// replicates as it does.
// The rows: the gateways run one after the other, each alone with its Redis, with wrk
// (bench/wrk.ts) as the load generator; one team, as the bench's other Redis rows. Then the
// verdicts: each cluster against the single Redis that replicates as it does, both gateways
// running side by side and short rounds alternating between them, the ratio taken per pair.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { issueKey } from '../src/admin/key-issuer.js';
import { openStore } from '../src/store/index.js';
import { startRedis, startRedisCluster, type RedisCluster, type RedisServer } from '../test/helpers/redis.js';
import { redisCost, redisSnapshotter, type RedisCost, type RedisSnapshot } from './redis-cost.js';
import { cpuSeconds } from './proc-stats.js';
import { findWrk, median, prepareWrk, runWrk, type WrkRound } from './wrk.js';
import { CAN_PIN, freePort, gatewayCommand, pinProcess } from './local-processes.js';

export const REDIS_CLUSTER_SCENARIO = 'Redis Cluster: commands and Redis CPU per call against one Redis';
/**
 * Pairs per like-for-like verdict. A pair's ratio ranges over about 0.8-1.4 on two cores, and the
 * median of 8 pairs moved between 0.99 and 1.16 from run to run; 24 pairs (3 s rounds, about 13
 * minutes for the four verdicts) give each median three times the pairs, though two such runs
 * still read forwarded calls at 1.07 and 1.12 (docs/benchmarks.md, runs 22 and 23).
 */
export const CLUSTER_PAIRS = 24;


interface Row {
  store: string;
  scenario: string;
  callsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  commandsPer1000: number;
  topCommands: string;
  masterCpuMsPer1000: number;
  /** The same, less what the masters spend with no calls at all (cron, cluster bus, replication pings). */
  masterCallCpuMsPer1000: number;
  /** Of the masters' CPU, the time INFO commandstats gives to running the ledger script (per 1,000 calls). */
  masterScriptMsPer1000: number;
  /** The masters' socket reads per 1,000 calls (`total_reads_processed`). */
  masterReadsPer1000: number | undefined;
  replicaCpuMsPer1000: number | undefined;
  gatewayCpuUsPerCall: number | undefined;
  errors: number;
}

/** A store the gateways are measured on: its `store` settings and the Redis nodes to read. */
interface StoreTarget {
  store: string;
  config: { url: string } | { cluster: string[]; waitReplicas?: number };
  urls: { masters: string[]; replicas: string[] };
}

/** A store made ready: a team and key under a key prefix of its own, and its idle masters' CPU per second. */
interface PreparedTarget extends StoreTarget {
  name: string;
  keyPrefix: string;
  secret: string;
  idleCpuPerSecond: number;
}

/** What one round measured, per 1,000 calls (the gateway's CPU per call). */
interface RoundFigures {
  onMasters: RedisCost;
  /** The masters' CPU less their idle CPU over the round. */
  masterCallCpuMsPer1000: number;
  gatewayCpuUsPerCall: number | undefined;
}

/** A cluster against its like-for-like single Redis in interleaved pairs of rounds. */
interface PairedComparison {
  reference: string;
  store: string;
  scenario: string;
  pairs: Array<{ cluster: RoundFigures; single: RoundFigures }>;
}

/** The paired table's columns: each a figure per call, compared as cluster ÷ single Redis per pair. */
const PAIRED_COLUMNS: ReadonlyArray<readonly [title: string, figure: (round: RoundFigures) => number | undefined]> = [
  ['Redis CPU per call (background taken out)', (round) => round.masterCallCpuMsPer1000],
  ['commands per call', (round) => round.onMasters.totalPer1000],
  // How large the ledger's batches were.
  ['ledger script calls per call', (round) => scriptCallsPer1000(round.onMasters)],
  // How many commands arrive per read.
  ['socket reads per call', (round) => round.onMasters.readsPer1000],
  // How long the commands are (key names, arguments).
  ['bytes read per call', (round) => round.onMasters.inputBytesPer1000],
  ['gateway CPU per call', (round) => round.gatewayCpuUsPerCall],
];

/** Per pair, the cluster's figure ÷ the single Redis's (pairs where either is unknown left out). */
function pairRatiosOf(comparison: PairedComparison, figure: (round: RoundFigures) => number | undefined): number[] {
  return comparison.pairs.flatMap(({ cluster, single }) => {
    const [mine, theirs] = [figure(cluster), figure(single)];
    return mine === undefined || theirs === undefined ? [] : [mine / theirs];
  });
}

export interface ClusterCostOptions {
  seconds: number;
  connections: number;
  /** Only these stores (exact names); all when absent. */
  stores?: readonly string[];
  /** Interleaved pairs per like-for-like comparison and scenario (0: none). */
  pairs: number;
  /** Every Redis on a core of its own, the gateways, wrk and this process on the rest. */
  pinRedis: boolean;
}

export interface ClusterCostResult {
  rows: Row[];
  pairs: PairedComparison[];
}

const SCENARIOS = [
  ['cache hit (one charge)', true],
  ['forwarded call (reserve + settle)', false],
] as const;

/** Each cluster with the single Redis that replicates as it does. */
const LIKE_FOR_LIKE = [
  ['one Redis', 'Redis Cluster (3 masters, no replicas)'],
  ['one Redis with a replica', 'Redis Cluster (3 masters)'],
] as const;

const PAIR_ROUND_SECONDS = 3;

/** Ledger script calls per 1,000 calls (the script's own commands are counted apart). */
function scriptCallsPer1000(cost: RedisCost): number {
  return cost.commandsPer1000.filter(([command]) => command === 'evalsha' || command === 'eval').reduce((sum, [, per1000]) => sum + per1000, 0);
}

/** A JSON-RPC upstream answering every eth_getBlockByHash with a block of that hash. */
async function startUpstream(): Promise<Server> {
  const server = createServer((request: IncomingMessage, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
    request.on('end', () => {
      const call = JSON.parse(body) as { id: unknown; params: unknown[] };
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ jsonrpc: '2.0', id: call.id, result: { hash: call.params[0], number: '0x1', transactions: [] } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return server;
}

/**
 * `node dist/cli.js serve` on ports chosen here; resolves with its RPC origin once its admin
 * listener answers `/readyz` 200. (At log level warn the "gateway listening" line is not written.)
 */
async function startGateway(configFile: string, ports: { rpc: number; admin: number }): Promise<{ child: ChildProcess; origin: string }> {
  const command = gatewayCommand(configFile, { logLevel: 'warn' });
  const child = spawn(process.execPath, command.args, { stdio: ['ignore', 'ignore', 'inherit'], env: command.env });
  let exited: number | null | undefined;
  child.once('exit', (code) => (exited = code));
  for (;;) {
    if (exited !== undefined) throw new Error(`gateway exited (${exited}) before it was ready`);
    const ready = await fetch(`http://127.0.0.1:${ports.admin}/readyz`).then(
      async (response) => (await response.arrayBuffer(), response.status === 200),
      () => false,
    );
    if (ready) return { child, origin: `http://127.0.0.1:${ports.rpc}` };
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function stopGateway(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const gone = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGINT');
  await gone;
}

/** A gateway on `store` (a key prefix of its own), with the response cache on (hits) or off (every call forwarded). */
async function startTargetGateway(
  workDir: string,
  name: string,
  options: { keyPrefix: string; config: Record<string, unknown>; cached: boolean; upstreamUrl: string; pin: string | undefined },
): Promise<{ child: ChildProcess; origin: string }> {
  const configFile = join(workDir, `${name}.json`);
  const ports = { rpc: await freePort(), admin: await freePort() };
  writeFileSync(
    configFile,
    JSON.stringify({
      server: { host: '127.0.0.1', port: ports.rpc },
      admin: { host: '127.0.0.1', port: ports.admin, token: 'bench-admin-token-0123456789' },
      store: { driver: 'redis', keyPrefix: options.keyPrefix, ...options.config },
      ...(options.cached ? {} : { cache: { maxBytes: 0 } }),
      networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, baseUrls: ['*/eth'], upstreams: [{ id: 'u1', url: options.upstreamUrl, connections: 128 }] }],
    }),
  );
  const gateway = await startGateway(configFile, ports);
  if (options.pin !== undefined) pinProcess(gateway.child.pid!, options.pin);
  return gateway;
}

/** The process id of the Redis at `url` (`INFO server`). */
export async function redisPid(url: string): Promise<number> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  try {
    await client.connect();
    return Number(/process_id:(\d+)/.exec(await client.info('server'))![1]);
  } finally {
    client.disconnect();
  }
}

/** Makes `replica` a replica of `primary` and waits until the link is up. */
export async function replicate(replica: RedisServer, primary: RedisServer): Promise<void> {
  const client = new Redis(replica.url);
  try {
    await client.replicaof('127.0.0.1', primary.port);
    for (;;) {
      if (/master_link_status:up/.test(await client.info('replication'))) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  } finally {
    client.disconnect();
  }
}

/**
 * Snapshots of every master (and, apart, every replica) of the cluster, or of the one Redis, over
 * connections kept open (one per node).
 */
function snapshotReader(): { snapshots(urls: StoreTarget['urls']): Promise<{ masters: RedisSnapshot[]; replicas: RedisSnapshot[] }>; close(): void } {
  const open = new Map<string, ReturnType<typeof redisSnapshotter>>();
  const snapshot = async (url: string) => {
    let snapshotter = open.get(url);
    if (snapshotter === undefined) open.set(url, (snapshotter = redisSnapshotter(url)));
    return (await snapshotter).snapshot();
  };
  return {
    snapshots: async (urls) => ({ masters: await Promise.all(urls.masters.map(snapshot)), replicas: await Promise.all(urls.replicas.map(snapshot)) }),
    close: () => {
      for (const snapshotter of open.values()) void snapshotter.then((opened) => opened.close(), () => undefined);
    },
  };
}

function summed(list: readonly RedisSnapshot[]): RedisSnapshot {
  const calls = new Map<string, number>();
  const usec = new Map<string, number>();
  for (const snapshot of list) {
    for (const [command, count] of snapshot.calls) calls.set(command, (calls.get(command) ?? 0) + count);
    for (const [command, spent] of snapshot.usec ?? []) usec.set(command, (usec.get(command) ?? 0) + spent);
  }
  const total = (counter: (snapshot: RedisSnapshot) => number | undefined) =>
    list.every((snapshot) => counter(snapshot) !== undefined) ? list.reduce((sum, snapshot) => sum + counter(snapshot)!, 0) : undefined;
  return {
    calls,
    usec,
    cpuSeconds: list.reduce((sum, snapshot) => sum + snapshot.cpuSeconds, 0),
    reads: total((snapshot) => snapshot.reads),
    inputBytes: total((snapshot) => snapshot.inputBytes),
  };
}

export async function runRedisClusterCost(options: ClusterCostOptions): Promise<ClusterCostResult> {
  if (findWrk() === undefined) throw new Error('wrk is not installed (apt-get install wrk)');
  const workDir = mkdtempSync(join(tmpdir(), 'tollgate-bench-cluster-'));
  const wrk = prepareWrk(workDir);
  const upstream = await startUpstream();
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  let single: RedisServer | undefined;
  let primary: RedisServer | undefined;
  let primaryReplica: RedisServer | undefined;
  let cluster: RedisCluster | undefined;
  let bareCluster: RedisCluster | undefined;
  const rows: Row[] = [];
  const pairs: PairedComparison[] = [];
  const reader = snapshotReader();
  const snapshots = reader.snapshots;
  try {
    single = await startRedis();
    // The fair reference for a cluster whose masters each feed a replica: one Redis feeding one.
    primary = await startRedis();
    primaryReplica = await startRedis();
    await replicate(primaryReplica, primary);
    cluster = await startRedisCluster({ nodeTimeoutMs: 5_000 });
    // Like for like with one Redis: three masters that feed no replica.
    bareCluster = await startRedisCluster({ nodeTimeoutMs: 5_000, replicasPerMaster: 0 });
    // Pinned: every Redis on the last core, everything else (this process and its upstream, the
    // gateways, wrk) on the others, so that a Redis is never descheduled for the processes that
    // load it and its CPU per call is its own work.
    const cores = availableParallelism();
    const pins = options.pinRedis && CAN_PIN ? { redis: String(cores - 1), gateway: cores === 2 ? '0' : `0-${cores - 2}` } : undefined;
    if (pins !== undefined) {
      pinProcess(process.pid, pins.gateway);
      const urls = [single.url, primary.url, primaryReplica.url, ...cluster.nodes.map((node) => node.url), ...bareCluster.nodes.map((node) => node.url)];
      for (const url of urls) pinProcess(await redisPid(url), pins.redis);
    }
    const masters = new Set((await cluster.masters()).map((master) => master.port));
    const clusterUrls = {
      masters: cluster.nodes.filter((node) => masters.has(node.port)).map((node) => node.url),
      replicas: cluster.nodes.filter((node) => !masters.has(node.port)).map((node) => node.url),
    };
    const targets: StoreTarget[] = [
      { store: 'one Redis', config: { url: single.url }, urls: { masters: [single.url], replicas: [] } },
      { store: 'one Redis with a replica', config: { url: primary.url }, urls: { masters: [primary.url], replicas: [primaryReplica.url] } },
      { store: 'Redis Cluster (3 masters, no replicas)', config: { cluster: bareCluster.seeds }, urls: { masters: bareCluster.seeds, replicas: [] } },
      { store: 'Redis Cluster (3 masters)', config: { cluster: cluster.seeds }, urls: clusterUrls },
      { store: 'Redis Cluster, waitReplicas: 1', config: { cluster: cluster.seeds, waitReplicas: 1 }, urls: clusterUrls },
    ];
    // Every chosen store: a team and key under a key prefix of its own, and its masters' background
    // CPU with no client at all, per second (a cluster has three main threads' crons and a cluster
    // bus, costs that do not grow with calls).
    const prepared = new Map<string, PreparedTarget>();
    for (const [index, target] of targets.entries()) {
      if (options.stores !== undefined && !options.stores.includes(target.store)) continue;
      const keyPrefix = `bench${index}:`;
      const store = await openStore({ driver: 'redis', keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false, ...target.config });
      const team = await store.createTeam({ name: 'bench', dailyCredits: 1_000_000_000_000 });
      const { secret } = await issueKey(store, { teamId: team.id });
      await store.close();
      const idleBefore = summed((await snapshots(target.urls)).masters);
      const idleStarted = performance.now();
      await new Promise((resolve) => setTimeout(resolve, options.seconds * 1000));
      const idleCpuPerSecond = (summed((await snapshots(target.urls)).masters).cpuSeconds - idleBefore.cpuSeconds) / ((performance.now() - idleStarted) / 1000);
      prepared.set(target.store, { ...target, name: `gateway-${index}`, keyPrefix, secret, idleCpuPerSecond });
    }
    const hash = `0x${'ab'.repeat(32)}`;
    const bodyFile = wrk.bodyFile(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash, false] }));
    /** One wrk round against `gateway` on `target`, with the masters' (and replicas') counters read around it. */
    const measure = async (target: PreparedTarget, gateway: { child: ChildProcess; origin: string }, seconds: number): Promise<RoundFigures & { run: WrkRound; onReplicas: RedisCost | undefined }> => {
      const before = await snapshots(target.urls);
      const cpuBefore = cpuSeconds(gateway.child.pid);
      const run = await runWrk({ script: wrk.script, bodyFile, url: `${gateway.origin}/eth/v3/${target.secret}`, connections: options.connections, threads: 1, seconds, timeoutS: 10, pin: pins?.gateway });
      const cpuAfter = cpuSeconds(gateway.child.pid);
      const after = await snapshots(target.urls);
      const onMasters = redisCost(summed(before.masters), summed(after.masters), run.requests);
      return {
        run,
        onMasters,
        onReplicas: target.urls.replicas.length === 0 ? undefined : redisCost(summed(before.replicas), summed(after.replicas), run.requests),
        masterCallCpuMsPer1000: onMasters.cpuMsPer1000 - (1000 * 1000 * target.idleCpuPerSecond * run.seconds) / run.requests,
        gatewayCpuUsPerCall: cpuBefore === undefined || cpuAfter === undefined ? undefined : ((cpuAfter - cpuBefore) / run.requests) * 1e6,
      };
    };

    // One row per store and scenario, each gateway alone with its store.
    for (const target of prepared.values()) {
      for (const [scenario, cached] of SCENARIOS) {
        const gateway = await startTargetGateway(workDir, `${target.name}-${cached}`, { keyPrefix: target.keyPrefix, config: target.config, cached, upstreamUrl, pin: pins?.gateway });
        try {
          await measure(target, gateway, 2); // warm-up
          const { run: measured, onMasters, onReplicas, masterCallCpuMsPer1000, gatewayCpuUsPerCall } = await measure(target, gateway, options.seconds);
          const quantile = (q: number) => measured.quantilesMs[Math.min(measured.quantilesMs.length - 1, Math.floor(q * measured.quantilesMs.length))]!;
          rows.push({
            store: target.store,
            scenario,
            callsPerSecond: measured.requests / measured.seconds,
            p50Ms: quantile(0.5),
            p99Ms: quantile(0.99),
            commandsPer1000: onMasters.totalPer1000,
            topCommands: onMasters.commandsPer1000.slice(0, 5).map(([command, count]) => `${command} ${Math.round(count)}`).join(', '),
            masterCpuMsPer1000: onMasters.cpuMsPer1000,
            masterCallCpuMsPer1000,
            masterScriptMsPer1000: onMasters.scriptMsPer1000,
            masterReadsPer1000: onMasters.readsPer1000,
            replicaCpuMsPer1000: onReplicas?.cpuMsPer1000,
            gatewayCpuUsPerCall,
            errors: measured.errors + measured.non2xx,
          });
          process.stdout.write(`  ${target.store}, ${scenario}: ${Math.round(measured.requests / measured.seconds)} calls/s, ${onMasters.totalPer1000.toFixed(0)} commands and ${onMasters.cpuMsPer1000.toFixed(1)} ms master CPU per 1,000 calls\n`);
        } finally {
          await stopGateway(gateway.child);
        }
      }
    }

    // The like-for-like verdicts, in interleaved pairs: both gateways run side by side (one on
    // each store), and rounds alternate between them, so that what the machine does meanwhile
    // (the other processes on two cores, V8's compilations, the CPU's clock) falls on both alike.
    // Single rows, one store after the other, moved by ±15% between runs; a pair's ratio is taken
    // between two rounds seconds apart.
    for (const [referenceStore, clusterStore] of LIKE_FOR_LIKE) {
      const reference = prepared.get(referenceStore);
      const clustered = prepared.get(clusterStore);
      if (reference === undefined || clustered === undefined || options.pairs === 0) continue;
      for (const [scenario, cached] of SCENARIOS) {
        const gateways: Array<{ child: ChildProcess; origin: string }> = [];
        const start = async (target: PreparedTarget) => {
          const gateway = await startTargetGateway(workDir, `${target.name}-paired-${cached}`, { keyPrefix: target.keyPrefix, config: target.config, cached, upstreamUrl, pin: pins?.gateway });
          gateways.push(gateway);
          return { target, gateway, round: () => measure(target, gateway, PAIR_ROUND_SECONDS) };
        };
        try {
          const single = await start(reference);
          const cluster = await start(clustered);
          await single.round(); // warm-ups
          await cluster.round();
          const comparison: PairedComparison = { reference: referenceStore, store: clusterStore, scenario, pairs: [] };
          for (let pair = 0; pair < options.pairs; pair += 1) {
            // Which goes first alternates too.
            if (pair % 2 === 0) comparison.pairs.push({ single: await single.round(), cluster: await cluster.round() });
            else comparison.pairs.push({ cluster: await cluster.round(), single: await single.round() });
          }
          pairs.push(comparison);
          process.stdout.write(`  ${clusterStore} ÷ ${referenceStore}, ${scenario}: Redis CPU per call, median of ${options.pairs} pairs ${median(pairRatiosOf(comparison, PAIRED_COLUMNS[0]![1])).toFixed(3)}×\n`);
        } finally {
          for (const gateway of gateways) await stopGateway(gateway.child);
        }
      }
    }
  } finally {
    reader.close();
    await cluster?.stop();
    await bareCluster?.stop();
    await single?.stop();
    await primaryReplica?.stop();
    await primary?.stop();
    await new Promise((resolve) => upstream.close(resolve));
    rmSync(workDir, { recursive: true, force: true });
  }
  return { rows, pairs };
}

export function formatRedisClusterCost(result: ClusterCostResult, options: ClusterCostOptions): string {
  const { rows } = result;
  const fmt = (value: number | undefined, digits = 1) => (value === undefined ? 'n/a' : value.toFixed(digits));
  const lines = [
    `${REDIS_CLUSTER_SCENARIO}: one gateway process, wrk with ${options.connections} connections, ${options.seconds} s per row after 2 s of warm-up; one team; Redis figures per 1,000 calls, masters summed (replicas apart).`,
    '',
    '| store | scenario | calls/s | p50 ms | p99 ms | commands per 1,000 calls (masters) | of which | master CPU ms per 1,000 calls | of which per call (background taken out) | of which running the ledger script | socket reads per 1,000 calls (masters) | replica CPU ms per 1,000 calls | gateway CPU µs/call | errors |',
    '|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (row) =>
        `| ${row.store} | ${row.scenario} | ${Math.round(row.callsPerSecond)} | ${fmt(row.p50Ms, 2)} | ${fmt(row.p99Ms, 2)} | ${Math.round(row.commandsPer1000)} | ${row.topCommands} | ${fmt(row.masterCpuMsPer1000)} | ${fmt(row.masterCallCpuMsPer1000)} | ${fmt(row.masterScriptMsPer1000, 2)} | ${fmt(row.masterReadsPer1000, 0)} | ${fmt(row.replicaCpuMsPer1000)} | ${fmt(row.gatewayCpuUsPerCall, 0)} | ${row.errors} |`,
    ),
  ];
  /** One line per comparison whose rows were both measured: commands and CPU per call, row against row. */
  const versus = (title: string, store: string, referenceStore: string) => {
    const parts = SCENARIOS.flatMap(([scenario]) => {
      const reference = rows.find((row) => row.store === referenceStore && row.scenario === scenario);
      const row = rows.find((candidate) => candidate.store === store && candidate.scenario === scenario);
      if (reference === undefined || row === undefined) return [];
      return [`${scenario}: commands ${(row.commandsPer1000 / reference.commandsPer1000).toFixed(2)}×, Redis CPU ${(row.masterCpuMsPer1000 / reference.masterCpuMsPer1000).toFixed(2)}× (background taken out: ${(row.masterCallCpuMsPer1000 / reference.masterCallCpuMsPer1000).toFixed(2)}×)`];
    });
    return parts.length === 0 ? [] : [`${title}: ${parts.join('; ')}.`];
  };
  lines.push(
    '',
    ...versus('Redis Cluster (3 masters, no replicas) against one Redis, per call', 'Redis Cluster (3 masters, no replicas)', 'one Redis'),
    ...versus('Redis Cluster (3 masters) against one Redis, per call', 'Redis Cluster (3 masters)', 'one Redis'),
    ...versus('Redis Cluster (3 masters) against one Redis with a replica (each master has one too)', 'Redis Cluster (3 masters)', 'one Redis with a replica'),
    ...versus('With waitReplicas: 1, against the cluster without', 'Redis Cluster, waitReplicas: 1', 'Redis Cluster (3 masters)'),
  );
  if (result.pairs.length > 0) {
    const spread = (values: readonly number[]) =>
      values.length === 0 ? 'n/a' : `${median(values).toFixed(3)}× (${Math.min(...values).toFixed(2)}–${Math.max(...values).toFixed(2)})`;
    lines.push(
      '',
      `Like for like in interleaved pairs (both gateways running, ${PAIR_ROUND_SECONDS} s rounds alternating between them, ${options.pairs} pairs; median, and the range over the pairs):`,
      '',
      `| cluster | against | scenario | ${PAIRED_COLUMNS.map(([title]) => title).join(' | ')} |`,
      `|---|---|---|${PAIRED_COLUMNS.map(() => '---:').join('|')}|`,
      ...result.pairs.map((comparison) => `| ${comparison.store} | ${comparison.reference} | ${comparison.scenario} | ${PAIRED_COLUMNS.map(([, figure]) => spread(pairRatiosOf(comparison, figure))).join(' | ')} |`),
    );
  }
  return lines.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  // --stores 'one Redis;Redis Cluster (3 masters, no replicas)': only those rows (exact names).
  const { values } = parseArgs({
    options: { seconds: { type: 'string', default: '10' }, connections: { type: 'string', default: '50' }, stores: { type: 'string' }, pairs: { type: 'string', default: String(CLUSTER_PAIRS) }, 'no-pin': { type: 'boolean', default: false } },
  });
  const options = { seconds: Number(values.seconds), connections: Number(values.connections), stores: values.stores?.split(';'), pairs: Number(values.pairs), pinRedis: !values['no-pin'] };
  runRedisClusterCost(options).then(
    (result) => console.log(`\n${formatRedisClusterCost(result, options)}`),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
