// Two gateways that differ only in Node flags, measured against each other in interleaved wrk
// rounds: the way to try a V8 or Node flag before it joins the `tollgate` command's first line.
//
// Both are cache gateways over one SQLite store (metering on, log level info), pinned to the same
// core like every bench gateway; each takes 15 s of full load first (V8 keeps optimising the
// request path that long), in 3 s rounds taken in turns, so that neither waits idle longer than
// the other before the pairs. Then pairs of rounds on the same request, A-B, B-A, ...; per pair
// the ratio of B's requests per second to A's and of B's CPU per request to A's, and their
// medians. A starts first unless `--b-first` is given. On 1.6 MiB pages the gateway started first
// read 1–13% ahead in control runs (docs/benchmarks.md, "Which gateway starts first"), so a
// difference there counts only if it holds in both orders.
// A run with the same flags on both sides (neither `--a` nor `--b`) is the control: how far two
// identical processes read apart here.
//
// The request: an `eth_getBlockByHash` cache hit (a block of 20 transactions, hydrated=false), or
// with `--limit N` page 1 of a `getAssetsByGroup` collection at that limit, from the sample DAS
// server in this process (cached by neither gateway: every page is forwarded and validated).
//
//   npm run build && node --import tsx bench/flags-ab.ts --b="--single-threaded-gc" [--a=""]
//     [--pairs 10] [--seconds 2] [--limit 1000] [--b-first]
// Flags go as `--a=…` and `--b=…`: a separate value that starts with `--` reads as an option.
//
// Not part of `npm run bench`; docs/benchmarks.md ("Node flags tried in pairs") has its runs.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { seedAnvil } from '../src/devnet/anvil-seed.js';
import { startAnvil } from '../src/devnet/anvil.js';
import { startSampleDasServer, type SampleDasServer } from '../src/devnet/sample-das/index.js';
import { GATEWAY_FLAGS, runCli, startGateway, type GatewayChild } from './local-processes.js';
import { cpuSeconds } from './proc-stats.js';
import { findWrk, measuredRound, median, pairRatios, prepareWrk, summariseRounds, type MeasuredRound } from './wrk.js';

const { values } = parseArgs({
  options: {
    a: { type: 'string', default: '' },
    b: { type: 'string', default: '' },
    pairs: { type: 'string', default: '10' },
    seconds: { type: 'string', default: '2' },
    limit: { type: 'string', default: '0' },
    'b-first': { type: 'boolean', default: false },
  },
});
const flagsOf = (text: string): string[] => text.split(/\s+/).filter((flag) => flag !== '');
const A_FLAGS = flagsOf(values.a);
const B_FLAGS = flagsOf(values.b);
const PAIRS = Number(values.pairs);
const SECONDS = Number(values.seconds);
const LIMIT = Number(values.limit);
const CONNECTIONS = 50;
const WARM_UP_S = 15;
const WARM_UP_ROUND_S = 3;

if (findWrk() === undefined) throw new Error('wrk is not installed (apt-get install wrk)');
const workDir = mkdtempSync(join(tmpdir(), 'tollgate-flags-ab-'));
const anvil = await startAnvil();
let das: SampleDasServer | undefined;
const gateways: GatewayChild[] = [];
try {
  if (LIMIT > 0) das = await startSampleDasServer();
  const hash = (await seedAnvil(anvil.url, { blocks: 1, txPerBlock: 20 })).blocksWithTransactions[0]!;
  const dbFile = join(workDir, 'tollgate.db');
  runCli(['teams', 'create', 'bench', '--daily-credits', '1000000000000', '--db', dbFile]);
  const secret = (JSON.parse(runCli(['keys', 'create', '--team', 'bench', '--db', dbFile])) as { secret: string }).secret;

  const largest = das === undefined ? undefined : [...das.dataset.collections].sort((x, y) => y.size - x.size)[0]!;
  const network = das === undefined ? 'eth' : 'das';
  const body = JSON.stringify(
    largest === undefined
      ? { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash, false] }
      : { jsonrpc: '2.0', id: 1, method: 'getAssetsByGroup', params: { groupKey: 'collection', groupValue: largest.id, limit: LIMIT, page: 1 } },
  );
  const config = {
    store: { driver: 'sqlite', path: dbFile },
    cache: { maxBytes: 256 * 1024 * 1024 },
    networks: [
      { id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], upstreams: [{ id: 'anvil', url: anvil.url }] },
      ...(das === undefined ? [] : [{ id: 'das', kind: 'asset', baseUrls: ['*/das'], upstreams: [{ id: 'sample-das', url: das.url }] }]),
    ],
  };
  const starts = [['a', A_FLAGS], ['b', B_FLAGS]] as const;
  for (const [name, extraFlags] of values['b-first'] ? [...starts].reverse() : starts) {
    gateways.push(await startGateway({ dir: workDir, name, keyPath: `/eth/v3/${secret}`, config, extraFlags }));
  }
  const [a, b] = (values['b-first'] ? [...gateways].reverse() : gateways) as [GatewayChild, GatewayChild];
  const urlOf = (gateway: GatewayChild) => gateway.url.replace('/eth/v3/', `/${network}/v3/`);

  const files = prepareWrk(workDir);
  const bodyFile = files.bodyFile(body);
  const round = (gateway: GatewayChild, seconds: number) =>
    measuredRound(cpuSeconds, { script: files.script, bodyFile, url: urlOf(gateway), pid: gateway.pid, connections: CONNECTIONS, threads: 1, seconds, timeoutS: 10 });
  for (let turn = 0; turn < WARM_UP_S / WARM_UP_ROUND_S; turn += 1) {
    for (const gateway of turn % 2 === 0 ? gateways : [...gateways].reverse()) {
      const warm = await round(gateway, WARM_UP_ROUND_S);
      if (warm.run.errors + warm.run.non2xx > 0) throw new Error(`gateway ${gateway.pid} failed ${warm.run.errors + warm.run.non2xx} requests while warming up`);
    }
  }

  const roundsA: MeasuredRound[] = [];
  const roundsB: MeasuredRound[] = [];
  const perRequestUs = (measured: MeasuredRound) => summariseRounds([measured]).cpuUsPerRequest!;
  for (let pair = 0; pair < PAIRS; pair += 1) {
    const order = pair % 2 === 0 ? [a, b] : [b, a];
    for (const gateway of order) (gateway === a ? roundsA : roundsB).push(await round(gateway, SECONDS));
    const [lastA, lastB] = [roundsA.at(-1)!, roundsB.at(-1)!];
    console.log(
      `pair ${pair + 1}: A ${(lastA.run.requests / lastA.run.seconds).toFixed(0)} req/s, ${perRequestUs(lastA).toFixed(1)} µs/req | ` +
        `B ${(lastB.run.requests / lastB.run.seconds).toFixed(0)} req/s, ${perRequestUs(lastB).toFixed(1)} µs/req`,
    );
  }
  const cpuRatios = roundsB.map((measured, index) => perRequestUs(measured) / perRequestUs(roundsA[index]!));
  const [sumA, sumB] = [summariseRounds(roundsA), summariseRounds(roundsB)];
  const show = (flags: string[]) => [...GATEWAY_FLAGS, ...flags].join(' ');
  console.log(`\n${LIMIT > 0 ? `getAssetsByGroup limit ${LIMIT}` : 'cache hit, hydrated=false'}, ${PAIRS} pairs of ${SECONDS} s rounds, ${values['b-first'] ? 'B' : 'A'} started first`);
  console.log(`A: node ${show(A_FLAGS)}: ${sumA.requestsPerSecond.toFixed(0)} req/s, p99 ${sumA.p99.toFixed(2)} ms, ${sumA.cpuUsPerRequest?.toFixed(1)} µs/req, errors ${sumA.errors}`);
  console.log(`B: node ${show(B_FLAGS)}: ${sumB.requestsPerSecond.toFixed(0)} req/s, p99 ${sumB.p99.toFixed(2)} ms, ${sumB.cpuUsPerRequest?.toFixed(1)} µs/req, errors ${sumB.errors}`);
  /** The median of per-pair ratios, with the lowest and highest in brackets. */
  const spread = (ratios: number[]) => `${median(ratios).toFixed(3)} (${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)})`;
  console.log(`B ÷ A, median over the pairs: req/s ${spread(pairRatios(roundsB, roundsA))}, CPU per request ${spread(cpuRatios)}`);
} finally {
  for (const gateway of gateways) gateway.child.kill('SIGKILL');
  await das?.close();
  await anvil.stop();
  rmSync(workDir, { recursive: true, force: true });
}
