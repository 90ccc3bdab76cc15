// What Redis Cluster mode itself costs Redis per call, with the gateway out of the loop: the
// control for bench/redis-cluster-cost.ts (docs/benchmarks.md, "Redis Cluster against one Redis").
// `redis-benchmark` drives the gateway's own ledger script (APPLY_SCRIPT, with the cluster's
// `allow-cross-slot-keys` shebang on both) against one plain Redis and against a cluster master:
// a one-node cluster serving every slot, then the three masters bench/redis-cluster-cost.ts starts
// (the script's slot on one of them); each without replicas, then with a replica each. Every
// Redis is pinned to the last core and `redis-benchmark` to the first; rounds alternate between
// the two masters (plain first, then cluster first, ...), and each verdict is the median over the
// pairs of the cluster master's Redis CPU per call over the plain Redis's.
//
// Per call the script does what a forwarded call's two ledger batches do for it: read a
// reservation's fields (compared as absent), write the reservation hash, add it to the team's
// index, take it out and delete it. The names are the cluster layout's (slot tag, team id) on
// both, so only the server's mode differs.
//
//   node --import tsx bench/redis-cluster-control.ts [--rounds 6] [--calls 200000] [--clients 50]

import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { CROSS_SLOT_SHEBANG, APPLY_SCRIPT, RESERVATION_FIELDS } from '../src/store/redis-scripts.js';
import { createRedisKeyspace } from '../src/store/redis-keyspace.js';
import { startRedis, startRedisCluster, type RedisServer } from '../test/helpers/redis.js';
import { until } from '../test/helpers/until.js';
import { CAN_PIN, pinProcess } from './local-processes.js';
import { redisPid, replicate } from './redis-cluster-cost.js';
import { redisSnapshotter } from './redis-cost.js';
import { median } from './wrk.js';

const TOPOLOGIES: readonly Topology[] = ['one node', 'three masters'];
const CLUSTER_NODE_ARGS = ['--cluster-enabled', 'yes', '--cluster-node-timeout', '5000'];
const TEAM_ID = 'team_0123456789abcdef';
/** The cluster layout's names, used on both servers: only the server's mode differs. */
const KEYS = createRedisKeyspace('tg:', true);
/** How long setting up a cluster or a replica may take before the control gives up. */
const SETUP_TIMEOUT_MS = 30_000;
const DAY = '2026-11-28';
const CREATED_AT = '1764288000000';

/** Snapshots of one Redis (its CPU read from `INFO`), over a connection of their own. */
type Snapshots = Awaited<ReturnType<typeof redisSnapshotter>>;

interface Round {
  masterUsPerCall: number;
  replicaUsPerCall: number | undefined;
  callsPerSecond: number;
}

/** The cluster measured: one node serving every slot, or the bench's three masters (the script's slot on one). */
type Topology = 'one node' | 'three masters';

interface Verdict {
  topology: Topology;
  replicas: boolean;
  pairs: Array<{ plain: Round; cluster: Round; ratio: number }>;
  medianRatio: number;
}

/** Makes `node` a one-node cluster serving every slot, and `replica` (when given) its replica. */
async function makeCluster(node: RedisServer, replica: RedisServer | undefined): Promise<void> {
  const master = new Redis(node.url);
  try {
    await master.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
    await until(async () => /cluster_state:ok/.test(String(await master.call('CLUSTER', 'INFO'))), 'cluster_state:ok', SETUP_TIMEOUT_MS);
    if (replica === undefined) return;
    const masterId = String(await master.call('CLUSTER', 'MYID'));
    const follower = new Redis(replica.url);
    try {
      await follower.call('CLUSTER', 'MEET', '127.0.0.1', String(node.port));
      await until(async () => String(await follower.call('CLUSTER', 'NODES')).includes(masterId), 'the replica to learn the master', SETUP_TIMEOUT_MS);
      await follower.call('CLUSTER', 'REPLICATE', masterId);
      await until(async () => /master_link_status:up/.test(await follower.info('replication')), 'the replication link', SETUP_TIMEOUT_MS);
    } finally {
      follower.disconnect();
    }
  } finally {
    master.disconnect();
  }
}

/** The `EVALSHA` command line: KEYS[1] is the reservation (a new id per call), then APPLY_SCRIPT's arguments. */
function scriptArguments(sha: string): string[] {
  const id = 'ctl__rand_int__'; // redis-benchmark puts a random number in place of __rand_int__
  const fields = RESERVATION_FIELDS as readonly string[];
  const hashValues = ['teamId', TEAM_ID, 'keyId', 'key_0123456789abcdef', 'day', DAY, 'network', 'eth', 'method', 'eth_call', 'cost', '20', 'owner', 'ctl', 'createdAt', CREATED_AT];
  return [
    'EVALSHA', sha, '1', KEYS.reservation(TEAM_ID, id),
    '1', KEYS.reservations(TEAM_ID), // E = 1 more name: the team's reservation index
    '1', String(fields.length), ...fields, ...fields.map(() => ''), // C = 1 compared key: the reservation, absent
    '4',
    'hset', '1', '0', String(hashValues.length / 2), ...hashValues,
    'zadd', '2', CREATED_AT, 'ctl',
    'zrem', '2', 'ctl',
    'del', '1',
  ];
}

/** One round of `redis-benchmark` against the master on `port`: its CPU per call, and its replica's. */
async function measure(master: Snapshots, replica: Snapshots | undefined, port: number, command: readonly string[], options: { calls: number; clients: number }): Promise<Round> {
  const before = (await master.snapshot()).cpuSeconds;
  const replicaBefore = replica === undefined ? undefined : (await replica.snapshot()).cpuSeconds;
  const pin = CAN_PIN ? ['taskset', '-c', '0'] : [];
  const [program, ...args] = [...pin, 'redis-benchmark', '-p', String(port), '-c', String(options.clients), '-n', String(options.calls), '-r', '1000000000', '-q', ...command];
  const run = spawnSync(program!, args, { encoding: 'utf8' });
  if (run.status !== 0) throw new Error(`redis-benchmark failed: ${run.error?.message ?? run.stderr}`);
  // redis-benchmark reports a server's error reply and goes on: one is enough to spoil the round.
  if (/Error|ERR|MOVED|NOSCRIPT/.test(run.stdout + run.stderr)) throw new Error(`the script failed: ${run.stdout.slice(-500)}`);
  const after = (await master.snapshot()).cpuSeconds;
  const replicaAfter = replica === undefined ? undefined : (await replica.snapshot()).cpuSeconds;
  const perSecond = [...run.stdout.matchAll(/([0-9.]+) requests per second/g)].at(-1);
  return {
    masterUsPerCall: ((after - before) * 1e6) / options.calls,
    replicaUsPerCall: replicaBefore === undefined || replicaAfter === undefined ? undefined : ((replicaAfter - replicaBefore) * 1e6) / options.calls,
    callsPerSecond: perSecond === undefined ? Number.NaN : Number(perSecond[1]),
  };
}

/** The cluster side of a verdict: the master the script's slot lives on and its replica, and every node to pin. */
interface ClusterSide {
  master: { url: string; port: number };
  replica: { url: string } | undefined;
  pids: number[];
  stop(): Promise<void>;
}

/** One cluster-enabled node serving every slot, and its replica when asked for. */
async function oneNodeCluster(replicas: boolean): Promise<ClusterSide> {
  const node = await startRedis({ serverArgs: CLUSTER_NODE_ARGS });
  const replica = replicas ? await startRedis({ serverArgs: CLUSTER_NODE_ARGS }) : undefined;
  const servers = replica === undefined ? [node] : [node, replica];
  await makeCluster(node, replica);
  return { master: node, replica, pids: await Promise.all(servers.map((server) => redisPid(server.url))), stop: async () => void (await Promise.all(servers.map((server) => server.stop()))) };
}

/** The bench's cluster (bench/redis-cluster-cost.ts): three masters, with a replica each when asked for; the script's slot on one of them. */
async function threeMasterCluster(replicas: boolean): Promise<ClusterSide> {
  const cluster = await startRedisCluster({ nodeTimeoutMs: 5_000, replicasPerMaster: replicas ? 1 : 0 });
  const port = await cluster.masterOf(KEYS.reservations(TEAM_ID));
  const master = cluster.nodes.find((node) => node.port === port)!;
  const info = new Redis(master.url);
  let replica: { url: string } | undefined;
  try {
    if (replicas) {
      // Online: the first full synchronisation (a fork and a snapshot) is over before any round.
      await until(async () => /slave0:.*state=online/.test(await info.info('replication')), 'the master to have its replica online', SETUP_TIMEOUT_MS);
      const replicaPort = /slave0:.*port=(\d+)/.exec(await info.info('replication'))![1];
      replica = { url: `redis://127.0.0.1:${replicaPort}` };
    }
  } finally {
    info.disconnect();
  }
  return { master, replica, pids: await Promise.all(cluster.nodes.map((node) => redisPid(node.url))), stop: () => cluster.stop() };
}

async function runControl(topology: Topology, replicas: boolean, options: { rounds: number; calls: number; clients: number }): Promise<Verdict> {
  const stops: Array<() => Promise<void>> = [];
  const closers: Array<() => void> = [];
  try {
    const plain = await startRedis();
    stops.push(() => plain.stop());
    const plainReplica = replicas ? await startRedis() : undefined;
    if (plainReplica !== undefined) {
      stops.push(() => plainReplica.stop());
      await replicate(plainReplica, plain);
    }
    const cluster = topology === 'one node' ? await oneNodeCluster(replicas) : await threeMasterCluster(replicas);
    stops.push(() => cluster.stop());
    if (CAN_PIN) {
      const plainPids = await Promise.all([plain, ...(plainReplica === undefined ? [] : [plainReplica])].map((server) => redisPid(server.url)));
      for (const pid of [...plainPids, ...cluster.pids]) pinProcess(pid, String(cpus().length - 1));
    }
    // INFO over a connection kept open: a new connection per snapshot would weigh in the CPU per call.
    const snapshots = async (url: string | undefined): Promise<Snapshots | undefined> => {
      if (url === undefined) return undefined;
      const snapshotter = await redisSnapshotter(url);
      closers.push(snapshotter.close);
      return snapshotter;
    };
    const client = (url: string) => {
      const redis = new Redis(url);
      closers.push(() => redis.disconnect());
      return redis;
    };
    const targets = [
      { name: 'plain' as const, port: plain.port, client: client(plain.url), master: (await snapshots(plain.url))!, replica: await snapshots(plainReplica?.url) },
      { name: 'cluster' as const, port: cluster.master.port, client: client(cluster.master.url), master: (await snapshots(cluster.master.url))!, replica: await snapshots(cluster.replica?.url) },
    ];
    const script = CROSS_SLOT_SHEBANG + APPLY_SCRIPT;
    const shas = await Promise.all(targets.map(async ({ client }) => String(await client.script('LOAD', script))));
    const command = scriptArguments(shas[0]!);
    // The script must take its write path on every call (the compared reservation absent), or the
    // control would measure the conflict reply: one call by hand, checked, before any round.
    for (const { client } of targets) {
      const [name, ...args] = command.map((arg) => arg.replace('__rand_int__', 'check'));
      const reply = await client.call(name!, ...args);
      if (JSON.stringify(reply) !== '[1]') throw new Error(`the ledger script did not apply its writes: ${JSON.stringify(reply)}`);
    }
    // A warm-up round each (not recorded): the allocator and the index reach their steady size.
    for (const target of targets) await measure(target.master, target.replica, target.port, command, { ...options, calls: Math.min(options.calls, 50_000) });
    const pairs: Verdict['pairs'] = [];
    for (let round = 0; round < options.rounds; round += 1) {
      const order = round % 2 === 0 ? targets : [...targets].reverse();
      const measured = new Map<string, Round>();
      for (const target of order) measured.set(target.name, await measure(target.master, target.replica, target.port, command, options));
      const plainRound = measured.get('plain')!;
      const clusterRound = measured.get('cluster')!;
      pairs.push({ plain: plainRound, cluster: clusterRound, ratio: clusterRound.masterUsPerCall / plainRound.masterUsPerCall });
    }
    return { topology, replicas, pairs, medianRatio: median(pairs.map((pair) => pair.ratio)) };
  } finally {
    for (const close of closers) close();
    for (const stop of stops.reverse()) await stop();
  }
}

function formatVerdicts(verdicts: readonly Verdict[], options: { rounds: number; calls: number; clients: number }): string {
  const fixed = (value: number | undefined) => (value === undefined ? 'n/a' : value.toFixed(1));
  const lines = [
    `Redis Cluster mode against one plain Redis, the gateway's ledger script driven by redis-benchmark ` +
      `(${options.clients} clients, ${options.calls.toLocaleString('en-US')} calls a round, ${options.rounds} alternating pairs` +
      `${CAN_PIN ? ', Redis pinned to the last core and redis-benchmark to the first' : ', not pinned (no taskset or one core)'}):`,
    '',
    '| cluster | replicas | pair | plain: master µs/call | cluster: master µs/call | cluster ÷ plain | plain: replica µs/call | cluster: replica µs/call | calls/s plain / cluster |',
    '|---|---|---:|---:|---:|---:|---:|---:|---|',
  ];
  for (const verdict of verdicts) {
    verdict.pairs.forEach((pair, index) => {
      lines.push(
        `| ${verdict.topology} | ${verdict.replicas ? 'one each' : 'none'} | ${index + 1} | ${fixed(pair.plain.masterUsPerCall)} | ${fixed(pair.cluster.masterUsPerCall)} | ${pair.ratio.toFixed(3)}× | ` +
          `${fixed(pair.plain.replicaUsPerCall)} | ${fixed(pair.cluster.replicaUsPerCall)} | ${Math.round(pair.plain.callsPerSecond)} / ${Math.round(pair.cluster.callsPerSecond)} |`,
      );
    });
  }
  lines.push('');
  for (const verdict of verdicts) lines.push(`- ${verdict.topology === 'one node' ? 'One cluster node' : 'Three masters'}, ${verdict.replicas ? 'with a replica each' : 'without replicas'}: the cluster's master spends **${verdict.medianRatio.toFixed(3)}×** the plain Redis's CPU per call (median of the pairs).`);
  return lines.join('\n');
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { rounds: { type: 'string', default: '6' }, calls: { type: 'string', default: '200000' }, clients: { type: 'string', default: '50' } } });
  const options = { rounds: Number(values.rounds), calls: Number(values.calls), clients: Number(values.clients) };
  for (const [name, value] of Object.entries(options)) if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a positive integer`);
  if (spawnSync('redis-benchmark', ['--version']).error !== undefined) throw new Error('redis-benchmark is not on PATH (it comes with redis-server: apt-get install redis-server)');
  const verdicts: Verdict[] = [];
  for (const topology of TOPOLOGIES) for (const replicas of [false, true]) verdicts.push(await runControl(topology, replicas, options));
  console.log(formatVerdicts(verdicts, options));
}

await main();
