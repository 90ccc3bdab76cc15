// What traces and the request explorer cost a cache hit: the `eth_getBlockByHash` hit
// (hydrated=false, log level info) on three gateway processes over one SQLite store and one anvil:
//   plain     tracing off, explorer off (the reference);
//   explorer  the request explorer on (the default), tracing off;
//   traced    tracing at sample ratio 0.01 to a real OTLP/HTTP receiver (in this process), and
//             the explorer on.
// Each is measured against `plain` in interleaved 1 s wrk rounds, in rotations: the three are
// started again for each rotation in a rotated order (a process's place on a small machine can
// weigh as much as its configuration), and the ratio is the median over every pair of every
// rotation. Then the explorer's store writes per 1,000 requests and the
// spans exported, read from the traced gateway's /metrics and the receiver.
// Six rotations by default: with three, the traced gateway's ratio moved by ±5% from run to run,
// as much as the target's margin (docs/benchmarks.md, traces and the request explorer).
//
// Standalone:  npm run build && node --import tsx bench/observability.ts [--seconds 8] [--rotations 6]
// From bench/run.ts: `npm run bench -- --only "traces and the request explorer"` runs this alone.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { seedAnvil } from '../src/devnet/anvil-seed.js';
import { startAnvil } from '../src/devnet/anvil.js';
import { cpuSeconds } from './proc-stats.js';
import { findWrk, measuredRound, pairRatios, prepareWrk, summariseRounds, type MeasuredRound } from './wrk.js';
import { gatewayMetrics, metricSum, runCli, startGateway, type GatewayChild } from './local-processes.js';

export const OBSERVABILITY_SCENARIO = 'traces and the request explorer: cache hit with each on vs off';

const CONNECTIONS = 50;
const SAMPLE_RATIO = 0.01;

export interface ObservabilityResult {
  rows: Array<{ scenario: string; requestsPerSecond: number; p99: number; cpuUsPerRequest: number | undefined; ratio: number | undefined; errors: number }>;
  /** From the traced gateway over the whole run. */
  requests: number;
  explorerWrites: number;
  explorerRecords: number;
  spans: number;
  exports: number;
}


async function post(url: string, body: string): Promise<{ status: number; cache: string | null; text: string }> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: response.status, cache: response.headers.get('x-cache'), text: await response.text() };
}

/**
 * A collector that takes OTLP/HTTP JSON and counts spans, in a process of its own (as a collector
 * is): what exporting costs is measured on the gateway's side only. `GET /count` answers its counts.
 */
const RECEIVER = `
const { createServer } = require('node:http');
let spans = 0, exports = 0;
const server = createServer((req, res) => {
  if (req.method === 'GET') return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ spans, exports }));
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    exports += 1;
    spans += (Buffer.concat(chunks).toString('utf8').match(/"spanId"/g) || []).length;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
});
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
`;

async function startReceiver(): Promise<{ url: string; counts: () => Promise<{ spans: number; exports: number }>; child: ChildProcess }> {
  const child = spawn(process.execPath, ['-e', RECEIVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('error', reject);
    child.stdout!.once('data', (chunk: Buffer) => resolve(Number(chunk.toString('utf8').trim())));
  });
  const origin = `http://127.0.0.1:${port}`;
  return { url: `${origin}/v1/traces`, counts: async () => (await (await fetch(`${origin}/count`)).json()) as { spans: number; exports: number }, child };
}

/** An unlabelled counter's value. */
function metricValue(text: string, name: string): number {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name} `));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

/** Rotations of a full run (`npm run bench`), and of this script alone. */
export const DEFAULT_ROTATIONS = 6;

export async function runObservability(options: { seconds: number; rotations: number }): Promise<ObservabilityResult> {
  const wrk = findWrk();
  if (wrk === undefined) throw new Error('wrk is not installed (apt-get install wrk)');
  const workDir = mkdtempSync(join(tmpdir(), 'tollgate-observability-bench-'));
  const children: ChildProcess[] = [];
  const anvil = await startAnvil();
  const receiver = await startReceiver();
  try {
    const seed = await seedAnvil(anvil.url, { blocks: 1, txPerBlock: 20 });
    const hash = seed.blocksWithTransactions[0]!;
    const dbFile = join(workDir, 'tollgate.db');
    runCli(['teams', 'create', 'bench', '--daily-credits', '1000000000000', '--db', dbFile]);
    const secret = (JSON.parse(runCli(['keys', 'create', '--team', 'bench', '--db', dbFile])) as { secret: string }).secret;

    async function gateway(name: string, sections: Record<string, unknown>): Promise<GatewayChild> {
      const started = await startGateway({
        dir: workDir,
        name,
        keyPath: `/eth/v3/${secret}`,
        config: {
          store: { driver: 'sqlite', path: dbFile },
          cache: { maxBytes: 256 * 1024 * 1024 },
          networks: [{ id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], upstreams: [{ id: 'anvil', url: anvil.url }] }],
          ...sections,
        },
      });
      children.push(started.child);
      return started;
    }
    const roles = [
      { key: 'plain', name: 'tracing off, explorer off (reference)', sections: { explorer: { enabled: false } } },
      { key: 'explorer', name: 'explorer on, tracing off (the default)', sections: {} },
      { key: 'traced', name: `tracing at ${SAMPLE_RATIO} and the explorer on`, sections: { tracing: { otlpUrl: receiver.url, sampleRatio: SAMPLE_RATIO, batchDelayMs: 1_000 } } },
    ] as const;
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash, false] });
    const files = prepareWrk(workDir);
    const bodyFile = files.bodyFile(body);
    const round = (target: { url: string; pid: number }, seconds: number) =>
      measuredRound(cpuSeconds, { script: files.script, bodyFile, url: target.url, pid: target.pid, connections: CONNECTIONS, threads: 1, seconds, timeoutS: 10 });

    // Rotations: the three configurations are started in a rotated order each time (each takes
    // each start position once) and the measuring order rotates with them, since on a small
    // machine a process's place can weigh as much as what it runs. Ratios are per interleaved
    // pair with the plain gateway of the same rotation; the median is over every pair.
    const rounds = new Map<string, MeasuredRound[]>(roles.map((role) => [role.key, []]));
    const ratios = new Map<string, number[]>(roles.map((role) => [role.key, []]));
    let tracedMetrics = '';
    /** The receiver's counts when the last rotation starts: its traced gateway's spans are the rest. */
    let spansBefore = 0;
    let exportsBefore = 0;
    for (let rotation = 0; rotation < options.rotations; rotation += 1) {
      ({ spans: spansBefore, exports: exportsBefore } = await receiver.counts());
      const order = roles.map((_, index) => roles[(index + rotation) % roles.length]!);
      const started = new Map<string, Awaited<ReturnType<typeof gateway>>>();
      for (const role of order) started.set(role.key, await gateway(`${role.key}-${rotation}`, role.sections));
      for (const target of started.values()) {
        await post(target.url, body);
        const hit = await post(target.url, body);
        if (hit.status !== 200 || hit.cache !== 'hit') throw new Error(`not a cache hit: HTTP ${hit.status}, X-Cache ${hit.cache}`);
      }
      // Warm: V8 keeps optimising a gateway's request path for about 15 s of full load.
      for (const target of started.values()) await round(target, 15);
      const plain = started.get('plain')!;
      for (const role of order.filter((candidate) => candidate.key !== 'plain')) {
        const mine: MeasuredRound[] = [];
        const theirs: MeasuredRound[] = [];
        for (let pair = 0; pair < options.seconds; pair += 1) {
          const sequence = pair % 2 === 0 ? [theirs, mine] : [mine, theirs];
          for (const list of sequence) list.push(await round(list === mine ? started.get(role.key)! : plain, 1));
        }
        rounds.get(role.key)!.push(...mine);
        rounds.get('plain')!.push(...theirs);
        ratios.get(role.key)!.push(...pairRatios(mine, theirs));
      }
      if (rotation === options.rotations - 1) {
        // Everything the traced gateway has written and exported: wait for its last explorer batch (5 s) and export.
        await new Promise((resolve) => setTimeout(resolve, 6_000));
        tracedMetrics = await gatewayMetrics(started.get('traced')!);
      }
      for (const child of children.splice(0)) child.kill('SIGKILL');
    }
    const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
    const rows: ObservabilityResult['rows'] = [];
    for (const role of [roles[1], roles[2], roles[0]]) {
      const { requestsPerSecond, p99, cpuUsPerRequest, errors } = summariseRounds(rounds.get(role.key)!);
      const pairs = ratios.get(role.key)!;
      rows.push({ scenario: role.name, requestsPerSecond, p99, cpuUsPerRequest, ratio: role.key === 'plain' ? undefined : median(pairs), errors });
    }
    const metrics = tracedMetrics;
    const received = await receiver.counts();
    return {
      rows,
      requests: metricSum(metrics, 'tollgate_requests_total'),
      explorerWrites: metricValue(metrics, 'tollgate_explorer_writes_total'),
      explorerRecords: metricValue(metrics, 'tollgate_explorer_records_total'),
      spans: received.spans - spansBefore,
      exports: received.exports - exportsBefore,
    };
  } finally {
    for (const child of children) child.kill('SIGKILL');
    receiver.child.kill('SIGKILL');
    await anvil.stop();
    rmSync(workDir, { recursive: true, force: true });
  }
}

export function formatObservability(result: ObservabilityResult): string {
  const fmt = (value: number | undefined, digits = 0) => (value === undefined || Number.isNaN(value) ? '?' : value.toFixed(digits));
  const perThousand = result.requests === 0 ? undefined : (result.explorerWrites / result.requests) * 1000;
  return [
    `${OBSERVABILITY_SCENARIO} (eth_getBlockByHash hit, hydrated=false, log level info, ${CONNECTIONS} connections, wrk, interleaved 1 s rounds, start order rotated):`,
    '| gateway | req/s | p99 ms | CPU µs/req | req/s vs tracing off, explorer off (median of all pairs) | errors |',
    '|---|---|---|---|---|---|',
    ...result.rows.map((row) => `| ${row.scenario} | ${fmt(row.requestsPerSecond)} | ${fmt(row.p99, 2)} | ${fmt(row.cpuUsPerRequest, 1)} | ${row.ratio === undefined ? '—' : `${fmt(row.ratio, 3)}×`} | ${row.errors} |`),
    '',
    `The traced gateway of the last rotation: ${result.requests} requests, ${result.explorerWrites} explorer store writes ` +
      `(${fmt(perThousand, 2)} per 1,000 requests) holding ${result.explorerRecords} records; ${result.spans} spans exported in ${result.exports} export requests ` +
      `(${fmt(result.requests === 0 ? undefined : (result.spans / result.requests) * 100, 2)} % of requests, sample ratio ${SAMPLE_RATIO}).`,
  ].join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { seconds: { type: 'string', default: '8' }, rotations: { type: 'string', default: String(DEFAULT_ROTATIONS) } } });
  runObservability({ seconds: Number(values.seconds), rotations: Number(values.rotations) }).then(
    (result) => console.log(formatObservability(result)),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
