// `npm run bench`: the gateway against the ceilings of a bare Node server and a bare Node proxy,
// measured in one invocation on one machine, written to docs/benchmarks.md as ratios.
//
// Processes: anvil (seeded), the sample DAS server, the gateway (the built CLI, `node
// dist/cli.js serve`, SQLite store, metering on) and the two references each run on their own,
// so every server's CPU and RSS are its own; autocannon runs here, in the orchestrator. Every
// child is killed at the end, on error and on SIGINT/SIGTERM.
//
// First every server process is warmed up under full load, so that V8 has optimised its hot
// paths (a gateway has more code to compile than a bare server). Then each scenario measures the
// reference and the gateway in alternating one-second rounds (ref-gw, gw-ref, ...), one pair per
// second of the duration. Ratios are the median over the pairs: the two rounds of a pair are
// seconds apart, so a burst of load from something else on the machine hits both or spoils a few
// pairs, not the result. Besides requests/s and latency (every response, timed to the
// microsecond), the server's own CPU time per request (from /proc) is reported, and the load
// generator's own CPU use, which shows when the client rather than the server sets the pace.
//
//   npm run bench                      # 50 connections, 20 pairs of 1 s rounds per scenario (+2 s warm-up)
//   npm run bench -- --quick           # 3 pairs, 5 s warm-up
//   BENCH_DURATION=20 BENCH_CONNECTIONS=100 npm run bench
//   npm run bench -- --profile         # also write a .cpuprofile per gateway process (bench/profile-summary.ts)
//   npm run bench -- --quick --only "hit, hydrated=false"   # one scenario, printed, not written
//   npm run bench -- --only "hydrated=false$|limit 1000"    # --only is a regular expression
//   npm run bench -- --runs 3          # three full runs in one invocation, all reported, with their spread
//   BENCH_GATEWAY_FLAGS="--initial-old-space-size=128 --expose-gc" npm run bench -- --only ...
//                                      # the gateways' Node flags instead of the `tollgate` command's
//
// The load comes from `wrk` when it is installed (bench/wrk.ts; `apt-get install wrk`), else from
// autocannon in this process; `BENCH_LOADGEN=autocannon` forces the fallback.

import autocannon from 'autocannon';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { cpus, arch, platform, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { request } from 'undici';
import { stringify as toYaml } from 'yaml';
import { seedAnvil } from '../src/devnet/anvil-seed.js';
import { startAnvil, type AnvilNode } from '../src/devnet/anvil.js';
import { redisCost, redisSnapshot, type RedisCost } from './redis-cost.js';
import { cpuTimes, mallocHeapBytes, rssBytes } from './proc-stats.js';
import { findWrk, prepareWrk, runWrk } from './wrk.js';
import { formatWsFanout, runWsFanout, WS_FANOUT_SCENARIO } from './ws-fanout.js';
import { formatWorkersBench, runWorkersBench, WORKERS_SCENARIO } from './workers.js';
import { formatLogsSplit, LOGS_SPLIT_SCENARIO, runLogsSplit } from './logs-split.js';
import { CACHE_SCENARIO, formatCacheScenarios, runCacheScenarios } from './cache-scenarios.js';
import { CLUSTER_PAIRS, formatRedisClusterCost, REDIS_CLUSTER_SCENARIO, runRedisClusterCost } from './redis-cluster-cost.js';
import { DEFAULT_ROTATIONS, formatObservability, OBSERVABILITY_SCENARIO, runObservability } from './observability.js';
import { BUDGETS_SCENARIO, formatBudgets, runBudgets } from './budgets.js';
import { GATEWAY_ENVIRONMENT_ASSIGNMENTS, GATEWAY_NODE_FLAGS } from '../src/startup/node-flags.js';
import { CLI, GATEWAY_FLAGS, ROOT, gatewayCommand } from './local-processes.js';

const DOC = join(ROOT, 'docs', 'benchmarks.md');
const START_MARKER = '<!-- bench:start -->';
const END_MARKER = '<!-- bench:end -->';
const MIB = 1024 * 1024;
/** The gateway's default `cache.maxBytes`; the RSS target is this plus 150 MiB. */
const CACHE_MAX_BYTES = 256 * MIB;
const RSS_HEADROOM_BYTES = 150 * MIB;
const BATCH_ITEMS = 50;
const TRANSACTIONS_PER_BLOCK = 20;

// ---------------------------------------------------------------------------------------------
// Options

const { values: flags } = parseArgs({
  options: {
    quick: { type: 'boolean', default: false },
    profile: { type: 'boolean', default: false },
    /** Only the scenarios whose name contains this text; nothing is written to the doc. */
    only: { type: 'string' },
    /** Full runs of every scenario in one invocation (servers started and warmed up once). */
    runs: { type: 'string', default: '1' },
  },
  allowPositionals: false,
});

function positiveEnv(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return undefined;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number, got "${raw}"`);
  return value;
}

const DURATION_S = positiveEnv('BENCH_DURATION') ?? (flags.quick ? 3 : 20);
const RUNS = Number(flags.runs);
if (!Number.isInteger(RUNS) || RUNS < 1) throw new Error(`--runs must be a positive integer, got "${flags.runs}"`);
/** `wrk` when installed (the load generator then runs outside this process), else autocannon. */
const WRK = findWrk();
const LOADGEN = WRK === undefined ? 'autocannon' : 'wrk';
const WRK_THREADS = Math.round(positiveEnv('BENCH_WRK_THREADS') ?? 1);
const REDIS_SCENARIO = 'cache hit, hydrated=false, Redis store';
const BATCH_SCENARIO = `batch of ${BATCH_ITEMS} cache hits`;
/** `getAssetsByGroup` page sizes measured: ~167 KiB and ~1.6 MiB answers. */
const ASSET_LIMITS = [100, 1000] as const;
const assetsScenario = (limit: number): string => `getAssetsByGroup, limit ${limit}`;
/** The references of the `getAssetsByGroup` rows (bench/reference-stream-proxy.ts, without and with `--validate`). */
const STREAM_PROXY = 'node:http + undici streaming proxy';
const VALIDATING_PROXY = 'the same proxy, validating each answer first';
const HEADERS_SCENARIO = 'cache hit, hydrated=false, reference sends the same headers';
/**
 * The extra row: the first scenario on the same gateway switched to log level warn (no request
 * lines) through its admin API for its rounds, and back to info for the others.
 */
const WARN_SCENARIO = 'cache hit, hydrated=false, log level warn';
/**
 * Informational: the same at warn on a gateway of its own that serves nothing but this hit (how
 * the line was measured before: that difference also holds what the cache gateway's history of
 * large answers, misses and batches costs a hit).
 */
const FRESH_WARN_SCENARIO = 'cache hit, hydrated=false, log level warn, on a gateway that served only this hit';
/** The admin token of the bench's gateways (their admin listeners are on loopback). */
const BENCH_ADMIN_TOKEN = 'bench-admin-token-0123456789abcdef';
/** A browser key: origin and method lists, the allowed Origin sent; its reference is the plain key on the same gateway. */
const SETTINGS_SCENARIO = 'cache hit, hydrated=false, key with origin and method lists';
const SETTINGS_ORIGIN = 'https://app.example.com';

function selected(scenario: string): boolean {
  return flags.only === undefined || new RegExp(flags.only).test(scenario);
}
const WARMUP_S = 2;
/**
 * Before any scenario, every server process is loaded for this long (the bare ones for half of
 * it): a production gateway runs warm. Measured with `node --trace-opt`, V8 keeps optimising the
 * gateway's functions for ~15 s of full load, the bare server's (much less code) for a few
 * seconds; until then compiler threads take CPU from the measurement.
 */
const JIT_WARMUP_S = flags.quick ? 5 : 15;
/** Paired comparisons run in rounds of this length, one pair per second of the duration. */
const ROUND_S = 1;
const PAIRS = Math.max(1, Math.round(DURATION_S / ROUND_S));
const CONNECTIONS = Math.round(positiveEnv('BENCH_CONNECTIONS') ?? 50);

function commandLine(): string {
  const env = ['BENCH_DURATION', 'BENCH_CONNECTIONS', 'BENCH_LOADGEN', 'BENCH_WRK_THREADS']
    .filter((name) => process.env[name] !== undefined && process.env[name] !== '')
    .map((name) => `${name}=${process.env[name]}`);
  const args = process.argv.slice(2);
  return [...env, 'npm run bench', ...(args.length > 0 ? ['--', ...args] : [])].join(' ');
}

// ---------------------------------------------------------------------------------------------
// Child processes: tracked, killed on every way out

const children = new Set<ChildProcess>();
let anvil: AnvilNode | undefined;
let workDir: string | undefined;

function killChildren(): void {
  for (const child of children) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
}

process.on('exit', killChildren); // synchronous: runs on process.exit and normal exit alike
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    process.stderr.write(`\nbench: ${signal}, stopping every child process\n`);
    killChildren();
    removeWorkDir();
    void anvil?.stop();
    process.exit(130);
  });
}

function track(child: ChildProcess): ChildProcess {
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

async function stopChild(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (exited(child)) return;
  const done = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await done;
  clearTimeout(timer);
}

/** Runs `node --import tsx <script>` and resolves with the JSON object it prints on its first stdout line. */
async function startTsProcess<T>(script: string, args: string[]): Promise<{ child: ChildProcess; info: T }> {
  const child = track(
    spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bench', script), ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] }),
  );
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-4_000);
  });
  const info = await new Promise<T>((resolve, reject) => {
    let stdout = '';
    const timer = setTimeout(() => reject(new Error(`${script} did not start within 30 s\n${stderr}`)), 30_000);
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      const newline = stdout.indexOf('\n');
      if (newline === -1) return;
      clearTimeout(timer);
      try {
        resolve(JSON.parse(stdout.slice(0, newline)) as T);
      } catch (error) {
        reject(error);
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${script} exited (code ${code}, signal ${signal}) before listening\n${stderr}`));
    });
  });
  return { child, info };
}

function runCli(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = track(spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] }));
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve(stdout) : reject(new Error(`tollgate ${args.join(' ')}: exit ${code}\n${stderr}`))));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

// ---------------------------------------------------------------------------------------------
// JSON-RPC helpers

const JSON_HEADERS = { 'content-type': 'application/json' };

async function post(url: string, body: string): Promise<{ status: number; headers: Record<string, unknown>; json: { result?: unknown; error?: unknown } }> {
  const res = await request(url, { method: 'POST', headers: JSON_HEADERS, body, headersTimeout: 10_000, bodyTimeout: 10_000 });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, json: JSON.parse(text) as { result?: unknown; error?: unknown } };
}

function blockBody(hash: string, hydrated: boolean, id = 1): string {
  return JSON.stringify({ jsonrpc: '2.0', id, method: 'eth_getBlockByHash', params: [hash, hydrated] });
}

function batchBody(hash: string): string {
  return JSON.stringify(Array.from({ length: BATCH_ITEMS }, (_, index) => JSON.parse(blockBody(hash, false, index + 1)) as unknown));
}

function assetsBody(groupValue: string, limit: number): string {
  return JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'getAssetsByGroup', params: { groupKey: 'collection', groupValue, limit, page: 1 } });
}

// ---------------------------------------------------------------------------------------------
// The gateway under test

interface GatewayProcess {
  child: ChildProcess;
  /** `http://127.0.0.1:port` */
  origin: string;
  /** The admin listener's origin (token {@link BENCH_ADMIN_TOKEN}). */
  adminOrigin: string;
  logFile: string;
  stop(): Promise<void>;
}

/** Verification settings (docs/verification.md) whose cache misses are measured side by side. */
const VERIFICATIONS = ['full', 'header', 'off'] as const;
type Verification = (typeof VERIFICATIONS)[number];
const verificationNetwork = (verification: Verification): string => (verification === 'full' ? 'eth' : `eth-${verification}`);
const missScenario = (verification: Verification): string => `cache miss, verification ${verification} → anvil`;
/** The same miss for the hydrated block: upstream work is then equal for every setting and the proxy. */
const HYDRATED_MISS_SCENARIO = 'cache miss, hydrated=true, verification full → anvil';

interface GatewaySetup {
  dbFile: string;
  anvilUrl: string;
  dasUrl: string;
  secret: string;
}

async function startGatewayProcess(
  name: string,
  setup: GatewaySetup,
  options: { cacheMaxBytes: number; logLevel: 'warn' | 'info'; profileDir?: string; store?: Record<string, unknown> },
): Promise<GatewayProcess> {
  const dir = workDir!;
  const port = await freePort();
  const adminPort = await freePort();
  const configFile = join(dir, `${name}.yaml`);
  const config = {
    server: { host: '127.0.0.1', port },
    admin: { host: '127.0.0.1', port: adminPort, token: BENCH_ADMIN_TOKEN },
    store: options.store ?? { driver: 'sqlite', path: setup.dbFile },
    cache: { maxBytes: options.cacheMaxBytes },
    networks: [
      // The same anvil as three networks, one per verification setting: the cache-miss rows
      // compare them side by side (`eth` has the default, `full`).
      ...VERIFICATIONS.map((verification) => ({
        id: verificationNetwork(verification),
        kind: 'evm',
        chainId: 31337,
        baseUrls: [`*/${verificationNetwork(verification)}`],
        verification,
        upstreams: [{ id: 'anvil', url: setup.anvilUrl }],
      })),
      { id: 'das', kind: 'asset', baseUrls: ['*/das'], upstreams: [{ id: 'sample-das', url: setup.dasUrl }] },
    ],
  };
  writeFileSync(configFile, toYaml(config));
  const logFile = join(dir, `${name}.log`);
  const logFd = openSync(logFile, 'a');
  const profileFlags = options.profileDir === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', options.profileDir, '--cpu-prof-name', `${name}.cpuprofile`];
  const command = gatewayCommand(configFile, { logLevel: options.logLevel, extraFlags: profileFlags });
  const child = track(
    spawn(process.execPath, command.args, { cwd: ROOT, stdio: ['ignore', logFd, logFd], env: command.env }),
  );
  closeSync(logFd);
  const origin = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (exited(child)) throw new Error(`gateway ${name} exited during start-up:\n${readFileSync(logFile, 'utf8').slice(-4_000)}`);
    try {
      const res = await post(`${origin}/eth/v3/${setup.secret}`, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] }));
      if (res.status === 200 && res.json.result === '0x7a69') break;
      throw new Error(`eth_chainId answered ${res.status} ${JSON.stringify(res.json)}`);
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`gateway ${name} not ready within 20 s: ${(error as Error).message}`, { cause: error });
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  return { child, origin, adminOrigin: `http://127.0.0.1:${adminPort}`, logFile, stop: () => stopChild(child) };
}

/**
 * Where a gateway's memory sits, from its `/metrics` (prom-client's V8 heap spaces and external
 * memory, the gateway's own buffer and cache gauges) and /proc: the RSS check says how much of it
 * the V8 heap holds, young and old, how much the buffers, and how much the C allocator's heap
 * keeps resident.
 */
async function memoryBreakdown(gateway: GatewayProcess): Promise<string> {
  const response = await request(`${gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${BENCH_ADMIN_TOKEN}` } });
  const text = await response.body.text();
  const value = (series: string): number => {
    const line = text.split('\n').find((candidate) => candidate.startsWith(`${series} `));
    return line === undefined ? NaN : Number(line.slice(series.length + 1));
  };
  const space = (name: string): number => value(`tollgate_nodejs_heap_space_size_total_bytes{space="${name}"}`);
  const parts: Array<[string, number]> = [
    ['young generation', space('new') + space('new_large_object')],
    ['old generation', space('old') + space('large_object')],
    ['code', space('code') + space('code_large_object')],
    ['external', value('tollgate_nodejs_external_memory_bytes')],
    ['of which buffers', value('tollgate_array_buffers_bytes')],
    ['cache', value('tollgate_cache_bytes')],
    ['answer buffer pool (idle)', value('tollgate_answer_buffers_idle_bytes')],
    ['C allocator\'s main heap', mallocHeapBytes(gateway.child.pid) ?? NaN],
  ];
  return `RSS ${mib(rssBytes(gateway.child.pid))} MiB: ${parts.map(([name, bytes]) => `${name} ${Number.isNaN(bytes) ? 'n/a' : mib(bytes)}`).join(', ')}`;
}

/** Sets a running gateway's log level through its admin API (`PUT /v1/log-level`). */
async function setLogLevel(gateway: GatewayProcess, level: 'info' | 'warn'): Promise<void> {
  const response = await request(`${gateway.adminOrigin}/v1/log-level`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${BENCH_ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ level }),
  });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`PUT /v1/log-level ${level}: HTTP ${response.statusCode} ${text}`);
}

// ---------------------------------------------------------------------------------------------
// Load

/** What autocannon returns with `skipAggregateResult` (one run, histograms still encoded). */
interface RawRun {
  totalCompletedRequests: number;
  duration: number;
  errors: number;
  non2xx: number;
}

interface Target {
  name: string;
  url: string;
  body: string;
  pid: number | undefined;
  /** Request headers besides Content-Type. */
  headers?: Record<string, string>;
  /** Run before each of its rounds, outside the measurement (the log-level switch of the warn row). */
  before?: () => Promise<void>;
}

interface Measured {
  scenario: string;
  target: string;
  requestsPerSecond: number;
  /** Latency percentiles over every measured request of this target, in milliseconds. */
  p50: number;
  p99: number;
  /** Server CPU (user + system) per request, in microseconds. */
  cpuUsPerRequest?: number;
  /** The system (kernel) part of {@link cpuUsPerRequest}. */
  systemCpuUsPerRequest?: number;
  errors: number;
  rss?: number;
  /** The largest RSS sampled (every 100 ms) while this target was under load. */
  peakRss?: number;
  /** The highest share of a core the load generator used in any round of this target. */
  clientCpu: number;
  /** The reference row this one is compared with. */
  reference?: Measured;
  /**
   * Per-pair ratios to the reference when both were measured in alternating rounds, and this
   * target's CPU per request in each of its rounds (µs, when known).
   */
  pairs?: { rps: number[]; p99: number[]; cpuUs?: number[] };
}

/** One measured round of one target. */
interface Round {
  requests: number;
  seconds: number;
  errors: number;
  /** Latency of every 2xx response, in milliseconds (autocannon's own histogram keeps whole ms). */
  latencies: Float64Array;
  /** Server CPU seconds (user + system) over the round, if /proc could tell. */
  cpu: number | undefined;
  /** The system (kernel) part of {@link cpu}. */
  systemCpu: number | undefined;
  /** Share of one core the load generator (wrk, or this process) used over the round. */
  clientCpu: number;
  /** The largest RSS of the server sampled during the round. */
  peakRss: number | undefined;
}

let wrkFiles: ReturnType<typeof prepareWrk> | undefined;

/** A round's server CPU from the process's times before and after it. */
function cpuBetween(before: ReturnType<typeof cpuTimes>, after: ReturnType<typeof cpuTimes>): Pick<Round, 'cpu' | 'systemCpu'> {
  if (before === undefined || after === undefined) return { cpu: undefined, systemCpu: undefined };
  return { cpu: after.user + after.system - (before.user + before.system), systemCpu: after.system - before.system };
}

async function load(target: Target, seconds: number): Promise<Round> {
  await target.before?.();
  let peakRss = rssBytes(target.pid);
  const sampler = setInterval(() => {
    const rss = rssBytes(target.pid);
    if (rss !== undefined && (peakRss === undefined || rss > peakRss)) peakRss = rss;
  }, 100);
  try {
    const round = WRK === undefined ? await loadWithAutocannon(target, seconds) : await loadWithWrk(target, seconds);
    return { ...round, peakRss };
  } finally {
    clearInterval(sampler);
  }
}

async function loadWithWrk(target: Target, seconds: number): Promise<Omit<Round, 'peakRss'>> {
  wrkFiles ??= prepareWrk(workDir!);
  const before = cpuTimes(target.pid);
  const run = await runWrk({ script: wrkFiles.script, bodyFile: wrkFiles.bodyFile(target.body), url: target.url, headers: target.headers, connections: CONNECTIONS, threads: WRK_THREADS, seconds, timeoutS: 10 });
  const after = cpuTimes(target.pid);
  return {
    requests: run.requests,
    seconds: run.seconds,
    errors: run.errors + run.non2xx,
    latencies: run.quantilesMs,
    ...cpuBetween(before, after),
    clientCpu: run.cpuSeconds / run.seconds,
  };
}

async function loadWithAutocannon(target: Target, seconds: number): Promise<Omit<Round, 'peakRss'>> {
  const latencies: number[] = [];
  const before = cpuTimes(target.pid);
  const clientBefore = process.cpuUsage();
  const startedAt = performance.now();
  const instance = autocannon({
    url: target.url,
    method: 'POST',
    headers: target.headers === undefined ? JSON_HEADERS : { ...JSON_HEADERS, ...target.headers },
    body: target.body,
    connections: CONNECTIONS,
    pipelining: 1,
    duration: seconds,
    skipAggregateResult: true,
  } as autocannon.Options) as unknown as autocannon.Instance & PromiseLike<RawRun>;
  instance.on('response', (_client: unknown, statusCode: number, _bytes: number, responseTimeMs: number) => {
    if (statusCode >= 200 && statusCode < 300) latencies.push(responseTimeMs);
  });
  const run = await instance;
  const after = cpuTimes(target.pid);
  const client = process.cpuUsage(clientBefore);
  return {
    requests: run.totalCompletedRequests,
    seconds: run.duration,
    errors: run.errors + run.non2xx,
    latencies: Float64Array.from(latencies),
    ...cpuBetween(before, after),
    clientCpu: (client.user + client.system) / 1000 / (performance.now() - startedAt),
  };
}

function percentile(sorted: Float64Array, fraction: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(fraction * sorted.length))]!;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

const rpsOf = (round: Round): number => round.requests / round.seconds;
const p99Of = (round: Round): number => percentile(round.latencies.slice().sort(), 0.99);

/** Every round of one target summed up into one row. */
function summarise(scenario: string, target: Target, rounds: readonly Round[], reference?: Measured): Measured {
  const requests = rounds.reduce((sum, round) => sum + round.requests, 0);
  const seconds = rounds.reduce((sum, round) => sum + round.seconds, 0);
  const all = new Float64Array(rounds.reduce((sum, round) => sum + round.latencies.length, 0));
  let offset = 0;
  for (const round of rounds) {
    all.set(round.latencies, offset);
    offset += round.latencies.length;
  }
  all.sort();
  const cpuKnown = rounds.every((round) => round.cpu !== undefined);
  const cpu = rounds.reduce((sum, round) => sum + (round.cpu ?? 0), 0);
  const systemCpu = rounds.reduce((sum, round) => sum + (round.systemCpu ?? 0), 0);
  return {
    scenario,
    target: target.name,
    requestsPerSecond: requests / seconds,
    p50: percentile(all, 0.5),
    p99: percentile(all, 0.99),
    cpuUsPerRequest: cpuKnown && requests > 0 ? (cpu / requests) * 1e6 : undefined,
    systemCpuUsPerRequest: cpuKnown && requests > 0 ? (systemCpu / requests) * 1e6 : undefined,
    errors: rounds.reduce((sum, round) => sum + round.errors, 0),
    clientCpu: Math.max(...rounds.map((round) => round.clientCpu)),
    rss: rssBytes(target.pid),
    peakRss: Math.max(...rounds.map((round) => round.peakRss ?? 0)) || undefined,
    reference,
  };
}

/** The median over the pairs of rounds of `a`'s CPU per request minus `b`'s (µs), when both ran in the same pairs. */
function medianCpuDifference(a: Measured, b: Measured): number | undefined {
  const aUs = a.pairs?.cpuUs;
  const bUs = b.pairs?.cpuUs;
  return aUs === undefined || bUs === undefined || aUs.length !== bUs.length ? undefined : median(aUs.map((us, pair) => us - bUs[pair]!));
}

const ms = (value: number): string => (Number.isFinite(value) ? value.toFixed(2) : 'n/a');

function describe(row: Measured): string {
  const cpu = row.cpuUsPerRequest === undefined ? '' : `, ${Math.round(row.cpuUsPerRequest)} µs CPU/req`;
  return `${Math.round(row.requestsPerSecond)} req/s, p99 ${ms(row.p99)} ms${cpu}, client ${Math.round(100 * row.clientCpu)}%${row.errors > 0 ? `, ${row.errors} ERRORS` : ''}`;
}

/** Set once the cache gateway runs: its memory, printed after every row (see {@link memoryBreakdown}). */
let memoryAfterRows: (() => Promise<string>) | undefined;

/**
 * Measures a reference and the gateway in alternating one-second rounds (ref-gw, gw-ref, ...),
 * one pair per second of the duration; returns [reference, gateway]. A pair's two rounds run
 * within two seconds of each other, so a burst of other load on the machine, which lasts
 * seconds, mostly hits both or spoils only a few pairs: the ratios are medians over the pairs.
 */
async function comparePair(scenario: string, reference: Target, gateway: Target): Promise<[Measured, Measured]> {
  const [refRow, gwRow] = await compareRounds(scenario, reference, [gateway]);
  return [refRow!, gwRow!];
}

/**
 * {@link comparePair} with more than one target against the same reference: each pair is a round
 * of the reference and one of every target, in turn (ref-a-b, b-a-ref, ...), and every target's
 * row carries its per-pair ratios to the reference. Returns the reference's row, then the
 * targets' rows in the order given.
 */
async function compareRounds(scenario: string, reference: Target, targets: readonly Target[]): Promise<Measured[]> {
  process.stdout.write(`  ${scenario}: `);
  const all = [reference, ...targets];
  for (const target of all) await load(target, WARMUP_S);
  const rounds: Round[][] = all.map(() => []);
  for (let pair = 0; pair < PAIRS; pair++) {
    // Alternating the order cancels a drift within a pair.
    const order = pair % 2 === 0 ? all.keys() : [...all.keys()].reverse();
    for (const index of order) rounds[index]!.push(await load(all[index]!, ROUND_S));
  }
  const refRounds = rounds[0]!;
  const refRow = summarise(scenario, reference, refRounds);
  const rows = targets.map((target, index) => {
    const targetRounds = rounds[index + 1]!;
    const row = summarise(scenario, target, targetRounds, refRow);
    row.pairs = {
      rps: targetRounds.map((round, pair) => rpsOf(round) / rpsOf(refRounds[pair]!)),
      p99: targetRounds.map((round, pair) => p99Of(round) / p99Of(refRounds[pair]!)),
      cpuUs: targetRounds.every((round) => round.cpu !== undefined && round.requests > 0) ? targetRounds.map((round) => (round.cpu! / round.requests) * 1e6) : undefined,
    };
    return row;
  });
  const described = rows.map((row) => {
    const r = ratios(row);
    return `${row.target} ${describe(row)} | ${fmt(r.rps ?? NaN)}× req/s, ${fmt(r.p99 ?? NaN)}× p99`;
  });
  process.stdout.write(`${reference.name} ${describe(refRow)} | ${described.join(' | ')}\n`);
  if (memoryAfterRows !== undefined) console.log(`    ${await memoryAfterRows()}`);
  return [refRow, ...rows];
}

/**
 * Load on one server process with several request bodies in turn (each connection cycles through
 * them), to let V8 compile its hot paths before anything is measured.
 */
async function warmUp(url: string, bodies: readonly string[], seconds: number): Promise<void> {
  const run = autocannon({
    url,
    connections: CONNECTIONS,
    duration: seconds,
    requests: bodies.map((body) => ({ method: 'POST' as const, headers: JSON_HEADERS, body })),
    skipAggregateResult: true,
  } as autocannon.Options) as unknown as PromiseLike<RawRun>;
  const result = await run;
  if (result.errors + result.non2xx > 0) throw new Error(`warm-up of ${url}: ${result.errors} errors, ${result.non2xx} non-2xx answers`);
}

/** Same answer from both (ids aside): the comparison is only fair if the work is the same. */
async function sameAnswer(what: string, gatewayUrl: string, referenceUrl: string, body: string, expectCache?: 'hit' | 'miss'): Promise<void> {
  const viaGateway = await post(gatewayUrl, body);
  const viaReference = await post(referenceUrl, body);
  if (viaGateway.status !== 200 || !isDeepStrictEqual(viaGateway.json, viaReference.json)) {
    throw new Error(`${what}: the gateway's answer differs from the reference's (HTTP ${viaGateway.status}): ${JSON.stringify(viaGateway.json).slice(0, 300)}`);
  }
  if (expectCache !== undefined) {
    const again = await post(gatewayUrl, body);
    if (again.headers['x-cache'] !== expectCache) throw new Error(`${what}: expected X-Cache: ${expectCache}, got ${String(again.headers['x-cache'])}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Report

const fmt = (value: number, digits = 2): string => value.toFixed(digits);
const mib = (bytes: number | undefined): string => (bytes === undefined ? 'n/a' : fmt(bytes / MIB, 1));

/**
 * A row's ratios to its reference: medians over the alternating pairs when it has them (see
 * comparePair), else the ratio of the two summed-up rows.
 */
function ratios(row: Measured): { rps?: number; p99?: number; cpu?: number } {
  const ref = row.reference;
  if (ref === undefined) return {};
  return {
    rps: row.pairs !== undefined ? median(row.pairs.rps) : row.requestsPerSecond / ref.requestsPerSecond,
    p99: row.pairs !== undefined ? median(row.pairs.p99) : row.p99 / ref.p99,
    cpu: row.cpuUsPerRequest !== undefined && ref.cpuUsPerRequest !== undefined ? row.cpuUsPerRequest / ref.cpuUsPerRequest : undefined,
  };
}

/** `0.84× (0.71–0.93)`: the median and the range over the pairs. */
function ratioText(value: number | undefined, perPair: readonly number[] | undefined): string {
  if (value === undefined) return '';
  if (perPair === undefined) return `${fmt(value)}×`;
  return `${fmt(value)}× (${fmt(Math.min(...perPair))}–${fmt(Math.max(...perPair))})`;
}

interface Check {
  name: string;
  measured: string;
  pass: boolean;
  /** The ratio the check is about, for the repeatability table. */
  ratio?: number;
}

type Facts = { data: string; startedAt: Date; elapsedS: number };

/** One run's targets (the Targets table of docs/benchmarks.md), from its rows. */
function targetChecks(rows: readonly Measured[], gatewayRss: readonly number[], cacheGatewayMemory: string, withRedis: boolean): Check[] {
  const gatewayRow = (scenario: string): Measured => {
    const row = rows.find((candidate) => candidate.scenario === scenario && candidate.target === 'gateway' && candidate.reference !== undefined);
    if (row === undefined) throw new Error(`no gateway row for ${scenario}`);
    return row;
  };
  const checks: Check[] = [];
  const rpsAtLeast = (label: string, row: Measured, bound: number, what: string): void => {
    const r = ratios(row);
    checks.push({ name: `${label}: req/s ≥ ${bound}× ${what}`, measured: ratioText(r.rps, row.pairs?.rps), pass: (r.rps ?? 0) >= bound && row.errors === 0, ratio: r.rps });
  };
  const p99AtMost = (label: string, row: Measured, bound: number, what: string): void => {
    const r = ratios(row);
    checks.push({
      name: `${label}: p99 ≤ ${bound}× ${what}`,
      measured: `${ratioText(r.p99, row.pairs?.p99)}; over all rounds ${ms(row.p99)} vs ${ms(row.reference!.p99)} ms`,
      pass: (r.p99 ?? Infinity) <= bound,
      ratio: r.p99,
    });
  };
  for (const hydrated of [false, true]) {
    const row = gatewayRow(`cache hit, hydrated=${hydrated}`);
    rpsAtLeast(`cache hit hydrated=${hydrated} (log level info)`, row, 0.85, 'bare');
    p99AtMost(`cache hit hydrated=${hydrated}`, row, 1.3, 'bare');
  }
  {
    // The gateway at info and at warn ran in the same pairs of rounds (ref-info-warn-own,
    // own-warn-info-ref, ...): the line's cost is the median over the pairs of the difference in
    // CPU per request, so a change in the machine's speed between the rows does not count as the
    // line's. The gateway of its own at warn is shown beside it, not judged.
    const info = gatewayRow('cache hit, hydrated=false');
    const warn = gatewayRow(WARN_SCENARIO);
    const ownWarn = gatewayRow(FRESH_WARN_SCENARIO);
    const lineUs = medianCpuDifference(info, warn);
    const ownUs = medianCpuDifference(info, ownWarn);
    checks.push({
      name: 'the request log line (info) costs ≤ 4 µs of gateway CPU per request (cache hit at info minus the same gateway at warn, median over the pairs)',
      measured:
        lineUs === undefined
          ? 'n/a'
          : `${fmt(lineUs, 1)} µs (rows: ${fmt(info.cpuUsPerRequest!, 1)} vs ${fmt(warn.cpuUsPerRequest!, 1)} µs; against a gateway of its own at warn: ${ownUs === undefined ? 'n/a' : fmt(ownUs, 1)} µs)`,
      pass: lineUs !== undefined && lineUs <= 4,
    });
  }
  rpsAtLeast(BATCH_SCENARIO, gatewayRow(BATCH_SCENARIO), 0.8, 'bare');
  rpsAtLeast('cache hit, key with origin and method lists', gatewayRow(SETTINGS_SCENARIO), 0.95, 'the plain key');
  rpsAtLeast('cache miss, verification full', gatewayRow(missScenario('full')), 1.2, 'proxy');
  rpsAtLeast('cache miss, hydrated=true, verification full', gatewayRow(HYDRATED_MISS_SCENARIO), 1.2, 'proxy');
  for (const limit of ASSET_LIMITS) {
    const row = gatewayRow(assetsScenario(limit));
    const label = `getAssetsByGroup limit ${limit}`;
    rpsAtLeast(label, row, 0.85, 'streaming proxy');
    const cpu = ratios(row).cpu;
    checks.push({
      name: `${label}: gateway CPU per request ≤ 1.7× streaming proxy`,
      measured: `${cpu === undefined ? 'n/a' : `${fmt(cpu)}×`} (${fmt(row.cpuUsPerRequest ?? NaN, 0)} vs ${fmt(row.reference!.cpuUsPerRequest ?? NaN, 0)} µs)`,
      pass: cpu !== undefined && cpu <= 1.7,
      ratio: cpu,
    });
    p99AtMost(label, row, 1.3, 'streaming proxy');
  }
  {
    const row = gatewayRow(assetsScenario(1000));
    const bound = CACHE_MAX_BYTES + RSS_HEADROOM_BYTES;
    checks.push({
      name: `gateway peak RSS with ${CONNECTIONS} concurrent limit-1000 answers ≤ ${bound / MIB} MiB`,
      measured: `${mib(row.peakRss)} MiB (streaming proxy: ${mib(row.reference!.peakRss)} MiB)`,
      pass: row.peakRss !== undefined && row.peakRss <= bound,
    });
  }
  if (withRedis) rpsAtLeast('cache hit with the Redis store', gatewayRow(REDIS_SCENARIO), 0.6, 'the SQLite store');
  const maxRss = Math.max(...gatewayRss);
  checks.push({
    name: `gateway RSS after the run ≤ cache maxBytes + 150 MiB = ${(CACHE_MAX_BYTES + RSS_HEADROOM_BYTES) / MIB} MiB`,
    measured: `${mib(maxRss)} MiB (largest of the gateway processes: ${gatewayRss.map(mib).join(', ')}; the cache gateway's ${cacheGatewayMemory})`,
    pass: maxRss > 0 && maxRss <= CACHE_MAX_BYTES + RSS_HEADROOM_BYTES,
  });
  return checks;
}

/** How far apart a ratio came out over the runs: every run within ±0.05 of the runs' median. */
const REPEAT_TOLERANCE = 0.05;

function rowsTable(rows: readonly Measured[]): string[] {
  const x = (value: number | undefined): string => (value === undefined ? '' : `${fmt(value)}×`);
  const lines = [
    '| scenario | target | req/s | p50 ms | p99 ms | CPU µs/req (system) | req/s vs ref | p99 vs ref | CPU/req vs ref | errors | RSS MiB (peak) | load gen CPU |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const row of rows) {
    const r = ratios(row);
    const cpuUs = row.cpuUsPerRequest === undefined ? 'n/a' : `${fmt(row.cpuUsPerRequest, 0)} (${fmt(row.systemCpuUsPerRequest ?? NaN, 0)})`;
    lines.push(
      `| ${row.scenario} | ${row.target} | ${Math.round(row.requestsPerSecond)} | ${ms(row.p50)} | ${ms(row.p99)} | ${cpuUs} | ` +
        `${ratioText(r.rps, row.pairs?.rps)} | ${ratioText(r.p99, row.pairs?.p99)} | ${x(r.cpu)} | ${row.errors} | ${mib(row.rss)} (${mib(row.peakRss)}) | ${Math.round(100 * row.clientCpu)}% |`,
    );
  }
  return lines;
}

function report(runs: ReadonlyArray<{ rows: Measured[]; checks: Check[] }>, facts: Facts): string {
  const cpu = cpus();
  const lines: string[] = [];
  const generator =
    LOADGEN === 'wrk'
      ? `wrk (its own process, ${WRK_THREADS} thread${WRK_THREADS === 1 ? '' : 's'}, POST bodies from a Lua script; bench/wrk.ts)`
      : 'autocannon in the orchestrator process (wrk not found; `apt-get install wrk` to use it)';
  lines.push(`Generated by \`${commandLine()}\` on ${facts.startedAt.toISOString()} (the run took ${Math.round(facts.elapsedS)} s).`);
  lines.push('');
  lines.push(`- Machine: ${cpu.length} cores (${cpu[0]?.model.trim() ?? 'unknown CPU'}), ${platform()} ${arch()}, Node ${process.version}.`);
  lines.push(
    `- Load generator for **every table below: ${generator}**, ${CONNECTIONS} connections, pipelining 1. First every server is warmed up (${JIT_WARMUP_S} s of full load per gateway process, ` +
      `${Math.ceil(JIT_WARMUP_S / 2)} s per reference, so that V8 has optimised their hot paths); then per scenario a ${WARMUP_S} s warm-up of each ` +
      `target (not recorded), then ${PAIRS} pairs of ${ROUND_S} s rounds, reference and gateway alternating (ref-gw, gw-ref, ...; ref-validating-gw, gw-validating-ref, ... for \`getAssetsByGroup\`; ref-gw-warn-own, own-warn-gw-ref, ... for the first hit scenario, its \`log level warn\` row (the same gateway, switched to warn through its admin API before each of those rounds and back to info before the others) and the gateway of its own at warn): ${PAIRS * ROUND_S} s per target. ` +
      `${RUNS} full run${RUNS === 1 ? '' : 's'} of every scenario, one after the other, on the same server processes.`,
  );
  lines.push(
    `- Gateway: \`${GATEWAY_ENVIRONMENT_ASSIGNMENTS} node ${GATEWAY_FLAGS.join(' ')} dist/cli.js serve\` (${GATEWAY_FLAGS === GATEWAY_NODE_FLAGS ? "the tollgate command's Node flags" : 'BENCH_GATEWAY_FLAGS, not the tollgate command\'s Node flags'}) as its own process; SQLite store (WAL, temp dir) with metering on (every call charged); ` +
      `cache \`maxBytes\` ${CACHE_MAX_BYTES / MIB} MiB; the default log level \`info\` (one JSON line per request) unless the row says \`warn\`; ` +
      'its log goes to a file. Team and key made with `tollgate teams create` / `keys create`. The Redis-store row is a fourth gateway on a local `redis-server` (no persistence), with the team and key copied by `tollgate migrate`. ' +
      '`getAssetsByGroup` is compared with `bench/reference-stream-proxy.ts`, a `node:http` + undici proxy that pipes the sample DAS server\'s answer through unparsed, ' +
      'and with the same proxy run with `--validate` (each answer held until the gateway\'s validator has passed it), measured in the same pairs.',
  );
  lines.push(`- Data: ${facts.data}`);
  lines.push(
    '- Columns: req/s, p50 and p99 are over all rounds of the target (' +
      (LOADGEN === 'wrk'
        ? "wrk's microsecond histogram of each round, as 1,000 quantiles per round, rounds weighted equally"
        : 'latency of every 2xx response as autocannon timed it, to the microsecond') +
      '); "req/s vs ref" and "p99 vs ref" are the **median over the pairs** of the pair\'s ratio, with the lowest and ' +
      'highest pair in brackets; "CPU µs/req" is the server process\'s user + system CPU time over the measured rounds divided by ' +
      'the requests it answered (from `/proc/<pid>/stat`), and in brackets its system (kernel) part alone; RSS is `VmRSS` of that process right after its last round, and in brackets the largest ' +
      'sampled every 100 ms during its rounds; "load gen CPU" is the highest share of one core the load generator used in any round ' +
      '(near 100% the load generator, not the server, would set the pace).',
  );
  for (const [index, run] of runs.entries()) {
    lines.push('');
    lines.push(runs.length > 1 ? `### Run ${index + 1} of ${runs.length}` : '### Results');
    lines.push('');
    lines.push(...rowsTable(run.rows));
  }
  lines.push('');
  lines.push('### Targets');
  lines.push('');
  const names = runs[0]!.checks.map((check) => check.name);
  lines.push(`| target | ${runs.map((_, index) => `run ${index + 1}`).join(' | ')} |`);
  lines.push(`|---|${runs.map(() => '---|').join('')}`);
  for (const name of names) {
    const cells = runs.map((run) => {
      const check = run.checks.find((candidate) => candidate.name === name);
      return check === undefined ? 'n/a' : `${check.pass ? 'PASS' : '**FAIL**'} ${check.measured}`;
    });
    lines.push(`| ${name} | ${cells.join(' | ')} |`);
  }
  lines.push(...validationBoundTable(runs));
  if (runs.length > 1) {
    lines.push('');
    lines.push('### Repeatability');
    lines.push('');
    lines.push(
      `Every ratio of the gateway rows over the ${runs.length} runs: "repeats" when every run is within ±${REPEAT_TOLERANCE} of the runs' median ` +
        '(for req/s and p99, the medians over the pairs; for CPU, the ratio of CPU per request).',
    );
    lines.push('');
    lines.push(`| scenario | ratio | ${runs.map((_, index) => `run ${index + 1}`).join(' | ')} | spread | repeats |`);
    lines.push(`|---|---|${runs.map(() => '---:|').join('')}---:|---|`);
    let repeating = 0;
    let total = 0;
    for (const row of runs[0]!.rows) {
      if (row.reference === undefined || row.target !== 'gateway') continue;
      for (const key of ['rps', 'p99', 'cpu'] as const) {
        const values = runs.map((run) => {
          const same = run.rows.find((candidate) => candidate.scenario === row.scenario && candidate.target === 'gateway' && candidate.reference !== undefined);
          return same === undefined ? undefined : ratios(same)[key];
        });
        if (values.some((value) => value === undefined || !Number.isFinite(value))) continue;
        const known = values as number[];
        const middle = median(known);
        const repeats = known.every((value) => Math.abs(value - middle) <= REPEAT_TOLERANCE + 1e-9);
        total += 1;
        if (repeats) repeating += 1;
        const label = { rps: 'req/s', p99: 'p99', cpu: 'CPU/req' }[key];
        lines.push(`| ${row.scenario} | ${label} | ${known.map((value) => `${fmt(value)}×`).join(' | ')} | ${fmt(Math.max(...known) - Math.min(...known))} | ${repeats ? 'yes' : '**no**'} |`);
      }
    }
    lines.push('');
    lines.push(`${repeating} of ${total} ratios repeat within ±${REPEAT_TOLERANCE}.`);
  }
  return lines.join('\n');
}

/**
 * What validating every byte of a `getAssetsByGroup` answer allows on this machine: the
 * validating proxy against the streaming proxy (a floor no validating server beats by much), and
 * the gateway against the validating proxy (what the gateway's own work adds to the validation).
 * Ratios of requests per second are medians over the pairs, as in the rows.
 */
function validationBoundTable(runs: ReadonlyArray<{ rows: Measured[] }>): string[] {
  const lines: string[] = [];
  for (const [index, run] of runs.entries()) {
    for (const limit of ASSET_LIMITS) {
      const rowOf = (target: string): Measured | undefined => run.rows.find((row) => row.scenario === assetsScenario(limit) && row.target === target);
      const validating = rowOf(VALIDATING_PROXY);
      const gateway = rowOf('gateway');
      if (validating?.pairs === undefined || gateway?.pairs === undefined) continue;
      const gatewayPerPair = gateway.pairs.rps.map((ratio, pair) => ratio / validating.pairs!.rps[pair]!);
      const cpu = (row: Measured, base: Measured): string =>
        row.cpuUsPerRequest === undefined || base.cpuUsPerRequest === undefined ? 'n/a' : `${fmt(row.cpuUsPerRequest / base.cpuUsPerRequest)}×`;
      lines.push(
        `| limit ${limit} | ${index + 1} | ${ratioText(median(validating.pairs.rps), validating.pairs.rps)} | ${cpu(validating, validating.reference!)} | ` +
          `${ratioText(median(gatewayPerPair), gatewayPerPair)} | ${cpu(gateway, validating)} |`,
      );
    }
  }
  if (lines.length === 0) return [];
  return [
    '',
    '### What validating every byte allows',
    '',
    `The \`getAssetsByGroup\` rows' second reference, "${VALIDATING_PROXY}", is the streaming proxy holding each answer until ` +
      "the gateway's own validator (the WebAssembly one) has passed it, then writing it at once: the least a server that validates every byte before sending the first can do. " +
      'It is measured in the same pairs as the streaming proxy and the gateway.',
    '',
    '| page | run | validating proxy ÷ streaming proxy: req/s | CPU/req | gateway ÷ validating proxy: req/s | CPU/req |',
    '|---|---:|---:|---:|---:|---:|',
    ...lines,
  ];
}

const DOC_HEADER = `# Benchmarks

The section between the markers below is rewritten by every \`npm run bench\`; the rest of this
file is not.

`;

function writeDoc(file: string, generated: string, header: string): void {
  const block = `${START_MARKER}\n${generated}\n${END_MARKER}`;
  mkdirSync(dirname(file), { recursive: true });
  if (!existsSync(file)) {
    writeFileSync(file, `${header}${block}\n`);
    return;
  }
  const current = readFileSync(file, 'utf8');
  const start = current.indexOf(START_MARKER);
  const end = current.indexOf(END_MARKER);
  const next =
    start !== -1 && end > start ? current.slice(0, start) + block + current.slice(end + END_MARKER.length) : `${current.trimEnd()}\n\n${block}\n`;
  writeFileSync(file, next);
}

// ---------------------------------------------------------------------------------------------
// Capacity planning (docs/scaling.md)

const SCALING_DOC = join(ROOT, 'docs', 'scaling.md');
const SCALING_HEADER = `# Scaling

The section between the markers below is rewritten by every full \`npm run bench\`.

`;

interface RedisCostRow {
  name: string;
  cost: RedisCost;
  /** The Redis-store gateway's CPU per call in the same rounds. */
  gatewayCpuUs: number | undefined;
  callsPerSecond: number;
  errors: number;
}

/**
 * The mixed workload of docs/scaling.md: shares of requests by scenario (a batch counts as one
 * request of 50 calls). Chosen to look like a read-heavy RPC product: mostly block reads answered
 * from the cache, some misses, a few batches and DAS pages.
 */
const MIX: ReadonlyArray<{ scenario: string; share: number; calls: number; redis: 'hit' | 'batch' | 'forwarded' }> = [
  { scenario: 'cache hit, hydrated=false', share: 0.6, calls: 1, redis: 'hit' },
  { scenario: 'cache hit, hydrated=true', share: 0.1, calls: 1, redis: 'hit' },
  { scenario: 'cache miss, verification full → anvil', share: 0.15, calls: 1, redis: 'forwarded' },
  { scenario: 'batch of 50 cache hits', share: 0.02, calls: BATCH_ITEMS, redis: 'batch' },
  { scenario: 'getAssetsByGroup, limit 100', share: 0.12, calls: 1, redis: 'forwarded' },
  { scenario: 'getAssetsByGroup, limit 1000', share: 0.01, calls: 1, redis: 'forwarded' },
];
/** A core is planned at this utilisation, leaving room for bursts, GC and the event loop's latency. */
const PLANNED_UTILISATION = 0.6;
/** One Redis main thread is planned at this share of a core. */
const REDIS_PLANNED_UTILISATION = 0.5;

function scalingReport(rows: readonly Measured[], redisCosts: readonly RedisCostRow[], facts: Facts): string {
  const lines: string[] = [];
  lines.push(`Generated by \`${commandLine()}\` on ${facts.startedAt.toISOString()}, from the last run of docs/benchmarks.md and the Redis rounds below (load generator: ${LOADGEN}).`);
  lines.push('');
  lines.push('#### CPU per request, and what one core serves');
  lines.push('');
  lines.push(`"One core" is ${PLANNED_UTILISATION * 100}% of a core busy (the plan's headroom) divided by the CPU per request; a gateway process is one event loop, so one process uses about one core.`);
  lines.push('');
  lines.push('| scenario | gateway CPU µs/req | req/s per core at 100% | req/s per process at the planned 60% |');
  lines.push('|---|---:|---:|---:|');
  const cpuOf = new Map<string, number>();
  for (const row of rows) {
    if (row.reference === undefined && row.target !== 'gateway') continue;
    if (row.target !== 'gateway' || row.cpuUsPerRequest === undefined) continue;
    cpuOf.set(row.scenario, row.cpuUsPerRequest);
    lines.push(`| ${row.scenario} | ${fmt(row.cpuUsPerRequest, 0)} | ${fmt(1e6 / row.cpuUsPerRequest, 0)} | ${fmt((PLANNED_UTILISATION * 1e6) / row.cpuUsPerRequest, 0)} |`);
  }
  lines.push('');
  lines.push('#### Redis commands and CPU per 1,000 calls (Redis store)');
  lines.push('');
  if (redisCosts.length === 0) {
    lines.push('Not measured: `redis-server` is not installed.');
  } else {
    lines.push(
      `Each scenario alone against the Redis-store gateway (${CONNECTIONS} connections), \`INFO commandstats\` and \`INFO cpu\` of the local redis-server read before and after; per 1,000 **calls** (a batch is ${BATCH_ITEMS} calls).`,
    );
    lines.push('');
    lines.push('| scenario | calls/s | commands per 1,000 calls | of which | Redis CPU ms per 1,000 calls | gateway CPU µs/call | errors |');
    lines.push('|---|---:|---:|---|---:|---:|---:|');
    for (const row of redisCosts) {
      const top = row.cost.commandsPer1000
        .slice(0, 5)
        .map(([command, per1000]) => `${command} ${fmt(per1000, 0)}`)
        .join(', ');
      lines.push(
        `| ${row.name} | ${fmt(row.callsPerSecond, 0)} | ${fmt(row.cost.totalPer1000, 0)} | ${top} | ${fmt(row.cost.cpuMsPer1000, 1)} | ${row.gatewayCpuUs === undefined ? 'n/a' : fmt(row.gatewayCpuUs, 0)} | ${row.errors} |`,
      );
    }
  }
  lines.push('');
  lines.push('#### The mixed workload: replicas and Redis for 10k, 50k and 100k requests/s');
  lines.push('');
  lines.push(`Mix (shares of requests): ${MIX.map((entry) => `${entry.scenario} ${Math.round(entry.share * 100)}%`).join(', ')}.`);
  lines.push('');
  const known = MIX.every((entry) => cpuOf.has(entry.scenario));
  const redisOf = (kind: 'hit' | 'batch' | 'forwarded'): RedisCostRow | undefined =>
    redisCosts.find((row) => (kind === 'hit' ? row.name.startsWith('cache hit') : kind === 'batch' ? row.name.startsWith('batch') : row.name.startsWith('forwarded')));
  if (!known) {
    lines.push('Not computed: a scenario of the mix was not measured in this run.');
    return lines.join('\n');
  }
  const cpuPerRequest = MIX.reduce((sum, entry) => sum + entry.share * cpuOf.get(entry.scenario)!, 0);
  const haveRedis = redisCosts.length > 0;
  const callsPerRequest = MIX.reduce((sum, entry) => sum + entry.share * entry.calls, 0);
  const commandsPerRequest = haveRedis ? MIX.reduce((sum, entry) => sum + (entry.share * entry.calls * (redisOf(entry.redis)?.cost.totalPer1000 ?? NaN)) / 1000, 0) : NaN;
  const redisCpuMsPerRequest = haveRedis ? MIX.reduce((sum, entry) => sum + (entry.share * entry.calls * (redisOf(entry.redis)?.cost.cpuMsPer1000 ?? NaN)) / 1000, 0) : NaN;
  lines.push(
    `Weighted gateway CPU: **${fmt(cpuPerRequest, 0)} µs per request** (${fmt(callsPerRequest, 2)} calls per request), so one process at ${PLANNED_UTILISATION * 100}% serves ` +
      `${fmt((PLANNED_UTILISATION * 1e6) / cpuPerRequest, 0)} requests/s` +
      (haveRedis ? `; Redis: ${fmt(commandsPerRequest, 2)} commands and ${fmt(redisCpuMsPerRequest * 1000, 1)} µs of Redis CPU per request.` : '.'),
  );
  lines.push('');
  lines.push('| requests/s | gateway cores (100%) | gateway processes at 60% | Redis commands/s | Redis CPU (cores) | Redis main threads at 50% |');
  lines.push('|---:|---:|---:|---:|---:|---:|');
  for (const rate of [10_000, 50_000, 100_000]) {
    const cores = (rate * cpuPerRequest) / 1e6;
    const redisCores = (rate * redisCpuMsPerRequest) / 1000;
    lines.push(
      `| ${rate.toLocaleString('en-US')} | ${fmt(cores, 1)} | ${Math.ceil(cores / PLANNED_UTILISATION)} | ${haveRedis ? fmt(rate * commandsPerRequest, 0) : 'n/a'} | ${haveRedis ? fmt(redisCores, 2) : 'n/a'} | ${haveRedis ? Math.max(1, Math.ceil(redisCores / REDIS_PLANNED_UTILISATION)) : 'n/a'} |`,
    );
  }
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------
// Redis, for the distributed store's scenario (skipped when redis-server is not installed)

function hasRedisServer(): boolean {
  try {
    execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

async function startRedis(): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = track(spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' }));
  const url = `redis://127.0.0.1:${port}`;
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      // The CLI's migrate fails fast while Redis is not up yet; a TCP connect is enough to wait on.
      await new Promise<void>((resolve, reject) => {
        const socket = connect(port, '127.0.0.1', () => {
          socket.end();
          resolve();
        });
        socket.once('error', reject);
      });
      return { url, child };
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`redis-server did not start on port ${port}`, { cause: error });
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The run

async function main(): Promise<void> {
  const startedAt = new Date();
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run \`npm run build\` first (npm run bench does)`);
  // The WebSocket fan-out (bench/ws-fanout.ts) starts its own anvil and gateway: asked for alone, nothing else starts.
  const wsFanout = () => runWsFanout({ subscribers: 1000, blocks: flags.quick ? 20 : 100 }).then(formatWsFanout);
  if (flags.only !== undefined && WS_FANOUT_SCENARIO.includes(flags.only)) return void console.log(await wsFanout());
  // serve --workers, 1 vs 2 (bench/workers.ts): its own anvil and gateways, also run alone when asked for.
  const workersBench = () => runWorkersBench({ rounds: flags.quick ? 3 : 8, seconds: 2 }).then(formatWorkersBench);
  if (flags.only !== undefined && WORKERS_SCENARIO.includes(flags.only)) return void console.log(await workersBench());
  // The eth_getLogs split (bench/logs-split.ts) starts its own anvil and gateway too.
  const logsSplit = () => runLogsSplit({ calls: flags.quick ? 10 : 30 }).then(formatLogsSplit);
  if (flags.only !== undefined && LOGS_SPLIT_SCENARIO.includes(flags.only)) return void console.log(await logsSplit());
  // The response cache's own scenarios (bench/cache-scenarios.ts) start their own anvil, Redis and gateways.
  const cacheScenarios = () => runCacheScenarios({ seconds: flags.quick ? 3 : 10 }).then(formatCacheScenarios);
  if (flags.only !== undefined && CACHE_SCENARIO.includes(flags.only)) return void console.log(await cacheScenarios());
  const observability = () => runObservability({ seconds: flags.quick ? 3 : 8, rotations: flags.quick ? 1 : DEFAULT_ROTATIONS }).then(formatObservability);
  if (flags.only !== undefined && OBSERVABILITY_SCENARIO.includes(flags.only)) return void console.log(await observability());
  // rateLimit and price against none, and Redis commands per forwarded call (bench/budgets.ts): its own anvil, Redis and gateways.
  const budgets = () => runBudgets({ seconds: flags.quick ? 3 : 8, rotations: flags.quick ? 1 : 3, warmUpSeconds: flags.quick ? 3 : 8 }).then(formatBudgets);
  if (flags.only !== undefined && BUDGETS_SCENARIO.includes(flags.only)) return void console.log(await budgets());
  // Redis Cluster against one Redis (bench/redis-cluster-cost.ts) starts its own Redis and gateways, asked for alone.
  if (flags.only !== undefined && REDIS_CLUSTER_SCENARIO.includes(flags.only)) {
    const clusterOptions = { seconds: DURATION_S, connections: CONNECTIONS, pairs: CLUSTER_PAIRS, pinRedis: true };
    return void console.log(formatRedisClusterCost(await runRedisClusterCost(clusterOptions), clusterOptions));
  }
  // Per run 12 scenario pairs (2 warm-ups + 2 × PAIRS rounds, each with a moment to start the load
  // generator) and one gateway-only row; plus start-up, warm-up and the Redis cost rounds.
  const perRunS = 12 * (2 * WARMUP_S + 2 * PAIRS * (ROUND_S + 0.5)) + WARMUP_S + DURATION_S;
  const budgetMs = (4 * JIT_WARMUP_S + RUNS * perRunS + 3 * (WARMUP_S + 10)) * 1000 + 120_000;
  const watchdog = setTimeout(() => {
    process.stderr.write(`bench: still running after ${Math.round(budgetMs / 1000)} s, giving up\n`);
    killChildren();
    process.exit(1);
  }, budgetMs);
  watchdog.unref();

  workDir = mkdtempSync(join(tmpdir(), 'tollgate-bench-'));
  const profileDir = flags.profile ? join(workDir, 'profiles') : undefined;
  console.log(`bench: ${CONNECTIONS} connections, ${DURATION_S} s per target (+${WARMUP_S} s warm-up); work dir ${workDir}`);

  // Upstreams, references and the team's key, started side by side.
  const dbFile = join(workDir, 'tollgate.db');
  const [chain, das, [secret, browserSecret]] = await Promise.all([
    (async () => {
      anvil = await startAnvil();
      const seed = await seedAnvil(anvil.url, { blocks: 1, txPerBlock: TRANSACTIONS_PER_BLOCK });
      const hash = seed.blocksWithTransactions[0]!;
      const [bare, bareWithHeaders, proxy] = await Promise.all([
        startTsProcess<{ port: number }>('reference-bare.ts', ['--anvil', anvil.url, '--hash', hash]),
        startTsProcess<{ port: number }>('reference-bare.ts', ['--anvil', anvil.url, '--hash', hash, '--gateway-headers']),
        startTsProcess<{ port: number }>('reference-proxy.ts', ['--upstream', anvil.url]),
      ]);
      return { anvilUrl: anvil.url, hash, bare, bareWithHeaders, proxy };
    })(),
    (async () => {
      const server = await startTsProcess<{ url: string; groupValue: string; size: number }>('sample-das-process.ts', []);
      const [streamProxy, validatingProxy] = await Promise.all([
        startTsProcess<{ port: number }>('reference-stream-proxy.ts', ['--upstream', server.info.url]),
        startTsProcess<{ port: number }>('reference-stream-proxy.ts', ['--upstream', server.info.url, '--validate']),
      ]);
      return { ...server, streamProxy, validatingProxy };
    })(),
    (async () => {
      // A team with a quota no run can exhaust, and its key, made with the CLI like an operator would.
      await runCli(['teams', 'create', 'bench', '--daily-credits', '1000000000000', '--db', dbFile]);
      const plain = (JSON.parse(await runCli(['keys', 'create', '--team', 'bench', '--db', dbFile])) as { secret: string }).secret;
      // A key as a dapp ships it in a web page: an origin list and a method list.
      const browser = JSON.parse(await runCli(['keys', 'create', '--team', 'bench', '--db', dbFile])) as { id: string; secret: string };
      await runCli(['keys', 'update', browser.id, '--db', dbFile, '--allow-origin', SETTINGS_ORIGIN, '--allow-origin', 'https://*.example.org', '--allow-method', 'eth_getBlockByHash', '--allow-method', 'eth_chainId']);
      return [plain, browser.secret] as const;
    })(),
  ]);
  const { hash, bare, bareWithHeaders, proxy } = chain;
  const bareUrl = `http://127.0.0.1:${bare.info.port}/`;
  const proxyUrl = `http://127.0.0.1:${proxy.info.port}/`;
  const bareTarget = (name: string, body: string): Target => ({ name, url: bareUrl, body, pid: bare.child.pid });
  const { streamProxy, validatingProxy } = das;
  const streamProxyUrl = `http://127.0.0.1:${streamProxy.info.port}/`;
  const validatingProxyUrl = `http://127.0.0.1:${validatingProxy.info.port}/`;

  // The gateways, each its own process on the same store: with the cache, without it (both at the
  // default log level, info: one line per request), and with the cache at log level warn (no
  // request lines, the extra row). Idle ones cost nothing while another is measured.
  const setup: GatewaySetup = { dbFile, anvilUrl: chain.anvilUrl, dasUrl: das.info.url, secret };
  const [cached, uncached, quiet] = await Promise.all([
    startGatewayProcess('gateway-cache', setup, { cacheMaxBytes: CACHE_MAX_BYTES, logLevel: 'info', profileDir }),
    startGatewayProcess('gateway-no-cache', setup, { cacheMaxBytes: 0, logLevel: 'info', profileDir }),
    startGatewayProcess('gateway-warn-log', setup, { cacheMaxBytes: CACHE_MAX_BYTES, logLevel: 'warn', profileDir }),
  ]);
  // The Redis store: the same team and key, copied with `tollgate migrate`, behind a fourth gateway.
  const redis = hasRedisServer() && selected(REDIS_SCENARIO) ? await startRedis() : undefined;
  let redisGateway: GatewayProcess | undefined;
  if (redis !== undefined) {
    await runCli(['migrate', '--from', `sqlite:${dbFile}`, '--to', redis.url]);
    redisGateway = await startGatewayProcess('gateway-redis', setup, {
      cacheMaxBytes: CACHE_MAX_BYTES,
      logLevel: 'info',
      profileDir,
      store: { driver: 'redis', url: redis.url },
    });
  } else if (selected(REDIS_SCENARIO)) {
    console.log('redis-server is not installed: the Redis store scenario is skipped');
  }
  const eth = (gateway: GatewayProcess): string => `${gateway.origin}/eth/v3/${secret}`;
  const gatewayTarget = (gateway: GatewayProcess, body: string, path = eth(gateway)): Target => ({ name: 'gateway', url: path, body, pid: gateway.child.pid });

  const sizeOf = async (url: string, body: string): Promise<number> => Buffer.byteLength(JSON.stringify((await post(url, body)).json.result));
  const data =
    `one anvil block with ${TRANSACTIONS_PER_BLOCK} transactions (result ${fmt((await sizeOf(bareUrl, blockBody(hash, false))) / 1024, 1)} KiB with hashes, ` +
    `${fmt((await sizeOf(bareUrl, blockBody(hash, true))) / 1024, 1)} KiB hydrated); batch = ${BATCH_ITEMS} identical cache hits in one request; ` +
    `getAssetsByGroup page 1 of a sample DAS collection of ${das.info.size} assets ` +
    `(${fmt((await sizeOf(das.info.url, assetsBody(das.info.groupValue, 100))) / 1024, 0)} KiB at limit 100, ` +
    `${fmt((await sizeOf(das.info.url, assetsBody(das.info.groupValue, 1000))) / 1024, 0)} KiB at limit 1000).`;

  console.log(`warm-up: ${JIT_WARMUP_S} s per gateway process, ${Math.ceil(JIT_WARMUP_S / 2)} s per reference`);
  const hits = [blockBody(hash, false), blockBody(hash, true), batchBody(hash)];
  const halfWarmUp = Math.ceil(JIT_WARMUP_S / 2);
  await warmUp(eth(cached), hits, JIT_WARMUP_S);
  if (ASSET_LIMITS.some((limit) => selected(assetsScenario(limit)))) {
    // The large pass-through path has code of its own to optimise (the scanner, the response writer).
    const pages = ASSET_LIMITS.map((limit) => assetsBody(das.info.groupValue, limit));
    await warmUp(`${cached.origin}/das/v3/${secret}`, pages, halfWarmUp);
    await warmUp(streamProxyUrl, pages, halfWarmUp);
    await warmUp(validatingProxyUrl, pages, halfWarmUp);
  }
  await warmUp(eth(uncached), [blockBody(hash, false)], JIT_WARMUP_S);
  await warmUp(eth(quiet), [blockBody(hash, false)], halfWarmUp);
  if (redisGateway !== undefined) await warmUp(eth(redisGateway), [blockBody(hash, false)], JIT_WARMUP_S);
  await warmUp(bareUrl, hits, halfWarmUp);
  await warmUp(`http://127.0.0.1:${bareWithHeaders.info.port}/`, [blockBody(hash, false)], halfWarmUp);
  await warmUp(proxyUrl, [blockBody(hash, false)], halfWarmUp);

  memoryAfterRows = async () => `cache gateway ${await memoryBreakdown(cached)}`;
  console.log(`gateway pids: cache ${cached.child.pid}, no cache ${uncached.child.pid}, warn log ${quiet.child.pid}; load generator: ${LOADGEN}`);
  const viaGatewayDas = `${cached.origin}/das/v3/${secret}`;
  for (const limit of ASSET_LIMITS) {
    // The streaming proxy answers what the DAS server answers; the gateway the same, ids aside.
    if (!selected(assetsScenario(limit))) continue;
    await sameAnswer(`getAssetsByGroup limit ${limit}`, viaGatewayDas, streamProxyUrl, assetsBody(das.info.groupValue, limit));
    await sameAnswer(`getAssetsByGroup limit ${limit}, validating proxy`, validatingProxyUrl, streamProxyUrl, assetsBody(das.info.groupValue, limit));
  }

  /** One full run: every selected scenario, in a fixed order; returns its rows and targets. */
  async function runOnce(run: number): Promise<{ rows: Measured[]; checks: Check[] }> {
    if (RUNS > 1) console.log(`run ${run} of ${RUNS}`);
    const rows: Measured[] = [];
    for (const hydrated of [false, true]) {
      // The extra row, the first scenario with the same gateway at log level warn (no request
      // line), is measured in the same pairs of rounds as that scenario, the level switched
      // before each round: the one process's CPU per request at info and at warn, pair by pair,
      // differs by what the line costs and nothing else. The gateway of its own at warn
      // (informational) runs in the same pairs.
      const withWarn = !hydrated && selected(WARN_SCENARIO);
      if (!selected(`cache hit, hydrated=${hydrated}`) && !withWarn) continue;
      const body = blockBody(hash, hydrated);
      await sameAnswer(`cache hit hydrated=${hydrated}`, eth(cached), bareUrl, body, 'hit');
      const targets = [gatewayTarget(cached, body)];
      if (withWarn) {
        await sameAnswer('cache hit at warn', eth(quiet), bareUrl, body, 'hit');
        targets[0] = { ...targets[0]!, before: () => setLogLevel(cached, 'info') };
        targets.push({ ...gatewayTarget(cached, body), name: 'gateway at warn', before: () => setLogLevel(cached, 'warn') });
        targets.push({ ...gatewayTarget(quiet, body), name: 'a gateway of its own at warn' });
      }
      const [reference, ...gatewayRows] = await compareRounds(`cache hit, hydrated=${hydrated}`, bareTarget('bare node:http, same bytes', body), targets);
      if (withWarn) await setLogLevel(cached, 'info');
      rows.push(reference!, gatewayRows[0]!);
      if (withWarn) {
        rows.push({ ...gatewayRows[1]!, scenario: WARN_SCENARIO, target: 'gateway' });
        rows.push({ ...gatewayRows[2]!, scenario: FRESH_WARN_SCENARIO, target: 'gateway' });
        const line = medianCpuDifference(gatewayRows[0]!, gatewayRows[1]!);
        const own = medianCpuDifference(gatewayRows[0]!, gatewayRows[2]!);
        console.log(`  the request line: ${line === undefined ? 'n/a' : fmt(line, 1)} µs of CPU per request (at info minus at warn, median over the pairs; against a gateway of its own at warn ${own === undefined ? 'n/a' : fmt(own, 1)} µs)`);
      }
    }
    if (selected(HEADERS_SCENARIO)) {
      // Informational (no target): the same hit against a bare server that also sends the four
      // response headers the contract requires, to show what they cost on their own.
      const body = blockBody(hash, false);
      const reference: Target = { name: 'bare node:http, same bytes and headers', url: `http://127.0.0.1:${bareWithHeaders.info.port}/`, body, pid: bareWithHeaders.child.pid };
      rows.push(...(await comparePair(HEADERS_SCENARIO, reference, gatewayTarget(cached, body))));
    }
    if (selected(SETTINGS_SCENARIO)) {
      // Its reference is the plain key on the same gateway, in interleaved rounds.
      const body = blockBody(hash, false);
      const plain: Target = { name: 'gateway, key without settings', url: eth(cached), body, pid: cached.child.pid };
      const browser: Target = { ...gatewayTarget(cached, body, `${cached.origin}/eth/v3/${browserSecret}`), headers: { origin: SETTINGS_ORIGIN } };
      const check = await request(browser.url, { method: 'POST', headers: { ...JSON_HEADERS, origin: SETTINGS_ORIGIN }, body });
      if (check.statusCode !== 200 || check.headers['access-control-allow-origin'] !== SETTINGS_ORIGIN) throw new Error(`browser key: HTTP ${check.statusCode}`);
      await check.body.dump();
      rows.push(...(await comparePair(SETTINGS_SCENARIO, plain, browser)));
    }
    if (selected(BATCH_SCENARIO)) {
      const body = batchBody(hash);
      await sameAnswer('batch', eth(cached), bareUrl, body);
      rows.push(...(await comparePair(BATCH_SCENARIO, bareTarget(`bare node:http, ${BATCH_ITEMS}-item batch`, body), gatewayTarget(cached, body))));
    }
    for (const verification of VERIFICATIONS) {
      // The cache is disabled in this process: every call goes to anvil and its answer is verified
      // (with `full`, the non-hydrated call fetches the hydrated block to verify it).
      if (!selected(missScenario(verification))) continue;
      const body = blockBody(hash, false);
      const path = `${uncached.origin}/${verificationNetwork(verification)}/v3/${secret}`;
      await sameAnswer(`cache miss, verification ${verification}`, path, proxyUrl, body, 'miss');
      const reference: Target = { name: 'node:http + undici Pool proxy', url: proxyUrl, body, pid: proxy.child.pid };
      rows.push(...(await comparePair(missScenario(verification), reference, gatewayTarget(uncached, body, path))));
    }
    if (selected(HYDRATED_MISS_SCENARIO)) {
      // With `full`, a non-hydrated miss asks anvil for the hydrated block, which anvil builds far
      // more slowly than the hashes-only form; this row isolates the cost of verifying it.
      const body = blockBody(hash, true);
      await sameAnswer('cache miss, hydrated', eth(uncached), proxyUrl, body, 'miss');
      const reference: Target = { name: 'node:http + undici Pool proxy', url: proxyUrl, body, pid: proxy.child.pid };
      rows.push(...(await comparePair(HYDRATED_MISS_SCENARIO, reference, gatewayTarget(uncached, body))));
    }
    for (const limit of ASSET_LIMITS) {
      // Against a streaming Node proxy in front of the same DAS server: the gateway validates every
      // byte of the answer and charges the call; the proxy pipes the bytes. The validating proxy
      // (the same proxy, holding each answer until the gateway's validator has passed it) is
      // measured in the same pairs: what validating every byte alone leaves of the streaming
      // proxy's speed on this machine.
      if (!selected(assetsScenario(limit))) continue;
      const body = assetsBody(das.info.groupValue, limit);
      const reference: Target = { name: STREAM_PROXY, url: streamProxyUrl, body, pid: streamProxy.child.pid };
      const validating: Target = { name: VALIDATING_PROXY, url: validatingProxyUrl, body, pid: validatingProxy.child.pid };
      rows.push(...(await compareRounds(assetsScenario(limit), reference, [validating, gatewayTarget(cached, body, viaGatewayDas)])));
    }
    if (redisGateway !== undefined) {
      // Its reference is the SQLite-store gateway, measured again in interleaved rounds.
      const body = blockBody(hash, false);
      await sameAnswer('cache hit, Redis store', eth(redisGateway), bareUrl, body, 'hit');
      const sqliteTarget: Target = { name: 'gateway, SQLite store', url: eth(cached), body, pid: cached.child.pid };
      rows.push(...(await comparePair(REDIS_SCENARIO, sqliteTarget, gatewayTarget(redisGateway, body))));
    }
    if (flags.only !== undefined) return { rows, checks: [] };
    const gatewayRss = [cached, uncached, quiet, ...(redisGateway === undefined ? [] : [redisGateway])].map((gateway) => rssBytes(gateway.child.pid) ?? 0);
    return { rows, checks: targetChecks(rows, gatewayRss, await memoryBreakdown(cached), redisGateway !== undefined) };
  }

  const runs: Array<{ rows: Measured[]; checks: Check[] }> = [];
  for (let run = 1; run <= RUNS; run++) runs.push(await runOnce(run));

  // Redis commands and CPU per request on the Redis store, for docs/scaling.md: measured alone
  // (nothing else talks to this Redis), once, after the runs.
  const redisCosts: RedisCostRow[] = [];
  if (redis !== undefined && redisGateway !== undefined && flags.only === undefined) {
    const redisDas = `${redisGateway.origin}/das/v3/${secret}`;
    const scenarios: Array<[string, string, string, number]> = [
      ['cache hit (eth_getBlockByHash)', eth(redisGateway), blockBody(hash, false), 1],
      [`batch of ${BATCH_ITEMS} cache hits (per call)`, eth(redisGateway), batchBody(hash), BATCH_ITEMS],
      ['forwarded call (getAssetsByGroup, limit 1: reserve + settle)', redisDas, assetsBody(das.info.groupValue, 1), 1],
    ];
    process.stdout.write('  Redis cost per request:\n');
    for (const [name, url, body, callsPerRequest] of scenarios) {
      const target: Target = { name: 'gateway, Redis store', url, body, pid: redisGateway.child.pid };
      await load(target, WARMUP_S);
      const before = await redisSnapshot(redis.url);
      const round = await load(target, Math.max(3, Math.min(DURATION_S, 10)));
      const after = await redisSnapshot(redis.url);
      const cost = redisCost(before, after, round.requests * callsPerRequest);
      const gatewayCpuUs = round.cpu === undefined ? undefined : (round.cpu / (round.requests * callsPerRequest)) * 1e6;
      redisCosts.push({ name, cost, gatewayCpuUs, callsPerSecond: (round.requests * callsPerRequest) / round.seconds, errors: round.errors });
      process.stdout.write(`    ${name}: ${fmt(cost.totalPer1000, 0)} commands and ${fmt(cost.cpuMsPer1000, 1)} ms Redis CPU per 1,000 calls; gateway ${gatewayCpuUs === undefined ? '?' : fmt(gatewayCpuUs, 0)} µs/call\n`);
    }
  }

  await redisGateway?.stop();
  if (redis !== undefined) await stopChild(redis.child);
  const logBytes = statSync(cached.logFile).size;
  await Promise.all([cached.stop(), uncached.stop(), quiet.stop(), stopChild(bare.child), stopChild(bareWithHeaders.child), stopChild(proxy.child), stopChild(streamProxy.child), stopChild(validatingProxy.child), stopChild(das.child)]);
  await anvil!.stop();
  anvil = undefined;
  clearTimeout(watchdog);
  if (selected(WS_FANOUT_SCENARIO)) console.log(`\n${await wsFanout()}`);
  if (selected(WORKERS_SCENARIO)) console.log(`\n${await workersBench()}`);
  if (selected(LOGS_SPLIT_SCENARIO)) console.log(`\n${await logsSplit()}`);
  if (selected(CACHE_SCENARIO)) console.log(`\n${await cacheScenarios()}`);
  if (selected(OBSERVABILITY_SCENARIO)) console.log(`\n${await observability()}`);
  if (selected(BUDGETS_SCENARIO)) console.log(`\n${await budgets()}`);

  if (flags.only !== undefined) {
    for (const [index, { rows }] of runs.entries()) {
      if (RUNS > 1) console.log(`\nrun ${index + 1}`);
      console.log(
        `\n${rows.map((row) => `${row.scenario} | ${row.target} | ${Math.round(row.requestsPerSecond)} req/s | p99 ${ms(row.p99)} ms | ${row.cpuUsPerRequest === undefined ? '?' : `${Math.round(row.cpuUsPerRequest)} µs/req (system ${Math.round(row.systemCpuUsPerRequest ?? NaN)})`} | RSS ${mib(row.rss ?? 0)} MiB (peak ${mib(row.peakRss)})`).join('\n')}`,
      );
    }
    if (profileDir !== undefined) console.log(`CPU profiles in ${profileDir} (summarise: node --import tsx bench/profile-summary.ts <file>)`);
    else removeWorkDir();
    return;
  }

  const facts = { data: `${data} The cache gateway (log level info) wrote ${mib(logBytes)} MiB of log lines.`, startedAt, elapsedS: (Date.now() - startedAt.getTime()) / 1000 };
  const generated = report(runs, facts);
  console.log(`\n${generated}\n`);
  writeDoc(DOC, generated, DOC_HEADER);
  const scaling = scalingReport(runs[runs.length - 1]!.rows, redisCosts, facts);
  writeDoc(SCALING_DOC, scaling, SCALING_HEADER);
  console.log(`written to ${DOC} and ${SCALING_DOC}`);
  if (profileDir !== undefined) console.log(`CPU profiles in ${profileDir} (summarise: node --import tsx bench/profile-summary.ts <file>)`);
  else removeWorkDir();
}

/**
 * The work directory holds the gateways' log files, gigabytes after a full run (one JSON line per
 * request): it is removed whatever the outcome, or runs left behind would fill the disk. Kept
 * only with `--profile`, for the profiles in it.
 */
function removeWorkDir(): void {
  if (workDir !== undefined && !flags.profile) rmSync(workDir, { recursive: true, force: true });
}

main().catch((error: unknown) => {
  process.stderr.write(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  killChildren();
  removeWorkDir();
  void anvil?.stop();
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 3_000).unref();
});
