// eth_getLogs split scenario: one wide eth_getLogs call that the gateway answers from 20 aligned
// chunks (the upstream's getLogs.maxRange is a twentieth of the range), cold (`Cache-Control:
// no-cache`: every chunk asked of anvil) and warm (the response cache may answer the finalized
// chunks), against the same call straight to anvil, which has no cap and answers it in one
// piece; calls alternate between the two. Reports latency (median of sequential calls), upstream
// calls per gateway call (from the gateway's own metric) and the gateway's CPU per chunk (from
// /proc: the gateway is its own `node dist/cli.js serve` process, SQLite store, metering on).
//
// The chain: 2,000 blocks in which every tenth block has a call of the log emitter
// (test/helpers/log-emitter.ts, two logs per call), then a chunk and 100 empty ones so that the whole range
// is finalized (anvil: 64 blocks behind its head); a 2,000-block call in chunks of 100. By
// default a tenth of the production example (20,000 blocks in chunks of 1,000), because anvil's
// cost per mined block grows with the chain's length (20,000 blocks take minutes to mine), and
// the gateway's work is per chunk and per log, not per block; `--blocks 20000` runs that example.
//
// Standalone:  npm run build && node --import tsx bench/logs-split.ts [--calls 30] [--blocks 20000]
// From bench/run.ts: `npm run bench -- --only "eth_getLogs split"` runs this scenario alone.

import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { stringify as toYaml } from 'yaml';
import { startAnvil } from '../src/devnet/anvil.js';
import { buildEmittingChain } from '../test/helpers/log-emitter.js';
import { cpuSeconds } from './proc-stats.js';
import { ROOT, freePort, gatewayCommand, runCli } from './local-processes.js';

export const LOGS_SPLIT_SCENARIO = 'eth_getLogs split into 20 chunks';

/** The call's range in blocks by default (`--blocks 20000` for the production-sized example: several minutes of mining). */
const DEFAULT_RANGE_BLOCKS = 2_000;
const CHUNKS = 20;
const ADMIN_TOKEN = 'bench-admin-token-0123456789';

export interface LogsSplitPhase {
  /** Median latency of one call, in ms. */
  medianMs: number;
  /** Upstream calls per gateway call (gateway phases only). */
  upstreamCallsPerCall?: number;
  /** Gateway CPU (user + system) per chunk of a call, in µs (gateway phases only). */
  cpuUsPerChunk?: number;
}

export interface LogsSplitResult {
  calls: number;
  /** Blocks in the call's range (CHUNKS chunks of a twentieth each). */
  rangeBlocks: number;
  logs: number;
  direct: LogsSplitPhase;
  cold: LogsSplitPhase;
  warm: LogsSplitPhase;
}

async function post(url: string, body: string): Promise<string> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return response.text();
}

function median(values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y);
  return sorted[Math.floor(sorted.length / 2)]!;
}

/** The sum of the gateway's tollgate_logs_upstream_calls histogram so far. */
async function upstreamCallsSum(adminOrigin: string): Promise<number> {
  const text = await (await fetch(`${adminOrigin}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith('tollgate_logs_upstream_calls_sum{'));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

/** The finalized block the gateway's probes last read for the anvil upstream (undefined: not yet). */
async function probedFinalized(adminOrigin: string): Promise<number | undefined> {
  const text = await (await fetch(`${adminOrigin}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith('tollgate_upstream_finalized_block{network="eth",upstream="anvil"}'));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

export async function runLogsSplit(options: { calls: number; blocks?: number }): Promise<LogsSplitResult> {
  const RANGE_BLOCKS = options.blocks ?? DEFAULT_RANGE_BLOCKS;
  if (RANGE_BLOCKS % CHUNKS !== 0) throw new Error(`--blocks must be a multiple of ${CHUNKS}`);
  const workDir = mkdtempSync(join(tmpdir(), 'tollgate-logs-bench-'));
  const anvil = await startAnvil();
  let gateway: ChildProcess | undefined;
  try {
    // The range starts at the first chunk boundary after the first log, so it ends up to a chunk
    // past the emitting blocks: the empty tail covers that chunk and anvil's 64 unfinalized blocks.
    const chain = await buildEmittingChain(anvil.url, { sparseCalls: RANGE_BLOCKS / 10, gap: 9, denseBlocks: 0, densePerBlock: 0, tail: RANGE_BLOCKS / CHUNKS + 100 });
    const dbFile = join(workDir, 'tollgate.db');
    runCli(['teams', 'create', 'bench', '--daily-credits', '1000000000000', '--db', dbFile]);
    const secret = (JSON.parse(runCli(['keys', 'create', '--team', 'bench', '--db', dbFile])) as { secret: string }).secret;
    const [port, adminPort] = [await freePort(), await freePort()];
    const configFile = join(workDir, 'gateway.yaml');
    writeFileSync(
      configFile,
      toYaml({
        server: { host: '127.0.0.1', port },
        admin: { host: '127.0.0.1', port: adminPort, token: ADMIN_TOKEN },
        store: { driver: 'sqlite', path: dbFile },
        networks: [
          {
            id: 'eth',
            kind: 'evm',
            chainId: 31337,
            baseUrls: ['*/eth'],
            getLogs: { maxRange: RANGE_BLOCKS },
            upstreams: [{ id: 'anvil', url: anvil.url, getLogs: { maxRange: RANGE_BLOCKS / CHUNKS } }],
          },
        ],
      }),
    );
    const logFd = openSync(join(workDir, 'gateway.log'), 'a');
    const command = gatewayCommand(configFile, { logLevel: 'warn' });
    gateway = spawn(process.execPath, command.args, { cwd: ROOT, stdio: ['ignore', logFd, logFd], env: command.env });
    closeSync(logFd);
    const gatewayUrl = `http://127.0.0.1:${port}/eth/v3/${secret}`;
    const adminOrigin = `http://127.0.0.1:${adminPort}`;
    for (let tries = 0; ; tries += 1) {
      try {
        if ((await post(gatewayUrl, '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}')).includes('0x7a69')) break;
      } catch {
        // not listening yet
      }
      if (tries > 200) throw new Error('the gateway did not start');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }

    // The range starts on a chunk boundary so the call is exactly CHUNKS chunks.
    const from = Math.ceil(chain.firstLogBlock / (RANGE_BLOCKS / CHUNKS)) * (RANGE_BLOCKS / CHUNKS);
    // The cache keeps a chunk only once the probes have seen its block finalized: wait for that,
    // or "warm" would measure a warmed-up gateway that still asks anvil for every chunk.
    for (let tries = 0; ((await probedFinalized(adminOrigin)) ?? -1) < from + RANGE_BLOCKS - 1; tries += 1) {
      if (tries > 300) throw new Error('the gateway never saw the range finalized');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const filter = { address: chain.contract, fromBlock: `0x${from.toString(16)}`, toBlock: `0x${(from + RANGE_BLOCKS - 1).toString(16)}` };
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getLogs', params: [filter] });
    const reference = JSON.parse(await post(anvil.url, body)) as { result: unknown[] };
    const answer = JSON.parse(await post(gatewayUrl, body)) as { result?: unknown[] };
    if (JSON.stringify(answer.result) !== JSON.stringify(reference.result)) throw new Error('the gateway answer differs from anvil’s');

    const timed = async (url: string, headers: Record<string, string> = {}): Promise<number> => {
      const started = performance.now();
      const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
      await response.arrayBuffer();
      return performance.now() - started;
    };
    // Both servers warmed up first (V8 compiles the gateway's hot paths; anvil reads its blocks).
    for (let index = 0; index < 5; index += 1) {
      await timed(anvil.url);
      await timed(gatewayUrl, { 'cache-control': 'no-cache' });
    }

    /**
     * Calls to anvil and the gateway in alternating pairs, so load from elsewhere on the machine
     * hits both. Cold: `Cache-Control: no-cache`, every chunk asked of anvil again. Warm: the
     * cache may answer. The gateway's CPU is read around its calls only.
     */
    async function pairs(headers: Record<string, string>): Promise<{ direct: number[]; gateway: LogsSplitPhase }> {
      const directMs: number[] = [];
      const gatewayMs: number[] = [];
      let cpu = 0;
      const callsBefore = await upstreamCallsSum(adminOrigin);
      for (let index = 0; index < options.calls; index += 1) {
        directMs.push(await timed(anvil.url));
        const cpuBefore = cpuSeconds(gateway!.pid) ?? 0;
        gatewayMs.push(await timed(gatewayUrl, headers));
        cpu += (cpuSeconds(gateway!.pid) ?? 0) - cpuBefore;
      }
      return {
        direct: directMs,
        gateway: {
          medianMs: median(gatewayMs),
          upstreamCallsPerCall: ((await upstreamCallsSum(adminOrigin)) - callsBefore) / options.calls,
          cpuUsPerChunk: (cpu / (options.calls * CHUNKS)) * 1e6,
        },
      };
    }

    const coldRun = await pairs({ 'cache-control': 'no-cache' });
    const warmRun = await pairs({});
    const direct = { medianMs: median([...coldRun.direct, ...warmRun.direct]) };
    const [cold, warm] = [coldRun.gateway, warmRun.gateway];
    return { calls: options.calls, rangeBlocks: RANGE_BLOCKS, logs: reference.result.length, direct, cold, warm };
  } finally {
    gateway?.kill('SIGTERM');
    await anvil.stop();
    rmSync(workDir, { recursive: true, force: true });
  }
}

export function formatLogsSplit(result: LogsSplitResult): string {
  const phase = (name: string, value: LogsSplitPhase) => {
    const cpu = value.cpuUsPerChunk === undefined ? '' : `, gateway CPU ${value.cpuUsPerChunk.toFixed(0)} µs per chunk of the call`;
    const calls = value.upstreamCallsPerCall === undefined ? '' : `, ${value.upstreamCallsPerCall.toFixed(1)} upstream calls per call`;
    return `${name} ${value.medianMs.toFixed(1)} ms (${(value.medianMs / result.direct.medianMs).toFixed(2)}× anvil direct)${calls}${cpu}`;
  };
  return (
    `${LOGS_SPLIT_SCENARIO}: a ${result.rangeBlocks}-block call, ${result.logs} logs, ${result.calls} sequential calls per phase; ` +
    `anvil direct (one piece) ${result.direct.medianMs.toFixed(1)} ms; ${phase('cold', result.cold)}; ${phase('warm', result.warm)}`
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { calls: { type: 'string', default: '30' }, blocks: { type: 'string', default: String(DEFAULT_RANGE_BLOCKS) } } });
  runLogsSplit({ calls: Number(values.calls), blocks: Number(values.blocks) }).then(
    (result) => console.log(formatLogsSplit(result)),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
