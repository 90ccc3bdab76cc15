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

import autocannon from 'autocannon';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { cpus, arch, platform, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { isDeepStrictEqual, parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { request } from 'undici';
import { stringify as toYaml } from 'yaml';
import { seedAnvil, startAnvil, type AnvilNode } from '../src/devnet/anvil.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CLI = join(ROOT, 'dist', 'cli.js');
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
const REDIS_SCENARIO = 'cache hit, hydrated=false, Redis store';
const HEADERS_SCENARIO = 'cache hit, hydrated=false, reference sends the same headers';
/** A browser key: origin and method lists, the allowed Origin sent; its reference is the plain key on the same gateway. */
const SETTINGS_SCENARIO = 'cache hit, hydrated=false, key with origin and method lists';
const SETTINGS_ORIGIN = 'https://app.example.com';

function selected(scenario: string): boolean {
  return flags.only === undefined || scenario.includes(flags.only);
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
  const env = ['BENCH_DURATION', 'BENCH_CONNECTIONS']
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

/** Clock ticks per second of /proc/<pid>/stat CPU times. */
const CLOCK_TICKS = ((): number => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** User + system CPU seconds a process has used so far, from /proc (Linux); undefined elsewhere. */
function cpuSeconds(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th overall.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return undefined;
  }
}

/** Resident set size of a process, from /proc (Linux); undefined elsewhere or once it exited. */
function rssBytes(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
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
  logFile: string;
  stop(): Promise<void>;
}

/** Block verification settings (DESIGN §5) whose cache misses are measured side by side. */
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
  const configFile = join(dir, `${name}.yaml`);
  const config = {
    server: { host: '127.0.0.1', port },
    // An admin listener, if this build starts one, must not collide with another gateway's.
    admin: { host: '127.0.0.1', port: 0 },
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
  const nodeArgs = options.profileDir === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', options.profileDir, '--cpu-prof-name', `${name}.cpuprofile`];
  const child = track(
    spawn(process.execPath, [...nodeArgs, CLI, 'serve', '--config', configFile], {
      cwd: ROOT,
      stdio: ['ignore', logFd, logFd],
      env: { ...process.env, TOLLGATE_LOG_LEVEL: options.logLevel },
    }),
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
  return { child, origin, logFile, stop: () => stopChild(child) };
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
  errors: number;
  rss?: number;
  /** The highest share of a core the load generator used in any round of this target. */
  clientCpu: number;
  /** The reference row this one is compared with. */
  reference?: Measured;
  /** Per-pair ratios to the reference when both were measured in alternating rounds. */
  pairs?: { rps: number[]; p99: number[] };
}

/** One measured round of one target. */
interface Round {
  requests: number;
  seconds: number;
  errors: number;
  /** Latency of every 2xx response, in milliseconds (autocannon's own histogram keeps whole ms). */
  latencies: Float64Array;
  /** Server CPU seconds over the round, if /proc could tell. */
  cpu: number | undefined;
  /** Share of one core the load generator (this process) used over the round. */
  clientCpu: number;
}

async function load(target: Target, seconds: number): Promise<Round> {
  const latencies: number[] = [];
  const before = cpuSeconds(target.pid);
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
  const after = cpuSeconds(target.pid);
  const client = process.cpuUsage(clientBefore);
  return {
    requests: run.totalCompletedRequests,
    seconds: run.duration,
    errors: run.errors + run.non2xx,
    latencies: Float64Array.from(latencies),
    cpu: before === undefined || after === undefined ? undefined : after - before,
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
  return {
    scenario,
    target: target.name,
    requestsPerSecond: requests / seconds,
    p50: percentile(all, 0.5),
    p99: percentile(all, 0.99),
    cpuUsPerRequest: cpuKnown && requests > 0 ? (cpu / requests) * 1e6 : undefined,
    errors: rounds.reduce((sum, round) => sum + round.errors, 0),
    clientCpu: Math.max(...rounds.map((round) => round.clientCpu)),
    rss: rssBytes(target.pid),
    reference,
  };
}

const ms = (value: number): string => (Number.isFinite(value) ? value.toFixed(2) : 'n/a');

function describe(row: Measured): string {
  const cpu = row.cpuUsPerRequest === undefined ? '' : `, ${Math.round(row.cpuUsPerRequest)} µs CPU/req`;
  return `${Math.round(row.requestsPerSecond)} req/s, p99 ${ms(row.p99)} ms${cpu}, client ${Math.round(100 * row.clientCpu)}%${row.errors > 0 ? `, ${row.errors} ERRORS` : ''}`;
}

/**
 * Measures a reference and the gateway in alternating one-second rounds (ref-gw, gw-ref, ...),
 * one pair per second of the duration; returns [reference, gateway]. A pair's two rounds run
 * within two seconds of each other, so a burst of other load on the machine, which lasts
 * seconds, mostly hits both or spoils only a few pairs: the ratios are medians over the pairs.
 */
async function comparePair(scenario: string, reference: Target, gateway: Target): Promise<[Measured, Measured]> {
  process.stdout.write(`  ${scenario}: `);
  await load(reference, WARMUP_S);
  await load(gateway, WARMUP_S);
  const refRounds: Round[] = [];
  const gwRounds: Round[] = [];
  for (let pair = 0; pair < PAIRS; pair++) {
    // Alternating the order cancels a drift within a pair.
    if (pair % 2 === 0) {
      refRounds.push(await load(reference, ROUND_S));
      gwRounds.push(await load(gateway, ROUND_S));
    } else {
      gwRounds.push(await load(gateway, ROUND_S));
      refRounds.push(await load(reference, ROUND_S));
    }
  }
  const refRow = summarise(scenario, reference, refRounds);
  const gwRow = summarise(scenario, gateway, gwRounds, refRow);
  gwRow.pairs = {
    rps: gwRounds.map((round, index) => rpsOf(round) / rpsOf(refRounds[index]!)),
    p99: gwRounds.map((round, index) => p99Of(round) / p99Of(refRounds[index]!)),
  };
  const r = ratios(gwRow);
  process.stdout.write(`${reference.name} ${describe(refRow)} | gateway ${describe(gwRow)} | ${fmt(r.rps ?? NaN)}× req/s, ${fmt(r.p99 ?? NaN)}× p99\n`);
  return [refRow, gwRow];
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

/** One target alone (warm-up, then the whole duration), compared with an earlier reference row. */
async function measureAlone(scenario: string, target: Target, reference: Measured | undefined): Promise<Measured> {
  process.stdout.write(`  ${scenario}: `);
  await load(target, WARMUP_S);
  const row = summarise(scenario, target, [await load(target, DURATION_S)], reference);
  process.stdout.write(`gateway ${describe(row)}\n`);
  return row;
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
}

function report(rows: Measured[], checks: Check[], facts: { data: string; startedAt: Date; elapsedS: number }): string {
  const cpu = cpus();
  const x = (value: number | undefined): string => (value === undefined ? '' : `${fmt(value)}×`);
  const lines: string[] = [];
  lines.push(`Generated by \`${commandLine()}\` on ${facts.startedAt.toISOString()} (the run took ${Math.round(facts.elapsedS)} s).`);
  lines.push('');
  lines.push(`- Machine: ${cpu.length} cores (${cpu[0]?.model.trim() ?? 'unknown CPU'}), ${platform()} ${arch()}, Node ${process.version}.`);
  lines.push(
    `- Load: autocannon in the orchestrator process, ${CONNECTIONS} connections, pipelining 1. First every server is warmed up (${JIT_WARMUP_S} s of full load per gateway process, ` +
      `${Math.ceil(JIT_WARMUP_S / 2)} s per reference, so that V8 has optimised their hot paths); then per scenario a ${WARMUP_S} s warm-up of each ` +
      `target (not recorded), then ${PAIRS} pairs of ${ROUND_S} s rounds, reference and gateway alternating (ref-gw, gw-ref, ...): ${PAIRS * ROUND_S} s per target.`,
  );
  lines.push(
    `- Gateway: \`node dist/cli.js serve\` as its own process; SQLite store (WAL, temp dir) with metering on (every call charged); ` +
      `cache \`maxBytes\` ${CACHE_MAX_BYTES / MIB} MiB; \`TOLLGATE_LOG_LEVEL=warn\` (no per-request log line) unless the row says \`info\`; ` +
      'its log goes to a file. Team and key made with `tollgate teams create` / `keys create`. The Redis-store row is a fourth gateway on a local `redis-server` (no persistence), with the team and key copied by `tollgate migrate`.',
  );
  lines.push(`- Data: ${facts.data}`);
  lines.push(
    '- Columns: req/s, p50 and p99 are over all rounds of the target (latency of every 2xx response as autocannon timed it, ' +
      'to the microsecond); "req/s vs ref" and "p99 vs ref" are the **median over the pairs** of the pair\'s ratio, with the lowest and ' +
      'highest pair in brackets; "CPU µs/req" is the server process\'s user + system CPU time over the measured rounds divided by ' +
      'the requests it answered (from `/proc/<pid>/stat`); RSS is `VmRSS` of that process right after its last round; "load gen CPU" is ' +
      'the highest share of one core autocannon\'s process used in any round (near 100% the load generator, not the server, would set the pace).',
  );
  lines.push('');
  lines.push('| scenario | target | req/s | p50 ms | p99 ms | CPU µs/req | req/s vs ref | p99 vs ref | CPU/req vs ref | errors | RSS MiB | load gen CPU |');
  lines.push('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const row of rows) {
    const r = ratios(row);
    const cpuUs = row.cpuUsPerRequest === undefined ? 'n/a' : fmt(row.cpuUsPerRequest, 0);
    lines.push(
      `| ${row.scenario} | ${row.target} | ${Math.round(row.requestsPerSecond)} | ${ms(row.p50)} | ${ms(row.p99)} | ${cpuUs} | ` +
        `${ratioText(r.rps, row.pairs?.rps)} | ${ratioText(r.p99, row.pairs?.p99)} | ${x(r.cpu)} | ${row.errors} | ${mib(row.rss)} | ${Math.round(100 * row.clientCpu)}% |`,
    );
  }
  lines.push('');
  lines.push('### Targets');
  lines.push('');
  lines.push('| target | measured | result |');
  lines.push('|---|---|---|');
  for (const check of checks) lines.push(`| ${check.name} | ${check.measured} | ${check.pass ? 'PASS' : '**FAIL**'} |`);
  return lines.join('\n');
}

const DOC_HEADER = `# Benchmarks

The gateway is measured against two references started in the same invocation, on the same
machine, with the same load: a bare \`node:http\` server that answers the same request with the
same bytes (the ceiling for any Node server, for cache hits), and a minimal \`node:http\` +
undici \`Pool\` pass-through proxy in front of the same anvil (the ceiling for any Node proxy,
for cache misses). \`getAssetsByGroup\` is compared with the sample DAS server called directly.

The load generator (autocannon) runs on the same machine as the servers. On a 2-core machine
the load generator and the server under test share the cores (and anvil joins them for cache
misses), so absolute numbers say little about a production host: **the ratios to the reference
are what matter**. Each server (gateway, references, anvil, the sample DAS server) is its own
process, so each one's CPU time and RSS are its own.

Reproduce with \`npm run bench\`, about 9 minutes (\`-- --quick\`: 3 pairs of rounds, 5 s warm-up; \`BENCH_DURATION\` (pairs) and
\`BENCH_CONNECTIONS\` override the defaults; \`-- --profile\` keeps a CPU profile of each gateway
process). The section between the markers below is rewritten by every run; the rest of this
file is not.

`;

function writeDoc(generated: string): void {
  const block = `${START_MARKER}\n${generated}\n${END_MARKER}`;
  mkdirSync(dirname(DOC), { recursive: true });
  if (!existsSync(DOC)) {
    writeFileSync(DOC, `${DOC_HEADER}${block}\n`);
    return;
  }
  const current = readFileSync(DOC, 'utf8');
  const start = current.indexOf(START_MARKER);
  const end = current.indexOf(END_MARKER);
  const next =
    start !== -1 && end > start ? current.slice(0, start) + block + current.slice(end + END_MARKER.length) : `${current.trimEnd()}\n\n${block}\n`;
  writeFileSync(DOC, next);
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
  // 12 scenario pairs (2 warm-ups + 2 × PAIRS rounds, each with a moment to start autocannon) and
  // one gateway-only row, plus start-up.
  const budgetMs = (4 * JIT_WARMUP_S + 12 * (2 * WARMUP_S + 2 * PAIRS * (ROUND_S + 0.5)) + WARMUP_S + DURATION_S) * 1000 + 90_000;
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
    startTsProcess<{ url: string; groupValue: string; size: number }>('sample-das-process.ts', []),
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

  // The gateways, each its own process on the same store: with the cache, without it, and with
  // the cache at log level info. Idle ones cost nothing while another is measured.
  const setup: GatewaySetup = { dbFile, anvilUrl: chain.anvilUrl, dasUrl: das.info.url, secret };
  const [cached, uncached, logged] = await Promise.all([
    startGatewayProcess('gateway-cache', setup, { cacheMaxBytes: CACHE_MAX_BYTES, logLevel: 'warn', profileDir }),
    startGatewayProcess('gateway-no-cache', setup, { cacheMaxBytes: 0, logLevel: 'warn', profileDir }),
    startGatewayProcess('gateway-info-log', setup, { cacheMaxBytes: CACHE_MAX_BYTES, logLevel: 'info', profileDir }),
  ]);
  // The Redis store: the same team and key, copied with `tollgate migrate`, behind a fourth gateway.
  const redis = hasRedisServer() && selected(REDIS_SCENARIO) ? await startRedis() : undefined;
  let redisGateway: GatewayProcess | undefined;
  if (redis !== undefined) {
    await runCli(['migrate', '--from', `sqlite:${dbFile}`, '--to', redis.url]);
    redisGateway = await startGatewayProcess('gateway-redis', setup, {
      cacheMaxBytes: CACHE_MAX_BYTES,
      logLevel: 'warn',
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
  await warmUp(eth(uncached), [blockBody(hash, false)], JIT_WARMUP_S);
  await warmUp(eth(logged), [blockBody(hash, false)], halfWarmUp);
  if (redisGateway !== undefined) await warmUp(eth(redisGateway), [blockBody(hash, false)], JIT_WARMUP_S);
  await warmUp(bareUrl, hits, halfWarmUp);
  await warmUp(`http://127.0.0.1:${bareWithHeaders.info.port}/`, [blockBody(hash, false)], halfWarmUp);
  await warmUp(proxyUrl, [blockBody(hash, false)], halfWarmUp);

  const rows: Measured[] = [];
  console.log(`gateway pids: cache ${cached.child.pid}, no cache ${uncached.child.pid}, info log ${logged.child.pid}`);

  for (const hydrated of [false, true]) {
    if (!selected(`cache hit, hydrated=${hydrated}`)) continue;
    const body = blockBody(hash, hydrated);
    await sameAnswer(`cache hit hydrated=${hydrated}`, eth(cached), bareUrl, body, 'hit');
    rows.push(...(await comparePair(`cache hit, hydrated=${hydrated}`, bareTarget('bare node:http, same bytes', body), gatewayTarget(cached, body))));
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
  if (selected(`batch of ${BATCH_ITEMS} cache hits`)) {
    const body = batchBody(hash);
    await sameAnswer('batch', eth(cached), bareUrl, body);
    rows.push(...(await comparePair(`batch of ${BATCH_ITEMS} cache hits`, bareTarget(`bare node:http, ${BATCH_ITEMS}-item batch`, body), gatewayTarget(cached, body))));
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
  for (const limit of [100, 1000]) {
    if (!selected(`getAssetsByGroup, limit ${limit}`)) continue;
    const body = assetsBody(das.info.groupValue, limit);
    const viaGateway = `${cached.origin}/das/v3/${secret}`;
    await sameAnswer(`getAssetsByGroup limit ${limit}`, viaGateway, das.info.url, body);
    const reference: Target = { name: 'sample DAS server, direct', url: das.info.url, body, pid: das.child.pid };
    rows.push(...(await comparePair(`getAssetsByGroup, limit ${limit}`, reference, gatewayTarget(cached, body, viaGateway))));
  }
  if (redisGateway !== undefined) {
    // Its reference is the SQLite-store gateway, measured again in interleaved rounds.
    const body = blockBody(hash, false);
    await sameAnswer('cache hit, Redis store', eth(redisGateway), bareUrl, body, 'hit');
    const sqliteTarget: Target = { name: 'gateway, SQLite store', url: eth(cached), body, pid: cached.child.pid };
    rows.push(...(await comparePair(REDIS_SCENARIO, sqliteTarget, gatewayTarget(redisGateway, body))));
  }
  const stopRedis = async () => {
    await redisGateway?.stop();
    if (redis !== undefined) await stopChild(redis.child);
  };
  if (flags.only !== undefined) {
    await stopRedis();
    console.log(`\n${rows.map((row) => `${row.scenario} | ${row.target} | ${Math.round(row.requestsPerSecond)} req/s | p99 ${ms(row.p99)} ms | ${row.cpuUsPerRequest === undefined ? '?' : Math.round(row.cpuUsPerRequest)} µs/req | RSS ${mib(row.rss ?? 0)} MiB`).join('\n')}`);
    await Promise.all([cached.stop(), uncached.stop(), logged.stop(), stopChild(bare.child), stopChild(bareWithHeaders.child), stopChild(proxy.child), stopChild(das.child)]);
    await anvil!.stop();
    clearTimeout(watchdog);
    return;
  }
  {
    // The cost of one log line per request: the first scenario again, at info. Its reference is
    // that scenario's bare run (not measured again, to keep the run short).
    const body = blockBody(hash, false);
    await sameAnswer('cache hit at info', eth(logged), bareUrl, body, 'hit');
    const reference = rows.find((row) => row.scenario === 'cache hit, hydrated=false' && row.reference === undefined);
    rows.push(await measureAlone('cache hit, hydrated=false, log level info', gatewayTarget(logged, body), reference));
  }
  const logBytes = statSync(logged.logFile).size;
  const gatewayRss = [cached, uncached, logged, ...(redisGateway === undefined ? [] : [redisGateway])].map((gateway) => rssBytes(gateway.child.pid) ?? 0);

  // Targets.
  const gatewayRow = (scenario: string): Measured => {
    const row = rows.find((candidate) => candidate.scenario === scenario && candidate.reference !== undefined);
    if (row === undefined) throw new Error(`no gateway row for ${scenario}`);
    return row;
  };
  const checks: Check[] = [];
  for (const hydrated of [false, true]) {
    const row = gatewayRow(`cache hit, hydrated=${hydrated}`);
    const r = ratios(row);
    checks.push({ name: `cache hit hydrated=${hydrated}: req/s ≥ 0.8× bare`, measured: ratioText(r.rps, row.pairs?.rps), pass: (r.rps ?? 0) >= 0.8 && row.errors === 0 });
    checks.push({
      name: `cache hit hydrated=${hydrated}: p99 ≤ 1.5× bare`,
      measured: `${ratioText(r.p99, row.pairs?.p99)}; over all rounds ${ms(row.p99)} vs ${ms(row.reference!.p99)} ms`,
      pass: (r.p99 ?? Infinity) <= 1.5,
    });
  }
  {
    const row = gatewayRow(missScenario('full'));
    const r = ratios(row);
    checks.push({ name: 'cache miss, verification full: req/s ≥ 1.2× proxy', measured: ratioText(r.rps, row.pairs?.rps), pass: (r.rps ?? 0) >= 1.2 && row.errors === 0 });
    const hydratedRow = gatewayRow(HYDRATED_MISS_SCENARIO);
    const hydrated = ratios(hydratedRow);
    checks.push({
      name: 'cache miss, hydrated=true, verification full: req/s ≥ 1.2× proxy',
      measured: ratioText(hydrated.rps, hydratedRow.pairs?.rps),
      pass: (hydrated.rps ?? 0) >= 1.2 && hydratedRow.errors === 0,
    });
  }
  if (redisGateway !== undefined) {
    const row = gatewayRow(REDIS_SCENARIO);
    const r = ratios(row);
    checks.push({ name: 'cache hit with the Redis store: req/s ≥ 0.6× the SQLite store', measured: ratioText(r.rps, row.pairs?.rps), pass: (r.rps ?? 0) >= 0.6 && row.errors === 0 });
  }
  const maxRss = Math.max(...gatewayRss);
  checks.push({
    name: `gateway RSS after the run ≤ cache maxBytes + 150 MiB = ${(CACHE_MAX_BYTES + RSS_HEADROOM_BYTES) / MIB} MiB`,
    measured: `${mib(maxRss)} MiB (largest of the gateway processes: ${gatewayRss.map(mib).join(', ')})`,
    pass: maxRss > 0 && maxRss <= CACHE_MAX_BYTES + RSS_HEADROOM_BYTES,
  });

  await stopRedis();
  await Promise.all([cached.stop(), uncached.stop(), logged.stop(), stopChild(bare.child), stopChild(bareWithHeaders.child), stopChild(proxy.child), stopChild(das.child)]);
  await anvil!.stop();
  anvil = undefined;

  const facts = { data: `${data} The info-level run wrote ${mib(logBytes)} MiB of log lines.`, startedAt, elapsedS: (Date.now() - startedAt.getTime()) / 1000 };
  const generated = report(rows, checks, facts);
  console.log(`\n${generated}\n`);
  writeDoc(generated);
  console.log(`written to ${DOC}`);
  if (profileDir !== undefined) console.log(`CPU profiles in ${profileDir} (summarise: node --import tsx bench/profile-summary.ts <file>)`);
  else rmSync(workDir, { recursive: true, force: true });
  clearTimeout(watchdog);
}

main().catch((error: unknown) => {
  process.stderr.write(`bench: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  killChildren();
  void anvil?.stop();
  process.exitCode = 1;
  setTimeout(() => process.exit(1), 3_000).unref();
});
