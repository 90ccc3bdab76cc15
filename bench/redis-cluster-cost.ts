// What Redis Cluster costs Redis per call against one Redis, for docs/scaling.md: the commands
// and CPU per 1,000 calls (INFO commandstats and INFO cpu, summed over the cluster's masters and,
// separately, its replicas), the gateway's requests/s and latency, for a cache hit (one charge)
// and a forwarded call (a reserve and a settle), with `store.waitReplicas` 0 and 1.
//
//   npm run bench -- --only "Redis Cluster"        # from bench/run.ts
//   npx tsx bench/redis-cluster-cost.ts [--seconds 10] [--connections 50]
//
// Each target is a `node dist/cli.js serve` process of its own on a store of its own: one local
// redis-server, one feeding a replica, three masters joined by `redis-cli --cluster create`, or
// six (three masters, three replicas): a cluster is compared with the single Redis that
// replicates as it does.
// The gateways run one after the other, each alone with its Redis, with wrk (bench/wrk.ts) as
// the load generator; one team, as the bench's other Redis rows.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { issueKey } from '../src/admin/key-issuer.js';
import { openStore } from '../src/store/index.js';
import { startRedis, startRedisCluster, type RedisCluster, type RedisServer } from '../test/helpers/redis.js';
import { redisCost, redisSnapshot, type RedisSnapshot } from './redis-cost.js';
import { cpuSeconds } from './proc-stats.js';
import { findWrk, prepareWrk, runWrk } from './wrk.js';
import { CLI, freePort } from './local-processes.js';

export const REDIS_CLUSTER_SCENARIO = 'Redis Cluster: commands and Redis CPU per call against one Redis';


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
  replicaCpuMsPer1000: number | undefined;
  gatewayCpuUsPerCall: number | undefined;
  errors: number;
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
  const child = spawn(process.execPath, [CLI, 'serve', '--config', configFile], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, TOLLGATE_LOG_LEVEL: 'warn' } });
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

/** Makes `replica` a replica of `primary` and waits until the link is up. */
async function replicate(replica: RedisServer, primary: RedisServer): Promise<void> {
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

/** Snapshots of every master (and, apart, every replica) of the cluster, or of the one Redis. */
async function snapshots(urls: { masters: string[]; replicas: string[] }): Promise<{ masters: RedisSnapshot[]; replicas: RedisSnapshot[] }> {
  return { masters: await Promise.all(urls.masters.map(redisSnapshot)), replicas: await Promise.all(urls.replicas.map(redisSnapshot)) };
}

function summed(list: readonly RedisSnapshot[]): RedisSnapshot {
  const calls = new Map<string, number>();
  const usec = new Map<string, number>();
  for (const snapshot of list) {
    for (const [command, count] of snapshot.calls) calls.set(command, (calls.get(command) ?? 0) + count);
    for (const [command, spent] of snapshot.usec ?? []) usec.set(command, (usec.get(command) ?? 0) + spent);
  }
  return { calls, usec, cpuSeconds: list.reduce((sum, snapshot) => sum + snapshot.cpuSeconds, 0) };
}

export async function runRedisClusterCost(options: { seconds: number; connections: number; stores?: readonly string[] }): Promise<Row[]> {
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
  try {
    single = await startRedis();
    // The fair reference for a cluster whose masters each feed a replica: one Redis feeding one.
    primary = await startRedis();
    primaryReplica = await startRedis();
    await replicate(primaryReplica, primary);
    cluster = await startRedisCluster({ nodeTimeoutMs: 5_000 });
    // Like for like with one Redis: three masters that feed no replica.
    bareCluster = await startRedisCluster({ nodeTimeoutMs: 5_000, replicasPerMaster: 0 });
    const masters = new Set((await cluster.masters()).map((master) => master.port));
    const clusterUrls = {
      masters: cluster.nodes.filter((node) => masters.has(node.port)).map((node) => node.url),
      replicas: cluster.nodes.filter((node) => !masters.has(node.port)).map((node) => node.url),
    };
    const targets = [
      { store: 'one Redis', config: { url: single.url }, urls: { masters: [single.url], replicas: [] } },
      { store: 'one Redis with a replica', config: { url: primary.url }, urls: { masters: [primary.url], replicas: [primaryReplica.url] } },
      { store: 'Redis Cluster (3 masters, no replicas)', config: { cluster: bareCluster.seeds }, urls: { masters: bareCluster.seeds, replicas: [] } },
      { store: 'Redis Cluster (3 masters)', config: { cluster: cluster.seeds }, urls: clusterUrls },
      { store: 'Redis Cluster, waitReplicas: 1', config: { cluster: cluster.seeds, waitReplicas: 1 }, urls: clusterUrls },
    ];
    for (const [index, target] of targets.entries()) {
      if (options.stores !== undefined && !options.stores.includes(target.store)) continue;
      const keyPrefix = `bench${index}:`;
      const storeConfig = { driver: 'redis' as const, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false, ...target.config };
      const store = await openStore(storeConfig);
      const team = await store.createTeam({ name: 'bench', dailyCredits: 1_000_000_000_000 });
      const { secret } = await issueKey(store, { teamId: team.id });
      await store.close();
      // The masters' background CPU with no client at all, per second: a cluster has three main
      // threads' crons and a cluster bus, costs that do not grow with calls.
      const idleBefore = summed((await snapshots(target.urls)).masters);
      const idleStarted = performance.now();
      await new Promise((resolve) => setTimeout(resolve, options.seconds * 1000));
      const idleCpuPerSecond = (summed((await snapshots(target.urls)).masters).cpuSeconds - idleBefore.cpuSeconds) / ((performance.now() - idleStarted) / 1000);
      for (const [scenario, cached] of [['cache hit (one charge)', true], ['forwarded call (reserve + settle)', false]] as const) {
        const configFile = join(workDir, `gateway-${index}-${cached}.json`);
        const ports = { rpc: await freePort(), admin: await freePort() };
        writeFileSync(
          configFile,
          JSON.stringify({
            server: { host: '127.0.0.1', port: ports.rpc },
            admin: { host: '127.0.0.1', port: ports.admin, token: 'bench-admin-token-0123456789' },
            store: { driver: 'redis', keyPrefix, ...target.config },
            ...(cached ? {} : { cache: { maxBytes: 0 } }),
            networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, baseUrls: ['*/eth'], upstreams: [{ id: 'u1', url: upstreamUrl, connections: 128 }] }],
          }),
        );
        const gateway = await startGateway(configFile, ports);
        try {
          const hash = `0x${'ab'.repeat(32)}`;
          const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash, false] });
          const round = (seconds: number) => runWrk({ script: wrk.script, bodyFile: wrk.bodyFile(body), url: `${gateway.origin}/eth/v3/${secret}`, connections: options.connections, threads: 1, seconds, timeoutS: 10 });
          await round(2); // warm-up
          const before = await snapshots(target.urls);
          const cpuBefore = cpuSeconds(gateway.child.pid);
          const measured = await round(options.seconds);
          const cpuAfter = cpuSeconds(gateway.child.pid);
          const after = await snapshots(target.urls);
          const onMasters = redisCost(summed(before.masters), summed(after.masters), measured.requests);
          const onReplicas = target.urls.replicas.length === 0 ? undefined : redisCost(summed(before.replicas), summed(after.replicas), measured.requests);
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
            masterCallCpuMsPer1000: onMasters.cpuMsPer1000 - (1000 * 1000 * idleCpuPerSecond * measured.seconds) / measured.requests,
            masterScriptMsPer1000: onMasters.scriptMsPer1000,
            replicaCpuMsPer1000: onReplicas?.cpuMsPer1000,
            gatewayCpuUsPerCall: cpuBefore === undefined || cpuAfter === undefined ? undefined : ((cpuAfter - cpuBefore) / measured.requests) * 1e6,
            errors: measured.errors + measured.non2xx,
          });
          process.stdout.write(`  ${target.store}, ${scenario}: ${Math.round(measured.requests / measured.seconds)} calls/s, ${onMasters.totalPer1000.toFixed(0)} commands and ${onMasters.cpuMsPer1000.toFixed(1)} ms master CPU per 1,000 calls\n`);
        } finally {
          await stopGateway(gateway.child);
        }
      }
    }
  } finally {
    await cluster?.stop();
    await bareCluster?.stop();
    await single?.stop();
    await primaryReplica?.stop();
    await primary?.stop();
    await new Promise((resolve) => upstream.close(resolve));
    rmSync(workDir, { recursive: true, force: true });
  }
  return rows;
}

export function formatRedisClusterCost(rows: readonly Row[], options: { seconds: number; connections: number }): string {
  const fmt = (value: number | undefined, digits = 1) => (value === undefined ? 'n/a' : value.toFixed(digits));
  const lines = [
    `${REDIS_CLUSTER_SCENARIO}: one gateway process, wrk with ${options.connections} connections, ${options.seconds} s per row after 2 s of warm-up; one team; Redis figures per 1,000 calls, masters summed (replicas apart).`,
    '',
    '| store | scenario | calls/s | p50 ms | p99 ms | commands per 1,000 calls (masters) | of which | master CPU ms per 1,000 calls | of which per call (background taken out) | of which running the ledger script | replica CPU ms per 1,000 calls | gateway CPU µs/call | errors |',
    '|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (row) =>
        `| ${row.store} | ${row.scenario} | ${Math.round(row.callsPerSecond)} | ${fmt(row.p50Ms, 2)} | ${fmt(row.p99Ms, 2)} | ${Math.round(row.commandsPer1000)} | ${row.topCommands} | ${fmt(row.masterCpuMsPer1000)} | ${fmt(row.masterCallCpuMsPer1000)} | ${fmt(row.masterScriptMsPer1000, 2)} | ${fmt(row.replicaCpuMsPer1000)} | ${fmt(row.gatewayCpuUsPerCall, 0)} | ${row.errors} |`,
    ),
  ];
  const versus = (store: string, referenceStore: string) =>
    ['cache hit (one charge)', 'forwarded call (reserve + settle)'].map((scenario) => {
      const reference = rows.find((row) => row.store === referenceStore && row.scenario === scenario);
      const row = rows.find((candidate) => candidate.store === store && candidate.scenario === scenario);
      if (reference === undefined || row === undefined) return '';
      return `${scenario}: commands ${(row.commandsPer1000 / reference.commandsPer1000).toFixed(2)}×, Redis CPU ${(row.masterCpuMsPer1000 / reference.masterCpuMsPer1000).toFixed(2)}× (background taken out: ${(row.masterCallCpuMsPer1000 / reference.masterCallCpuMsPer1000).toFixed(2)}×)`;
    });
  lines.push('', `Redis Cluster (3 masters, no replicas) against one Redis, per call: ${versus('Redis Cluster (3 masters, no replicas)', 'one Redis').join('; ')}.`);
  lines.push(`Redis Cluster (3 masters) against one Redis, per call: ${versus('Redis Cluster (3 masters)', 'one Redis').join('; ')}.`);
  lines.push(`Redis Cluster (3 masters) against one Redis with a replica (each master has one too): ${versus('Redis Cluster (3 masters)', 'one Redis with a replica').join('; ')}.`);
  lines.push(`With waitReplicas: 1, against the cluster without: ${versus('Redis Cluster, waitReplicas: 1', 'Redis Cluster (3 masters)').join('; ')}.`);
  return lines.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  // --stores 'one Redis;Redis Cluster (3 masters, no replicas)': only those rows (exact names).
  const { values } = parseArgs({ options: { seconds: { type: 'string', default: '10' }, connections: { type: 'string', default: '50' }, stores: { type: 'string' } } });
  const options = { seconds: Number(values.seconds), connections: Number(values.connections), stores: values.stores?.split(';') };
  runRedisClusterCost(options).then(
    (rows) => console.log(`\n${formatRedisClusterCost(rows, options)}`),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
