// What upstream budgets (docs/budgets.md) cost a call, against one anvil:
//
//   1. Throughput. Two gateway processes over one SQLite store, each pinned to the same core:
//        without   the upstream has no `rateLimit` and no `price` (the reference);
//        budgeted  `rateLimit` far above the load, `price: { units: alchemy, usdPerMillion }` and
//                  the network on `selection: cheapest`: the window, the selection by price and
//                  the spend counters run on every call, and no call is ever refused.
//      Measured on a cache hit (eth_getBlockByHash) and on a forwarded call that is never cached
//      nor shared (eth_getBalance at `latest`: a call at a tag goes to the upstream every time),
//      in interleaved 1 s wrk rounds, in rotations (both started again in a rotated order, as in
//      bench/observability.ts); the ratio is the median over every pair.
//   2. Redis. The same two configurations on a Redis store, where the budgeted one takes every
//      permit from the window all replicas share: Redis commands (INFO commandstats) per
//      forwarded call, counted by the gateway's tollgate_upstream_requests_total, and the
//      forwarded call's throughput and latency, in interleaved rounds.
//
// Standalone:  npm run build && node --import tsx bench/budgets.ts [--seconds 8] [--rotations 3]
// From bench/run.ts: `npm run bench -- --only "upstream budgets"` runs this alone.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { seedAnvil } from '../src/devnet/anvil-seed.js';
import { startAnvil } from '../src/devnet/anvil.js';
import { startRedis } from '../test/helpers/redis.js';
import { cpuSeconds } from './proc-stats.js';
import { redisCost, redisSnapshot, type RedisSnapshot } from './redis-cost.js';
import { findWrk, measuredRound, pairRatios, prepareWrk, summariseRounds, type MeasuredRound } from './wrk.js';
import { gatewayMetrics, metricSum, runCli, startGateway, type GatewayChild } from './local-processes.js';

export const BUDGETS_SCENARIO = 'upstream budgets: cache hit and forwarded call with rateLimit and price vs without; Redis commands per forwarded call';

const CONNECTIONS = 50;
/** Far above what one process serves here: the window is kept on every call and never full. */
const REQUESTS_PER_SECOND = 1_000_000;
const USD_PER_MILLION = 0.45;
/** The target: with budgets, at least this share of the requests/s without. */
const TARGET_RATIO = 0.95;
/** anvil's first dev account: its balance at `latest` is a call the gateway always forwards. */
const ACCOUNT = '0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266';

const ROLES = [
  { key: 'without', name: 'without rateLimit and price (reference)', upstream: {}, network: {} },
  {
    key: 'budgeted',
    name: `rateLimit ${REQUESTS_PER_SECOND.toLocaleString('en-US')}/s, price alchemy at $${USD_PER_MILLION}/M, selection cheapest`,
    upstream: { rateLimit: { requestsPerSecond: REQUESTS_PER_SECOND }, price: { units: 'alchemy', usdPerMillion: USD_PER_MILLION } },
    network: { selection: 'cheapest' },
  },
] as const;
type RoleKey = (typeof ROLES)[number]['key'];

interface Row {
  call: string;
  gateway: string;
  requestsPerSecond: number;
  p50: number;
  p99: number;
  cpuUsPerRequest: number | undefined;
  /** Median, lowest and highest per-pair ratio to the gateway without budgets; undefined for it. */
  ratio: { median: number; min: number; max: number } | undefined;
  errors: number;
}

interface RedisRow extends Row {
  forwardedPerRequest: number;
  commandsPerForwarded: number;
  /** Commands per forwarded call by command, largest first. */
  byCommand: Array<[command: string, perCall: number]>;
  redisCpuUsPerForwarded: number;
}

export interface BudgetsResult {
  rows: Row[];
  redisRows: RedisRow[];
  /** The forwarded call on the Redis store at one connection: the latency of a call alone. */
  latencyRows: Row[];
  rounds: { rotations: number; seconds: number };
}

async function post(url: string, body: string): Promise<{ status: number; cache: string | null; json: { result?: unknown; error?: unknown } }> {
  const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: response.status, cache: response.headers.get('x-cache'), json: (await response.json()) as { result?: unknown; error?: unknown } };
}

function ratioOf(values: number[]): Row['ratio'] {
  const sorted = [...values].sort((a, b) => a - b);
  return { median: sorted[Math.floor(sorted.length / 2)]!, min: sorted[0]!, max: sorted[sorted.length - 1]! };
}

/** Upstream attempts the gateway has made so far (every outcome), from its /metrics. */
async function forwardedCalls(gateway: GatewayChild): Promise<number> {
  return metricSum(await gatewayMetrics(gateway), 'tollgate_upstream_requests_total');
}

/** `after` less `before`, command by command (the CPU too). */
function snapshotDelta(before: RedisSnapshot, after: RedisSnapshot): RedisSnapshot {
  const calls = new Map<string, number>();
  for (const [command, count] of after.calls) calls.set(command, count - (before.calls.get(command) ?? 0));
  return { calls, cpuSeconds: after.cpuSeconds - before.cpuSeconds };
}

function addSnapshot(total: RedisSnapshot, delta: RedisSnapshot): void {
  for (const [command, count] of delta.calls) total.calls.set(command, (total.calls.get(command) ?? 0) + count);
  total.cpuSeconds += delta.cpuSeconds;
}

export async function runBudgets(options: { seconds: number; rotations: number; warmUpSeconds: number }): Promise<BudgetsResult> {
  if (findWrk() === undefined) throw new Error('wrk is not installed (apt-get install wrk)');
  const workDir = mkdtempSync(join(tmpdir(), 'tollgate-budgets-bench-'));
  const gateways: GatewayChild[] = [];
  const anvil = await startAnvil();
  let redis: Awaited<ReturnType<typeof startRedis>> | undefined;
  try {
    const seed = await seedAnvil(anvil.url, { blocks: 1, txPerBlock: 20 });
    const dbFile = join(workDir, 'tollgate.db');
    runCli(['teams', 'create', 'bench', '--daily-credits', '1000000000000', '--db', dbFile]);
    const secret = (JSON.parse(runCli(['keys', 'create', '--team', 'bench', '--db', dbFile])) as { secret: string }).secret;
    const calls = [
      { key: 'hit', name: 'cache hit (eth_getBlockByHash, hydrated=false)', method: 'eth_getBlockByHash', params: [seed.blocksWithTransactions[0]!, false], cache: 'hit' },
      { key: 'forwarded', name: 'forwarded call (eth_getBalance at latest)', method: 'eth_getBalance', params: [ACCOUNT, 'latest'], cache: undefined },
    ].map((call) => ({ ...call, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: call.method, params: call.params }) }));
    const files = prepareWrk(workDir);
    const round = (gateway: GatewayChild, body: string, seconds: number, connections = CONNECTIONS): Promise<MeasuredRound> =>
      measuredRound(cpuSeconds, { script: files.script, bodyFile: files.bodyFile(body), url: gateway.url, pid: gateway.pid, connections, threads: 1, seconds, timeoutS: 10 });

    async function gateway(name: string, role: (typeof ROLES)[number], store: Record<string, unknown>): Promise<GatewayChild> {
      const started = await startGateway({
        dir: workDir,
        name,
        keyPath: `/eth/v3/${secret}`,
        config: {
          store,
          cache: { maxBytes: 256 * 1024 * 1024 },
          networks: [{ id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], ...role.network, upstreams: [{ id: 'anvil', url: anvil.url, ...role.upstream }] }],
        },
      });
      gateways.push(started);
      // Both calls answered as the rows say: a hit from the cache, the balance from anvil every time.
      for (const call of calls) {
        await post(started.url, call.body);
        const answer = await post(started.url, call.body);
        if (answer.status !== 200 || answer.json.result === undefined || answer.json.result === null) {
          throw new Error(`${name}, ${call.name}: HTTP ${answer.status} ${JSON.stringify(answer.json).slice(0, 300)}`);
        }
        if (call.cache === 'hit' ? answer.cache !== 'hit' : answer.cache === 'hit') throw new Error(`${name}, ${call.name}: X-Cache ${answer.cache}`);
      }
      return started;
    }

    /**
     * Interleaved 1 s rounds of `body` on both gateways, the order alternating pair by pair;
     * `around` wraps each round (to read Redis and the gateway's counters just outside it).
     */
    async function interleaved(
      started: Map<RoleKey, GatewayChild>,
      body: string,
      pairs: number,
      options: { connections?: number; around?: (role: RoleKey, measure: () => Promise<MeasuredRound>) => Promise<MeasuredRound> } = {},
    ): Promise<Record<RoleKey, MeasuredRound[]>> {
      const around = options.around ?? ((_, measure) => measure());
      const rounds: Record<RoleKey, MeasuredRound[]> = { without: [], budgeted: [] };
      for (let pair = 0; pair < pairs; pair += 1) {
        for (const role of pair % 2 === 0 ? (['without', 'budgeted'] as const) : (['budgeted', 'without'] as const)) {
          rounds[role].push(await around(role, () => round(started.get(role)!, body, 1, options.connections)));
        }
      }
      return rounds;
    }

    // 1. Throughput on the SQLite store, in rotations.
    const rounds = new Map<string, MeasuredRound[]>();
    const ratios = new Map<string, number[]>();
    for (let rotation = 0; rotation < options.rotations; rotation += 1) {
      const order = ROLES.map((_, index) => ROLES[(index + rotation) % ROLES.length]!);
      const started = new Map<RoleKey, GatewayChild>();
      for (const role of order) started.set(role.key, await gateway(`${role.key}-${rotation}`, role, { driver: 'sqlite', path: dbFile }));
      // Warm: V8 keeps optimising a gateway's request path for many seconds of full load.
      for (const role of order) for (const call of calls) await round(started.get(role.key)!, call.body, options.warmUpSeconds);
      for (const call of calls) {
        const measured = await interleaved(started, call.body, options.seconds);
        for (const role of ROLES) rounds.set(`${call.key}/${role.key}`, [...(rounds.get(`${call.key}/${role.key}`) ?? []), ...measured[role.key]]);
        ratios.set(call.key, [...(ratios.get(call.key) ?? []), ...pairRatios(measured.budgeted, measured.without)]);
      }
      for (const started of gateways.splice(0)) started.child.kill('SIGKILL');
    }
    const rowOf = (call: (typeof calls)[number], role: (typeof ROLES)[number], measured: MeasuredRound[], pairs: number[] | undefined): Row => {
      const { requestsPerSecond, p50, p99, cpuUsPerRequest, errors } = summariseRounds(measured);
      return { call: call.name, gateway: role.name, requestsPerSecond, p50, p99, cpuUsPerRequest, ratio: pairs === undefined ? undefined : ratioOf(pairs), errors };
    };
    const rows = calls.flatMap((call) => ROLES.map((role) => rowOf(call, role, rounds.get(`${call.key}/${role.key}`)!, role.key === 'without' ? undefined : ratios.get(call.key))));

    // 2. The forwarded call on a Redis store: the same team and key, copied with `tollgate migrate`.
    redis = await startRedis();
    runCli(['migrate', '--from', `sqlite:${dbFile}`, '--to', redis.url]);
    const onRedis = new Map<RoleKey, GatewayChild>();
    for (const role of ROLES) onRedis.set(role.key, await gateway(`${role.key}-redis`, role, { driver: 'redis', url: redis.url }));
    const forwarded = calls.find((call) => call.key === 'forwarded')!;
    for (const role of ROLES) await round(onRedis.get(role.key)!, forwarded.body, options.warmUpSeconds);
    const commands = new Map<RoleKey, RedisSnapshot>(ROLES.map((role) => [role.key, { calls: new Map(), cpuSeconds: 0 }]));
    const attempts = new Map<RoleKey, number>(ROLES.map((role) => [role.key, 0]));
    // Only the gateway measured talks to Redis during its round (the other is idle); the
    // gateway's counters are read outside the Redis snapshots, so that reading them is not counted.
    const measured = await interleaved(onRedis, forwarded.body, options.seconds * options.rotations, {
      async around(role, measure) {
        const attemptsBefore = await forwardedCalls(onRedis.get(role)!);
        const before = await redisSnapshot(redis!.url);
        const result = await measure();
        addSnapshot(commands.get(role)!, snapshotDelta(before, await redisSnapshot(redis!.url)));
        attempts.set(role, attempts.get(role)! + (await forwardedCalls(onRedis.get(role)!)) - attemptsBefore);
        return result;
      },
    });
    // What one call waits for the extra round trip: one connection, so no call queues behind another.
    const alone = await interleaved(onRedis, forwarded.body, options.seconds, { connections: 1 });
    const redisRows = ROLES.map((role): RedisRow => {
      const callsForwarded = attempts.get(role.key)!;
      const requests = measured[role.key].reduce((sum, { run }) => sum + run.requests, 0);
      const cost = redisCost({ calls: new Map(), cpuSeconds: 0 }, commands.get(role.key)!, callsForwarded);
      return {
        ...rowOf(forwarded, role, measured[role.key], role.key === 'without' ? undefined : pairRatios(measured.budgeted, measured.without)),
        call: `${forwarded.name}, Redis store`,
        forwardedPerRequest: callsForwarded / requests,
        commandsPerForwarded: cost.totalPer1000 / 1000,
        byCommand: cost.commandsPer1000.map(([command, per1000]) => [command, per1000 / 1000]),
        redisCpuUsPerForwarded: cost.cpuMsPer1000,
      };
    });
    const latencyRows = ROLES.map((role) => ({
      ...rowOf(forwarded, role, alone[role.key], role.key === 'without' ? undefined : pairRatios(alone.budgeted, alone.without)),
      call: `${forwarded.name}, Redis store, 1 connection`,
    }));
    return { rows, redisRows, latencyRows, rounds: { rotations: options.rotations, seconds: options.seconds } };
  } finally {
    for (const started of gateways) started.child.kill('SIGKILL');
    await redis?.stop();
    await anvil.stop();
    rmSync(workDir, { recursive: true, force: true });
  }
}

export function formatBudgets(result: BudgetsResult): string {
  const fmt = (value: number | undefined, digits = 0) => (value === undefined || Number.isNaN(value) ? 'n/a' : value.toFixed(digits));
  const ratio = (row: Row) => (row.ratio === undefined ? '—' : `${fmt(row.ratio.median, 3)}× (${fmt(row.ratio.min, 2)}–${fmt(row.ratio.max, 2)})`);
  const throughputRow = (row: Row) => `| ${row.call} | ${row.gateway} | ${fmt(row.requestsPerSecond)} | ${fmt(row.p50, 2)} | ${fmt(row.p99, 2)} | ${fmt(row.cpuUsPerRequest, 1)} | ${ratio(row)} | ${row.errors} |`;
  const perCommand = (list: RedisRow['byCommand']) => list.filter(([, perCall]) => Math.abs(perCall) >= 0.005).map(([command, perCall]) => `${command} ${fmt(perCall, 2)}`).join(', ');
  const { rotations, seconds } = result.rounds;
  const lines = [
    `${BUDGETS_SCENARIO}. One anvil; wrk, ${CONNECTIONS} connections; log level info. SQLite store: ${rotations} rotation${rotations === 1 ? '' : 's'} of ${seconds} interleaved pairs of 1 s rounds per call, both gateways started again per rotation in a rotated order:`,
    '',
    '| call | gateway | req/s | p50 ms | p99 ms | CPU µs/req | req/s vs without (median of pairs, lowest–highest) | errors |',
    '|---|---|---:|---:|---:|---:|---:|---:|',
    ...result.rows.map(throughputRow),
    '',
    `Redis store (one local redis-server; ${rotations * seconds} interleaved pairs of 1 s rounds at ${CONNECTIONS} connections, then ${seconds} at 1 connection). ` +
      "Redis commands per forwarded call from INFO commandstats, which counts a script's inner calls as commands too; forwarded calls from the gateway's tollgate_upstream_requests_total:",
    '',
    '| call | gateway | req/s | p50 ms | p99 ms | CPU µs/req | req/s vs without | errors |',
    '|---|---|---:|---:|---:|---:|---:|---:|',
    ...[...result.redisRows, ...result.latencyRows].map(throughputRow),
    '',
    '| gateway | forwarded calls per request | Redis commands per forwarded call | by command | Redis CPU µs per forwarded call |',
    '|---|---:|---:|---|---:|',
    ...result.redisRows.map((row) => `| ${row.gateway} | ${fmt(row.forwardedPerRequest, 3)} | ${fmt(row.commandsPerForwarded, 2)} | ${perCommand(row.byCommand)} | ${fmt(row.redisCpuUsPerForwarded, 1)} |`),
  ];
  const verdicts = result.rows
    .filter((row) => row.ratio !== undefined)
    .map((row) => `${row.call} ${fmt(row.ratio!.median, 3)}× ${row.ratio!.median >= TARGET_RATIO && row.errors === 0 ? 'PASS' : '**FAIL**'}`);
  lines.push('', `Target req/s with budgets ≥ ${TARGET_RATIO}× without (SQLite store): ${verdicts.join('; ')}.`);
  const [without, budgeted] = result.redisRows;
  const [withoutAlone, budgetedAlone] = result.latencyRows;
  if (without !== undefined && budgeted !== undefined && withoutAlone !== undefined && budgetedAlone !== undefined) {
    const commands = new Set([...without.byCommand, ...budgeted.byCommand].map(([command]) => command));
    const perCall = (row: RedisRow, command: string) => row.byCommand.find(([name]) => name === command)?.[1] ?? 0;
    const difference = [...commands].map((command): [string, number] => [command, perCall(budgeted, command) - perCall(without, command)]).sort((x, y) => y[1] - x[1]);
    lines.push(
      `With a shared budget, per forwarded call: ${fmt(budgeted.commandsPerForwarded - without.commandsPerForwarded, 2)} more Redis commands (${perCommand(difference)}), ` +
        `${fmt(budgeted.redisCpuUsPerForwarded - without.redisCpuUsPerForwarded, 1)} µs more Redis CPU; ` +
        `at 1 connection p50 ${fmt(budgetedAlone.p50, 3)} vs ${fmt(withoutAlone.p50, 3)} ms (${fmt((budgetedAlone.p50 - withoutAlone.p50) * 1000, 0)} µs), req/s ${ratio(budgetedAlone)}.`,
    );
  }
  return lines.join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { seconds: { type: 'string', default: '8' }, rotations: { type: 'string', default: '3' } } });
  runBudgets({ seconds: Number(values.seconds), rotations: Number(values.rotations), warmUpSeconds: 8 }).then(
    (result) => console.log(formatBudgets(result)),
    (error: unknown) => {
      console.error(error);
      process.exitCode = 1;
    },
  );
}
