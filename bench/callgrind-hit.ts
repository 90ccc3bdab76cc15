// Instructions per `eth_getBlockByHash` cache hit (hydrated=false), counted by valgrind's
// callgrind on the gateway's main thread: unlike time, the count repeats within ~1–2% whatever
// else the machine runs, so builds can be compared on a shared machine (docs/benchmarks.md, "The
// `eth_getBlockByHash` hit row before and after").
//
// The gateway is the built CLI (`dist/cli.js serve`) under `valgrind --tool=callgrind
// --instr-atstart=no --separate-threads=yes` with `node --perf-basic-prof` (JIT-compiled
// functions get their JavaScript names in /tmp/perf-<pid>.map, copied next to the dumps), SQLite
// store, metering on, log level warn (`--log-level info`: the default level, one line per request,
// written to /dev/null), the same anvil as the three evm networks of bench/run.ts, health probes
// and the request explorer off (under valgrind a probe costs what thousands of hits do, and the
// work of both follows the run's length, not its requests). From this process, over 50 keep-alive
// connections: 30,000 warm-up hits, a 5 s pause for queued compilations, 2,000 more, then
// collection on (`callgrind_control -i on`), 5,000 measured hits on the same connections,
// collection off and a dump. Printed: the main thread's instructions / 5,000.
//
//   npm run build && node --import tsx bench/callgrind-hit.ts [--out dir] [--measured 5000] [--forwarded]
//   (`--batch 50`: each request a batch of 50 such hits, counted per request;
//   `--forwarded`: every call sent with `Cache-Control: no-cache`, so the miss path is counted:
//   reserved, forwarded to anvil, verified, settled; `--verification header|off`: through the network
//   with that setting instead of `full`, so that a forwarded call is one upstream call;
//   `--user-agent <text>`: every request sends it, as clients do (the request line logs it scrubbed);
//   `--explorer`: the request explorer on, as it is by default (off here: see the config below))
//   callgrind_annotate <dir>/callgrind.out.<pid>.1-01   # JIT frames as addresses; map them with the perf map
//
// Needs valgrind (callgrind_control on the PATH). A build from another checkout: `--tree <dir>`
// (its dist/cli.js and its CLI's teams/keys commands are used).
// `--config '{"tracing":{"otlpUrl":"OTLP_SINK"}}'` adds top-level sections to the gateway's config
// (only sections that build knows); the text `OTLP_SINK` in it becomes the URL of an OTLP/HTTP
// receiver this process runs (for `tracing`).

import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { stringify as toYaml } from 'yaml';
import { seedAnvil } from '../src/devnet/anvil-seed.js';
import { startAnvil } from '../src/devnet/anvil.js';
import { ROOT, freePort, gatewayCommand } from './local-processes.js';

const { values: flags } = parseArgs({
  options: {
    tree: { type: 'string', default: ROOT },
    out: { type: 'string' },
    warmup: { type: 'string', default: '30000' },
    measured: { type: 'string', default: '5000' },
    config: { type: 'string', default: '{}' },
    forwarded: { type: 'boolean', default: false },
    'log-level': { type: 'string', default: 'warn' },
    batch: { type: 'string', default: '0' },
    verification: { type: 'string', default: 'full' },
    'user-agent': { type: 'string' },
    explorer: { type: 'boolean', default: false },
  },
});
const tree = resolve(flags.tree);
const cli = join(tree, 'dist', 'cli.js');
const outDir = resolve(flags.out ?? mkdtempSync(join(tmpdir(), 'callgrind-hit-')));
mkdirSync(outDir, { recursive: true });
const CONNECTIONS = 50;
const WARMUP = Number(flags.warmup);
const MEASURED = Number(flags.measured);

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));
const work = mkdtempSync(join(tmpdir(), 'callgrind-hit-run-'));
const dbFile = join(work, 'tollgate.db');
const anvil = await startAnvil();
let gatewayPid: number | undefined;
try {
  const seed = await seedAnvil(anvil.url, { blocks: 1, txPerBlock: 20 });
  const hash = seed.blocksWithTransactions[0]!;
  const tollgate = (args: string[]) => execFileSync(process.execPath, [cli, ...args], { cwd: tree, encoding: 'utf8' });
  tollgate(['teams', 'create', 'bench', '--daily-credits', '1000000000000', '--db', dbFile]);
  const secret = (JSON.parse(tollgate(['keys', 'create', '--team', 'bench', '--db', dbFile])) as { secret: string }).secret;

  const port = await freePort();
  // A trace collector that takes whatever is exported (spans are counted, not kept).
  const sink = createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise<void>((done) => sink.listen(0, '127.0.0.1', done));
  sink.unref();
  const sinkUrl = `http://127.0.0.1:${(sink.address() as AddressInfo).port}/v1/traces`;
  const network = (verification: string) => (verification === 'full' ? 'eth' : `eth-${verification}`);
  const config = {
    server: { host: '127.0.0.1', port },
    admin: { host: '127.0.0.1', port: 0 },
    store: { driver: 'sqlite', path: dbFile },
    cache: { maxBytes: 256 * 1024 * 1024 },
    networks: ['full', 'header', 'off'].map((verification) => ({
      id: network(verification),
      kind: 'evm',
      chainId: 31337,
      baseUrls: [`*/${network(verification)}`],
      verification,
      upstreams: [{ id: 'anvil', url: anvil.url }],
      healthCheck: { intervalMs: 0 },
    })),
    // The request explorer writes one bounded batch per interval (1,000 records per team every
    // 5 s), not a row per request. Under valgrind the gateway answers at most about a thousand
    // requests a second, so that batch is a large share of the measured hits, and the count would
    // charge each hit 16,000-19,000 instructions for a write that at a real rate (tens of
    // thousands a second) covers one request in a hundred (docs/benchmarks.md). Off unless
    // `--explorer`, like the probes; builds from before the explorer have no such section.
    ...(flags.explorer || !existsSync(join(tree, 'dist', 'explorer')) ? {} : { explorer: { enabled: false } }),
    ...(JSON.parse(flags.config.replaceAll('OTLP_SINK', sinkUrl)) as Record<string, unknown>),
  };
  const configFile = join(work, 'gateway.yaml');
  writeFileSync(configFile, toYaml(config));
  const valgrind = [
    '--tool=callgrind',
    '--instr-atstart=no',
    '--separate-threads=yes',
    `--callgrind-out-file=${join(outDir, 'callgrind.out.%p')}`,
  ];
  const gateway = gatewayCommand(configFile, { logLevel: flags['log-level'], extraFlags: ['--perf-basic-prof'], cli });
  const child = spawn('valgrind', [...valgrind, process.execPath, ...gateway.args], { cwd: tree, stdio: ['ignore', 'ignore', 'inherit'], env: gateway.env });
  gatewayPid = child.pid!;
  const control = (...args: string[]) => execFileSync('callgrind_control', [...args, String(gatewayPid)], { stdio: 'ignore' });

  const pool = new Pool(`http://127.0.0.1:${port}`, { connections: CONNECTIONS, pipelining: 1 });
  // `--forwarded`: every call asks past the cache (`Cache-Control: no-cache`), so each one is
  // reserved, forwarded to anvil, verified and settled: the miss path, without needing a new block per call.
  const headers: Record<string, string> = flags.forwarded ? { 'content-type': 'application/json', 'cache-control': 'no-cache' } : { 'content-type': 'application/json' };
  if (flags['user-agent'] !== undefined) headers['user-agent'] = flags['user-agent'];
  const post = async (body: string) => {
    const res = await pool.request({ path: `/${network(flags.verification)}/v3/${secret}`, method: 'POST', headers, body, headersTimeout: 120_000, bodyTimeout: 120_000 });
    return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
  };
  const deadline = Date.now() + 180_000;
  for (;;) {
    const ready = await post(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] })).catch(() => undefined);
    if (ready?.status === 200 && ready.text.includes('0x7a69')) break;
    if (Date.now() > deadline) throw new Error('the gateway did not answer within 180 s');
    await sleep(500);
  }
  const call = { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash, false] };
  const single = JSON.stringify(call);
  await post(single);
  const probe = await post(single);
  // `--batch N`: each request is a batch of N such calls (ids 1..N), counted per request.
  const batchSize = Number(flags.batch);
  const body = batchSize > 0 ? JSON.stringify(Array.from({ length: batchSize }, (_, index) => ({ ...call, id: index + 1 }))) : single;
  const expected = flags.forwarded ? 'bypass' : 'hit';
  if (probe.status !== 200 || probe.headers['x-cache'] !== expected) throw new Error(`not a cache ${expected}: HTTP ${probe.status}, X-Cache ${String(probe.headers['x-cache'])}`);

  let failed = 0;
  const load = async (requests: number) => {
    let left = requests;
    const connection = async () => {
      for (; left > 0; left -= 1) {
        const res = await post(body);
        if (res.status !== 200 || !res.text.includes('"result"')) failed += 1;
      }
    };
    await Promise.all(Array.from({ length: CONNECTIONS }, connection));
  };
  await load(WARMUP);
  await sleep(5_000);
  await load(2_000);
  control('-i', 'on');
  control('-z');
  await load(MEASURED);
  control('-i', 'off');
  control('-d', 'measured');
  await pool.close();
  if (failed > 0) throw new Error(`${failed} requests failed`);
  const map = `/tmp/perf-${gatewayPid}.map`;
  if (existsSync(map)) copyFileSync(map, join(outDir, `perf-${gatewayPid}.map`));
  // The main thread's dump of the measured window: callgrind.out.<pid>.1-01.
  const dump = readdirSync(outDir).find((name) => name === `callgrind.out.${gatewayPid}.1-01`);
  if (dump === undefined) throw new Error(`no dump of the main thread in ${outDir}`);
  const totals = /^totals: (\d+)/m.exec(readFileSync(join(outDir, dump), 'utf8'));
  if (totals === null) throw new Error(`no totals line in ${dump}`);
  console.log(`${tree}: ${Math.round(Number(totals[1]) / MEASURED)} instructions per ${batchSize > 0 ? `batch of ${batchSize} ` : ''}${flags.forwarded ? 'forwarded call' : 'hit'} (main thread); dumps in ${outDir}`);
  child.kill('SIGTERM');
  await new Promise((done) => child.once('exit', done));
} finally {
  if (gatewayPid !== undefined) {
    try {
      process.kill(gatewayPid, 'SIGKILL');
    } catch {
      // exited already
    }
  }
  await anvil.stop();
}
