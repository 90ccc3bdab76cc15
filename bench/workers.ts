// `serve --workers N`: one worker against two, on cache hits and cache misses (→ anvil, block
// verification full). Every gateway is the built CLI on one SQLite file with metering on; wrk is
// the load generator. Reports requests/s and the group's CPU per request (the primary's and every
// worker's user + system time from /proc), and the ratio of CPU per request with two workers to
// one: with the primary out of the request path it should stay within 1.10.
//
// Pinning (taskset): wrk runs on the last core and a gateway's processes on the others when there
// are enough cores for both; on a 2-core host one worker is pinned apart from wrk, two workers
// cannot be, so the 1-worker group is also measured unpinned for a like-for-like ratio.
//
// The groups run side by side; each scenario measures them in alternating rounds (1, 2, 1, 2, …)
// and reports medians, so a burst of load from something else on the machine spoils a round or
// two of each, not one side.
//
// With `--store redis` the groups share a local redis-server instead of the SQLite file (each
// worker then batches its ledger operations like a replica on a host of its own).
//
// Standalone:  npm run build && node --import tsx bench/workers.ts [--rounds 8] [--seconds 2] [--only "cache miss"] [--store redis]
// From bench/run.ts: `npm run bench -- --only "workers"`.

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { stringify as toYaml } from 'yaml';
import { issueKey } from '../src/admin/key-issuer.js';
import { seedAnvil } from '../src/devnet/anvil-seed.js';
import { startAnvil } from '../src/devnet/anvil.js';
import { openStore } from '../src/store/index.js';
import { startRedis, type RedisServer } from '../test/helpers/redis.js';
import { cpuSeconds } from './proc-stats.js';
import { findWrk, prepareWrk, runWrk } from './wrk.js';
import { CLI, ROOT, freePort, gatewayCommand } from './local-processes.js';

export const WORKERS_SCENARIO = 'workers: 1 vs 2 (serve --workers)';

const CONNECTIONS = 50;

export interface WorkersRow {
  scenario: 'cache hit' | 'cache miss';
  group: string;
  workers: number;
  pinned: boolean;
  requestsPerSecond: number;
  /** The group's CPU (primary + workers) per request, in microseconds. */
  cpuUsPerRequest: number;
  /** Cores the group kept busy. */
  coresBusy: number;
  /** The primary's share of the group's CPU (it hands connections out and serves no request). */
  primaryShare: number;
  /** Cores wrk kept busy. */
  loadgenCores: number;
  errors: number;
}

interface Group {
  name: string;
  workers: number;
  pinned: boolean;
  origin: string;
  child: ChildProcess;
  pids: number[];
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

/** `taskset -c <cores>` before a command when pinning, else the command itself. */
function pinned(cores: string | undefined, command: string, args: string[]): [string, string[]] {
  return cores === undefined ? [command, args] : ['taskset', ['-c', cores, command, ...args]];
}

type BenchStore = { driver: 'sqlite'; path: string } | { driver: 'redis'; url: string; keyPrefix: string };

async function startGroup(options: { name: string; workers: number; cores: string | undefined; dir: string; store: BenchStore; anvilUrl: string; cacheMaxBytes: number; secret: string }): Promise<Group> {
  const port = await freePort();
  const configFile = join(options.dir, `${options.name}.yaml`);
  writeFileSync(
    configFile,
    toYaml({
      server: { host: '127.0.0.1', port, workers: options.workers },
      admin: { host: '127.0.0.1', port: 0 },
      store: options.store,
      cache: { maxBytes: options.cacheMaxBytes },
      networks: [{ id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], upstreams: [{ id: 'anvil', url: options.anvilUrl, connections: 64 }] }],
    }),
  );
  // Workers inherit the primary's CPU affinity.
  const gateway = gatewayCommand(configFile, { logLevel: 'warn' });
  const [command, args] = pinned(options.cores, process.execPath, gateway.args);
  const child = spawn(command, args, { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'], env: gateway.env });
  child.once('exit', (code) => {
    if (code !== null && code !== 0) console.error(`${options.name} exited with ${code}`);
  });
  const origin = `http://127.0.0.1:${port}`;
  // Started once it answers (with `warn` there is no start line to read).
  for (let tries = 0; ; tries += 1) {
    try {
      const response = await fetch(`${origin}/eth/v3/${options.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}' });
      if (response.status === 200) break;
    } catch {
      // not listening yet
    }
    if (tries > 1200 || child.exitCode !== null) throw new Error(`${options.name} did not start`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  // The workers are the primary's child processes (Linux: /proc/<pid>/task/<pid>/children).
  const children = readFileSync(`/proc/${child.pid}/task/${child.pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  if (children.length !== (options.workers > 1 ? options.workers : 0)) throw new Error(`${options.name}: expected ${options.workers} workers, found ${children.length} child processes`);
  return { name: options.name, workers: options.workers, pinned: options.cores !== undefined, origin, child, pids: [child.pid!, ...children] };
}

function groupCpu(group: Group): number {
  return group.pids.reduce((sum, pid) => sum + (cpuSeconds(pid) ?? 0), 0);
}

export async function runWorkersBench(options: { rounds: number; seconds: number; only?: string; store?: 'sqlite' | 'redis' }): Promise<WorkersRow[]> {
  if (findWrk() === undefined) throw new Error('the workers bench needs wrk (apt-get install wrk)');
  const cores = availableParallelism();
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-workers-bench-'));
  const anvil = await startAnvil();
  const groups: Group[] = [];
  let redis: RedisServer | undefined;
  try {
    const seed = await seedAnvil(anvil.url, { blocks: 4, txPerBlock: 20 });
    const hash = seed.blocksWithTransactions.at(-1)!;
    let store: BenchStore;
    let secret: string;
    if (options.store === 'redis') {
      redis = await startRedis();
      store = { driver: 'redis', url: redis.url, keyPrefix: 'workers-bench:' };
      const opened = await openStore({ ...store, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false });
      const team = await opened.createTeam({ name: 'bench', dailyCredits: 1_000_000_000_000 });
      secret = (await issueKey(opened, { teamId: team.id })).secret;
      await opened.close();
    } else {
      const dbFile = join(dir, 'tollgate.db');
      store = { driver: 'sqlite', path: dbFile };
      const cli = (...args: string[]) => execFileSync(process.execPath, [CLI, ...args, '--db', dbFile], { cwd: ROOT, encoding: 'utf8' });
      cli('teams', 'create', 'bench', '--daily-credits', '1000000000000');
      secret = (JSON.parse(cli('keys', 'create', '--team', 'bench')) as { secret: string }).secret;
    }
    const wrk = prepareWrk(dir);
    const body = wrk.bodyFile(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash, false] }));
    // wrk on the last core; a group on the cores before it, when it fits beside wrk.
    const loadgenCore = String(cores - 1);
    const variants = [
      { name: '1 worker', workers: 1, cores: undefined },
      { name: '2 workers', workers: 2, cores: undefined },
      ...[1, 2].filter((workers) => cores > workers).map((workers) => ({ name: `${workers} worker${workers > 1 ? 's' : ''}, pinned apart from wrk`, workers, cores: `0-${workers - 1}` })),
    ];
    const rows: WorkersRow[] = [];
    const scenarios = ([['cache hit', 256 * 1024 * 1024], ['cache miss', 0]] as const).filter(([scenario]) => options.only === undefined || scenario.includes(options.only));
    for (const [scenario, cacheMaxBytes] of scenarios) {
      const started: Group[] = [];
      for (const variant of variants) {
        const group = await startGroup({ name: `${scenario.replace(' ', '-')}-${started.length}`, workers: variant.workers, cores: variant.cores, dir, store, anvilUrl: anvil.url, cacheMaxBytes, secret });
        group.name = variant.name;
        groups.push(group);
        started.push(group);
      }
      const samples = new Map<Group, Array<{ rps: number; cpuUs: number; cores: number; primaryShare: number; loadgen: number; errors: number }>>();
      const round = async (group: Group, seconds: number) => {
        const before = groupCpu(group);
        const primaryBefore = cpuSeconds(group.pids[0]) ?? 0;
        const result = await runWrk({ script: wrk.script, bodyFile: body, url: `${group.origin}/eth/v3/${secret}`, connections: CONNECTIONS, threads: 1, seconds, timeoutS: 10, pin: group.pinned ? loadgenCore : undefined });
        const cpu = groupCpu(group) - before;
        const primaryShare = group.workers > 1 ? ((cpuSeconds(group.pids[0]) ?? 0) - primaryBefore) / cpu : 0;
        return { rps: result.requests / result.seconds, cpuUs: (cpu / result.requests) * 1e6, cores: cpu / result.seconds, primaryShare, loadgen: result.cpuSeconds / result.seconds, errors: result.errors + result.non2xx };
      };
      // Warm-up: V8 optimises the hot paths of every process first.
      for (const group of started) await round(group, 3);
      for (let index = 0; index < options.rounds; index += 1) {
        const order = index % 2 === 0 ? started : [...started].reverse();
        for (const group of order) {
          const list = samples.get(group) ?? [];
          list.push(await round(group, options.seconds));
          samples.set(group, list);
        }
      }
      for (const group of started) {
        const list = samples.get(group)!;
        rows.push({
          scenario,
          group: group.name,
          workers: group.workers,
          pinned: group.pinned,
          requestsPerSecond: median(list.map((sample) => sample.rps)),
          cpuUsPerRequest: median(list.map((sample) => sample.cpuUs)),
          coresBusy: median(list.map((sample) => sample.cores)),
          primaryShare: median(list.map((sample) => sample.primaryShare)),
          loadgenCores: median(list.map((sample) => sample.loadgen)),
          errors: list.reduce((sum, sample) => sum + sample.errors, 0),
        });
        group.child.kill('SIGTERM');
      }
    }
    return rows;
  } finally {
    for (const group of groups) if (group.child.exitCode === null) group.child.kill('SIGKILL');
    await anvil.stop();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function formatWorkersBench(rows: readonly WorkersRow[], store: 'sqlite' | 'redis' = 'sqlite'): string {
  const lines = [
    `${WORKERS_SCENARIO} — ${availableParallelism()} cores, ${store === 'redis' ? 'a local redis-server' : 'one SQLite file'}, wrk ${CONNECTIONS} connections, 1 thread; medians of alternating rounds`,
    '',
    '| scenario | gateway | req/s | CPU µs/req (primary + workers) | of it the primary | cores busy | wrk cores | errors |',
    '|---|---|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (row) =>
        `| ${row.scenario} | ${row.group} | ${Math.round(row.requestsPerSecond)} | ${row.cpuUsPerRequest.toFixed(1)} | ${row.workers > 1 ? `${(row.primaryShare * 100).toFixed(0)}%` : '—'} | ${row.coresBusy.toFixed(2)} | ${row.loadgenCores.toFixed(2)} | ${row.errors} |`,
    ),
    '',
  ];
  for (const scenario of ['cache hit', 'cache miss'] as const) {
    for (const pinnedApart of [false, true]) {
      const one = rows.find((row) => row.scenario === scenario && row.workers === 1 && row.pinned === pinnedApart);
      const two = rows.find((row) => row.scenario === scenario && row.workers === 2 && row.pinned === pinnedApart);
      if (one === undefined || two === undefined) continue;
      const ratio = two.cpuUsPerRequest / one.cpuUsPerRequest;
      lines.push(
        `${scenario}${pinnedApart ? ', pinned' : ''}: CPU per request 2 workers / 1 worker = ${ratio.toFixed(3)} (target ≤ 1.10: ${ratio <= 1.1 ? 'met' : 'NOT met'}); req/s ×${(two.requestsPerSecond / one.requestsPerSecond).toFixed(2)}`,
      );
    }
  }
  return lines.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { rounds: { type: 'string', default: '8' }, seconds: { type: 'string', default: '2' }, only: { type: 'string' }, store: { type: 'string', default: 'sqlite' } } });
  if (values.store !== 'sqlite' && values.store !== 'redis') throw new Error('--store is sqlite or redis');
  runWorkersBench({ rounds: Number(values.rounds), seconds: Number(values.seconds), only: values.only, store: values.store }).then(
    (rows) => console.log(formatWorkersBench(rows, values.store === 'redis' ? 'redis' : 'sqlite')),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
