// Response cache scenarios: hits of eth_getTransactionReceipt and of eth_call at a finalized block
// against the eth_getBlockByHash hit on the same gateway process (interleaved 1 s rounds, ratios
// of medians over the pairs), shared-tier hits (a second gateway without an in-process tier, on
// the same redis-server) with their p50 and p99, and the memory of 100,000 cached entries of a
// realistic mix (in this process, heap and buffers measured around filling the in-process tier).
//
// Standalone:  npm run build && node --expose-gc --import tsx bench/cache-scenarios.ts [--seconds 10]
// From bench/run.ts: `npm run bench -- --only "response cache"` runs these alone.

import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { stringify as toYaml } from 'yaml';
import { cacheKey, canonicalParams } from '../src/cache/cache-key.js';
import { createMemoryTier } from '../src/cache/memory-tier.js';
import { seedAnvil } from '../src/devnet/anvil-seed.js';
import { startAnvil } from '../src/devnet/anvil.js';
import { cpuSeconds } from './proc-stats.js';
import { findWrk, measuredRound, medianPairRatio, prepareWrk, summariseRounds, type MeasuredRound } from './wrk.js';
import { ROOT, freePort, gatewayCommand, runCli } from './local-processes.js';

export const CACHE_SCENARIO = 'response cache: receipt, eth_call and shared-tier hits, memory per 100k entries';

const CONNECTIONS = 50;
const ENTRIES = 100_000;

async function rpc(url: string, method: string, params: unknown[]): Promise<{ result?: unknown; cache: string | null }> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }) });
  return { ...((await response.json()) as { result?: unknown }), cache: response.headers.get('x-cache') };
}

const body = (method: string, params: unknown[]): string => JSON.stringify({ jsonrpc: '2.0', id: 1, method, params });

async function waitFor(what: string, check: () => Promise<boolean>): Promise<void> {
  for (let tries = 0; ; tries += 1) {
    try {
      if (await check()) return;
    } catch {
      // not there yet
    }
    if (tries > 600) throw new Error(`${what}: not within 60 s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

export interface CacheBenchResult {
  rows: Array<{ scenario: string; requestsPerSecond: number; p50: number; p99: number; cpuUsPerRequest: number | undefined; ratio?: number; errors: number }>;
  memory: { entries: number; accountedBytes: number; heapAndBuffersBytes: number; bytesPerEntry: number; answerBytesPerEntry: number };
}

/** The in-process tier filled with ENTRIES answers of a realistic mix (sizes from real anvil answers). */
async function memoryOf(samples: Array<{ method: string; bytes: Buffer; share: number }>): Promise<CacheBenchResult['memory']> {
  const gc = (globalThis as { gc?: () => void }).gc;
  const used = () => {
    gc?.();
    const usage = process.memoryUsage();
    return usage.heapUsed + usage.arrayBuffers;
  };
  const before = used();
  const tier = createMemoryTier({ maxBytes: 4 * 1024 * 1024 * 1024 });
  let answerBytes = 0;
  let index = 0;
  for (const sample of samples) {
    const count = Math.round(ENTRIES * sample.share);
    for (let n = 0; n < count && index < ENTRIES; n += 1, index += 1) {
      // Each entry a distinct call (another block number) with its own copy of a real answer, as the cache keeps them.
      const key = cacheKey('eth', sample.method, canonicalParams([`0x${(1_000_000 + index).toString(16)}`])!);
      tier.set(key, { bytes: Buffer.from(sample.bytes), anchor: { number: 1_000_000 + index, hash: `0x${'ab'.repeat(32)}`, generation: 0 } });
      answerBytes += sample.bytes.length;
    }
  }
  const after = used();
  const stats = tier.stats();
  return {
    entries: stats.entries,
    accountedBytes: stats.bytes,
    heapAndBuffersBytes: after - before,
    bytesPerEntry: (after - before) / stats.entries,
    answerBytesPerEntry: answerBytes / stats.entries,
  };
}

export async function runCacheScenarios(options: { seconds: number }): Promise<CacheBenchResult> {
  const wrk = findWrk();
  if (wrk === undefined) throw new Error('wrk is not installed (apt-get install wrk)');
  const workDir = mkdtempSync(join(tmpdir(), 'tollgate-cache-bench-'));
  const children: ChildProcess[] = [];
  const anvil = await startAnvil();
  try {
    const seed = await seedAnvil(anvil.url, { blocks: 1, txPerBlock: 20 });
    const blockHash = seed.blocksWithTransactions[0]!;
    const tx = seed.transactionHashes[0]!;
    const block = (await rpc(anvil.url, 'eth_getBlockByHash', [blockHash, false])).result as { number: string; miner: string };
    await rpc(anvil.url, 'anvil_mine', ['0x50']);

    const redisPort = await freePort();
    const redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    children.push(redis);
    await waitFor('redis-server', () => new Promise((resolve) => connect(redisPort, '127.0.0.1').once('connect', function (this: ReturnType<typeof connect>) { this.destroy(); resolve(true); }).once('error', () => resolve(false))));

    const dbFile = join(workDir, 'tollgate.db');
    runCli(['teams', 'create', 'bench', '--daily-credits', '1000000000000', '--db', dbFile]);
    const secret = (JSON.parse(runCli(['keys', 'create', '--team', 'bench', '--db', dbFile])) as { secret: string }).secret;
    const shared = { url: `redis://127.0.0.1:${redisPort}`, ttlSeconds: 3600, maxItemBytes: 1_048_576 };

    async function gateway(name: string, maxBytes: number): Promise<{ url: string; pid: number }> {
      const port = await freePort();
      const configFile = join(workDir, `${name}.yaml`);
      writeFileSync(
        configFile,
        toYaml({
          server: { host: '127.0.0.1', port },
          admin: { host: '127.0.0.1', port: 0 },
          store: { driver: 'sqlite', path: dbFile },
          cache: { maxBytes, shared },
          networks: [{ id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], upstreams: [{ id: 'anvil', url: anvil.url }], healthCheck: { intervalMs: 500 } }],
        }),
      );
      const logFd = openSync(join(workDir, `${name}.log`), 'a');
      const command = gatewayCommand(configFile, { logLevel: 'warn' });
      const child = spawn(process.execPath, command.args, { cwd: ROOT, stdio: ['ignore', logFd, logFd], env: command.env });
      closeSync(logFd);
      children.push(child);
      const url = `http://127.0.0.1:${port}/eth/v3/${secret}`;
      await waitFor(`gateway ${name}`, async () => (await rpc(url, 'eth_chainId', [])).result === '0x7a69');
      return { url, pid: child.pid! };
    }
    const inProcess = await gateway('gateway-cache', 256 * 1024 * 1024);
    // No in-process tier: every hit is a shared-tier hit.
    const sharedOnly = await gateway('gateway-shared-only', 0);

    const calls = {
      block: ['eth_getBlockByHash', [blockHash, false]],
      receipt: ['eth_getTransactionReceipt', [tx]],
      call: ['eth_call', [{ to: block.miner, data: '0x' }, block.number]],
    } as const;
    // Wait until finality covers the block (the probes run every 500 ms), then fill both tiers.
    for (const [method, params] of Object.values(calls)) {
      await waitFor(`${method} cached`, async () => {
        await rpc(inProcess.url, method, [...params]);
        return (await rpc(inProcess.url, method, [...params])).cache === 'hit';
      });
      await waitFor(`${method} shared`, async () => (await rpc(sharedOnly.url, method, [...params])).cache === 'hit');
    }

    const files = prepareWrk(workDir);
    const round = (url: string, pid: number, payload: string, seconds: number) =>
      measuredRound(cpuSeconds, { script: files.script, bodyFile: files.bodyFile(payload), url, pid, connections: CONNECTIONS, threads: 2, seconds, timeoutS: 10 });
    const rows: CacheBenchResult['rows'] = [];
    const describe = (scenario: string, rounds: MeasuredRound[], ratio?: number) => {
      rows.push({ scenario, ...summariseRounds(rounds), ratio });
    };

    const blockBody = body(...(calls.block as unknown as [string, unknown[]]));
    for (const target of [calls.block, calls.receipt, calls.call]) await round(inProcess.url, inProcess.pid, body(target[0], [...target[1]]), 2);
    const blockRounds: MeasuredRound[] = [];
    for (const [name, target] of [['eth_getTransactionReceipt hit', calls.receipt], ['eth_call at a finalized block, hit', calls.call]] as const) {
      const payload = body(target[0], [...target[1]]);
      const mine: MeasuredRound[] = [];
      const reference: MeasuredRound[] = [];
      for (let pair = 0; pair < options.seconds; pair += 1) {
        const order = pair % 2 === 0 ? [reference, mine] : [mine, reference];
        for (const list of order) list.push(await round(inProcess.url, inProcess.pid, list === mine ? payload : blockBody, 1));
      }
      describe(name, mine, medianPairRatio(mine, reference));
      blockRounds.push(...reference);
    }
    describe('eth_getBlockByHash hit (reference)', blockRounds);
    const sharedRounds: MeasuredRound[] = [];
    for (let n = 0; n < options.seconds; n += 1) sharedRounds.push(await round(sharedOnly.url, sharedOnly.pid, body(calls.receipt[0], [...calls.receipt[1]]), 1));
    describe('eth_getTransactionReceipt, shared-tier hit (in-process miss)', sharedRounds);

    // Real answers as the mix's templates.
    const answer = async (method: string, params: unknown[]) => Buffer.from(JSON.stringify((await rpc(anvil.url, method, params)).result));
    const receipt = await answer('eth_getTransactionReceipt', [tx]);
    const samples = [
      { method: 'eth_call', bytes: await answer('eth_call', [{ to: block.miner, data: '0x' }, block.number]), share: 0.3 },
      { method: 'eth_getBalance', bytes: await answer('eth_getBalance', [block.miner, block.number]), share: 0.2 },
      { method: 'eth_getTransactionReceipt', bytes: receipt, share: 0.3 },
      { method: 'eth_getBlockByNumber', bytes: await answer('eth_getBlockByNumber', [block.number, false]), share: 0.1 },
      { method: 'eth_getBlockReceipts', bytes: await answer('eth_getBlockReceipts', [block.number]), share: 0.1 },
    ];
    return { rows, memory: await memoryOf(samples) };
  } finally {
    for (const child of children) child.kill('SIGKILL');
    await anvil.stop();
    rmSync(workDir, { recursive: true, force: true });
  }
}

export function formatCacheScenarios(result: CacheBenchResult): string {
  const fmt = (value: number | undefined, digits = 0) => (value === undefined || Number.isNaN(value) ? '?' : value.toFixed(digits));
  const lines = [
    `${CACHE_SCENARIO} (${CONNECTIONS} connections, wrk):`,
    '| scenario | req/s | p50 ms | p99 ms | CPU µs/req | req/s vs eth_getBlockByHash hit (median of pairs) | errors |',
    '|---|---|---|---|---|---|---|',
    ...result.rows.map((row) => `| ${row.scenario} | ${fmt(row.requestsPerSecond)} | ${fmt(row.p50, 2)} | ${fmt(row.p99, 2)} | ${fmt(row.cpuUsPerRequest)} | ${row.ratio === undefined ? '—' : `${fmt(row.ratio, 2)}×`} | ${row.errors} |`),
    '',
    `Memory: ${result.memory.entries} entries (30% eth_call, 20% eth_getBalance, 30% receipts, 10% blocks by number, 10% block receipts; ` +
      `${fmt(result.memory.answerBytesPerEntry)} answer bytes per entry on average): ${fmt(result.memory.heapAndBuffersBytes / 1024 / 1024, 1)} MiB of heap and buffers, ` +
      `${fmt(result.memory.bytesPerEntry)} bytes per entry; the tier accounts ${fmt(result.memory.accountedBytes / 1024 / 1024, 1)} MiB against cache.maxBytes.`,
  ];
  return lines.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { seconds: { type: 'string', default: '10' } } });
  runCacheScenarios({ seconds: Number(values.seconds) }).then(
    (result) => console.log(formatCacheScenarios(result)),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
