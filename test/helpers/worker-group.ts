// `tollgate serve` with `server.workers: N` as a child process on a SQLite file in a temp dir: a
// team and key made with the CLI, a config file the test can rewrite (reloads), the ledger read
// straight from the file, the admin API and the per-worker log lines.

import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { CLI, ROOT } from './build.js';
import { spawnGateway, type GatewayProcess, type LogLine } from './spawn-gateway.js';

export const GROUP_ADMIN_TOKEN = 'worker-group-admin-token-0123456789';

export function tollgateCli(db: string, ...args: string[]): Promise<any> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [CLI, ...args, '--db', db], { cwd: ROOT }, (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`tollgate ${args.join(' ')} failed: ${stderr}`));
      else resolve(JSON.parse(stdout));
    });
  });
}

export interface GroupSetup {
  dir: string;
  db: string;
  configFile: string;
  teamId: string;
  keyId: string;
  secret: string;
  /** Writes the config file: `server.workers`, loopback listeners, the SQLite file, and these networks (and other sections). */
  writeConfig(networks: unknown[], extra?: Record<string, unknown>): void;
  cleanUp(): void;
}

export async function setUpGroup(options: { workers: number; dailyCredits: number; creditsPerSecond?: number }): Promise<GroupSetup> {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-workers-'));
  const db = join(dir, 'gw.db');
  const rate = options.creditsPerSecond === undefined ? [] : ['--credits-per-second', String(options.creditsPerSecond)];
  const team = await tollgateCli(db, 'teams', 'create', 'group', '--daily-credits', String(options.dailyCredits), ...rate);
  const key = await tollgateCli(db, 'keys', 'create', '--team', 'group');
  const configFile = join(dir, 'gw.yaml');
  const writeConfig = (networks: unknown[], extra: Record<string, unknown> = {}) =>
    writeFileSync(
      configFile,
      // JSON is YAML.
      JSON.stringify({
        server: { host: '127.0.0.1', port: 0, workers: options.workers },
        admin: { host: '127.0.0.1', port: 0, token: GROUP_ADMIN_TOKEN },
        store: { driver: 'sqlite', path: db },
        networks,
        ...extra,
      }),
    );
  return { dir, db, configFile, teamId: team.id, keyId: key.id, secret: key.secret, writeConfig, cleanUp: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface GroupLedger {
  /** Σ usage.credits of every team: what was charged. */
  usageCredits: number;
  usageRequests: number;
  /** Σ team_days.used: charged plus held. */
  teamUsed: number;
  reservations: number;
  reservedCredits: number;
}

/** The ledger straight from the SQLite file (all days). */
export function readGroupLedger(db: string): GroupLedger {
  const connection = new Database(db, { fileMustExist: true });
  try {
    const one = (sql: string) => (connection.prepare(sql).get() as { value: number }).value;
    return {
      usageCredits: one('SELECT COALESCE(SUM(credits), 0) AS value FROM usage'),
      usageRequests: one('SELECT COALESCE(SUM(requests), 0) AS value FROM usage'),
      teamUsed: one('SELECT COALESCE(SUM(used), 0) AS value FROM team_days'),
      reservations: one('SELECT COUNT(*) AS value FROM reservations'),
      reservedCredits: one('SELECT COALESCE(SUM(cost), 0) AS value FROM reservations'),
    };
  } finally {
    connection.close();
  }
}

export interface RunningGroup extends GatewayProcess {
  /** The worker pids at start, by slot (1-based index into the array + 1). */
  pids: number[];
  /** Request log lines per worker slot so far. */
  requestsByWorker(): Map<number, number>;
  /** The admin API with the token. */
  admin(path: string, init?: RequestInit): Promise<Response>;
  metricsText(): Promise<string>;
}

export async function startGroup(setup: GroupSetup): Promise<RunningGroup> {
  const byWorker = new Map<number, number>();
  const gateway = await spawnGateway(setup.configFile, {
    // Per-request lines are counted per worker and not kept (long runs make thousands).
    keep: (line: LogLine) => {
      if (line.msg !== 'request') return true;
      const worker = Number(line.worker);
      byWorker.set(worker, (byWorker.get(worker) ?? 0) + 1);
      return false;
    },
    startTimeoutMs: 60_000,
  });
  const listening = gateway.lines.find((line) => line.msg === 'gateway listening')!;
  const admin = (path: string, init: RequestInit = {}) =>
    fetch(`${gateway.adminOrigin}${path}`, { ...init, headers: { authorization: `Bearer ${GROUP_ADMIN_TOKEN}`, ...(init.headers as Record<string, string> | undefined) } });
  return {
    ...gateway,
    pids: listening.pids as number[],
    requestsByWorker: () => new Map(byWorker),
    admin,
    metricsText: async () => {
      const response = await admin('/metrics');
      if (response.status !== 200) throw new Error(`/metrics answered ${response.status}`);
      return response.text();
    },
  };
}

/** Sum of the samples of `name` whose labels include every pair of `labels`, in a Prometheus exposition. */
export function sampleSum(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (match === null || match[1] !== name) continue;
    const found = new Map([...(match[3] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((pair) => [pair[1]!, pair[2]!]));
    if (Object.entries(labels).every(([key, value]) => found.get(key) === value)) sum += Number(match[4]);
  }
  return sum;
}
