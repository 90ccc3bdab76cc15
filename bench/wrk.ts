// The external load generator of bench/run.ts: `wrk` (C, one process of its own), so that the
// load is not made by a Node process sharing the orchestrator's event loop and competing with the
// servers it measures more than it must. The bench installs nothing: when `wrk` is not on the
// PATH (Debian/Ubuntu: `apt-get install wrk`; macOS: `brew install wrk`) it falls back to
// autocannon, and every table says which generator produced it.
//
// POST bodies come from a Lua script (wrk only sends GETs without one); the script's `done` hook
// prints one JSON line: the totals, 1,000 latency quantiles of the round (wrk keeps a histogram at
// microsecond resolution; its text report rounds them) and wrk's own CPU time (`os.clock()`, all
// its threads), which shows when the load generator rather than the server sets the pace.

import { execFile, execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Quantiles printed per round: 0.05%, 0.15%, …, 99.95% (each stands for 1/1000 of the responses). */
const QUANTILES = 1000;

const SCRIPT = `-- written by bench/wrk.ts
local f = assert(io.open(os.getenv("BENCH_BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

done = function(summary, latency, requests)
  local q = {}
  for i = 1, ${QUANTILES} do q[i] = string.format("%d", latency:percentile((i - 0.5) * 100 / ${QUANTILES})) end
  local e = summary.errors
  io.write(string.format('\\nWRK-JSON {"requests":%d,"durationUs":%d,"errors":%d,"non2xx":%d,"cpuSeconds":%.6f,"quantilesUs":[%s]}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status, os.clock(), table.concat(q, ",")))
end
`;

export interface WrkRound {
  requests: number;
  seconds: number;
  /** Socket errors and timeouts. */
  errors: number;
  /** Responses with a status of 400 or more (wrk counts nothing else as a failure). */
  non2xx: number;
  /** CPU seconds wrk used (user + system, all threads). */
  cpuSeconds: number;
  /** Latency quantiles of the round in milliseconds, ascending, each standing for 1/1000 of the responses. */
  quantilesMs: Float64Array;
}

let wrkPath: string | null | undefined;

/** The path of `wrk` when it is installed (and runs), else undefined; `BENCH_LOADGEN=autocannon` forces the fallback. */
export function findWrk(): string | undefined {
  if (wrkPath === undefined) {
    wrkPath = null;
    if (process.env.BENCH_LOADGEN !== 'autocannon') {
      try {
        // `wrk -v` prints its version and usage and exits 1: output starting with `wrk ` means it is there.
        execFileSync('wrk', ['-v'], { stdio: 'pipe' });
        wrkPath = 'wrk';
      } catch (error) {
        const output = String((error as { stdout?: unknown }).stdout ?? '') + String((error as { stderr?: unknown }).stderr ?? '');
        if (output.startsWith('wrk ')) wrkPath = 'wrk';
      }
    }
  }
  return wrkPath ?? undefined;
}

/** Writes the Lua script and one body file per distinct body into `dir`; returns the script's path. */
export function prepareWrk(dir: string): { script: string; bodyFile: (body: string) => string } {
  const script = join(dir, 'post.lua');
  writeFileSync(script, SCRIPT);
  const files = new Map<string, string>();
  return {
    script,
    bodyFile(body) {
      let file = files.get(body);
      if (file === undefined) {
        file = join(dir, `body-${files.size}.json`);
        writeFileSync(file, body);
        files.set(body, file);
      }
      return file;
    },
  };
}

/** One wrk run of `seconds` against `url` with `body` POSTed on every request. */
export function runWrk(options: {
  script: string;
  bodyFile: string;
  url: string;
  connections: number;
  threads: number;
  seconds: number;
  timeoutS: number;
  /** Request headers besides Content-Type (an `Origin`, say). */
  headers?: Record<string, string>;
  /** Run wrk on these cores only (`taskset -c`), apart from the server measured. */
  pin?: string;
}): Promise<WrkRound> {
  const args = [
    ...Object.entries(options.headers ?? {}).flatMap(([name, value]) => ['-H', `${name}: ${value}`]),
    `-t${Math.min(options.threads, options.connections)}`,
    `-c${options.connections}`,
    `-d${options.seconds}s`,
    `--timeout`,
    `${options.timeoutS}s`,
    '-s',
    options.script,
    options.url,
  ];
  return new Promise((resolve, reject) => {
    const [command, commandArgs] = options.pin === undefined ? [wrkPath ?? 'wrk', args] : ['taskset', ['-c', options.pin, wrkPath ?? 'wrk', ...args]];
    execFile(command, commandArgs, { env: { ...process.env, BENCH_BODY_FILE: options.bodyFile }, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error !== null) return reject(new Error(`wrk ${args.join(' ')} failed: ${error.message}\n${stderr}`));
      const line = stdout.split('\n').find((candidate) => candidate.startsWith('WRK-JSON '));
      if (line === undefined) return reject(new Error(`wrk printed no result line:\n${stdout}\n${stderr}`));
      const parsed = JSON.parse(line.slice('WRK-JSON '.length)) as { requests: number; durationUs: number; errors: number; non2xx: number; cpuSeconds: number; quantilesUs: number[] };
      resolve({
        requests: parsed.requests,
        seconds: parsed.durationUs / 1e6,
        errors: parsed.errors,
        non2xx: parsed.non2xx,
        cpuSeconds: parsed.cpuSeconds,
        quantilesMs: Float64Array.from(parsed.quantilesUs, (us) => us / 1000).sort(),
      });
    });
  });
}

/** One measured round against a server process: wrk's round and the CPU seconds the process used meanwhile. */
export interface MeasuredRound {
  run: WrkRound;
  cpu: number | undefined;
}

/** Runs one wrk round at `url` and reads the CPU time process `pid` used during it (`cpuSeconds` reads /proc). */
export async function measuredRound(
  cpuSeconds: (pid: number) => number | undefined,
  options: Parameters<typeof runWrk>[0] & { pid: number },
): Promise<MeasuredRound> {
  const before = cpuSeconds(options.pid);
  const run = await runWrk(options);
  const after = cpuSeconds(options.pid);
  return { run, cpu: before === undefined || after === undefined ? undefined : after - before };
}

/** A latency quantile of one round (q in 0..1). */
function roundQuantile(round: WrkRound, q: number): number {
  return round.quantilesMs[Math.min(round.quantilesMs.length - 1, Math.floor(q * round.quantilesMs.length))] ?? Number.NaN;
}

/** The median (the upper middle of an even count). */
export function median(values: readonly number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
}

/** Rounds of one target summed: req/s over all of them, the median round's p50 and p99, CPU µs per request, failures. */
export function summariseRounds(rounds: readonly MeasuredRound[]): { requestsPerSecond: number; p50: number; p99: number; cpuUsPerRequest: number | undefined; errors: number } {
  const requests = rounds.reduce((sum, { run }) => sum + run.requests, 0);
  const seconds = rounds.reduce((sum, { run }) => sum + run.seconds, 0);
  const cpu = rounds.every(({ cpu }) => cpu !== undefined) ? rounds.reduce((sum, { cpu }) => sum + cpu!, 0) : undefined;
  return {
    requestsPerSecond: requests / seconds,
    p50: median(rounds.map(({ run }) => roundQuantile(run, 0.5))),
    p99: median(rounds.map(({ run }) => roundQuantile(run, 0.99))),
    cpuUsPerRequest: cpu === undefined ? undefined : (cpu / requests) * 1e6,
    errors: rounds.reduce((sum, { run }) => sum + run.errors + run.non2xx, 0),
  };
}

/** Per interleaved pair: this round's req/s ÷ its reference round's req/s. */
export function pairRatios(rounds: readonly MeasuredRound[], references: readonly MeasuredRound[]): number[] {
  return rounds.map(({ run }, index) => run.requests / run.seconds / (references[index]!.run.requests / references[index]!.run.seconds));
}

/** The median of {@link pairRatios}. */
export function medianPairRatio(rounds: readonly MeasuredRound[], references: readonly MeasuredRound[]): number {
  return median(pairRatios(rounds, references));
}
