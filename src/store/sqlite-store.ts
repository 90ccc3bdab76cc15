import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { composeStore } from './compose-store.js';
import { startSqliteCheckpointer, type SqliteCheckpointer } from './sqlite-checkpointer.js';
import { createSqliteKeyDirectory } from './sqlite-key-directory.js';
import { createSqliteLedger } from './sqlite-ledger.js';
import { createSqliteRequestLog } from './sqlite-request-log.js';
import { createSqliteTeamTokens } from './sqlite-team-tokens.js';
import { withProviderSpend } from './provider-spend.js';
import type { ProviderSpendRow, Store, StoreSnapshot, UpstreamUnitsRow, UsageQuery, UsageRow } from './types.js';

/**
 * The embedded store: one SQLite file in WAL mode, for one gateway process or several on one
 * host (writers take the database lock with `BEGIN IMMEDIATE` and wait up to `busy_timeout`).
 * better-sqlite3 is synchronous; its calls are wrapped in promises to honour the async
 * {@link Store} interfaces. This file opens the database, owns its schema and composes the
 * ledger (sqlite-ledger.ts), the key directory (sqlite-key-directory.ts), usage reports and
 * snapshots.
 */

const SCHEMA = `
CREATE TABLE IF NOT EXISTS shared_secrets (
  name TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS teams (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  daily_credits INTEGER NOT NULL,
  credits_per_second INTEGER,
  created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL REFERENCES teams(id),
  label TEXT,
  daily_cap INTEGER,
  allowed_networks TEXT,
  expires_at INTEGER,
  revoked_at INTEGER,
  created_at INTEGER NOT NULL,
  settings TEXT,
  key_secret_hash TEXT
);
CREATE INDEX IF NOT EXISTS api_keys_team ON api_keys(team_id);
CREATE TABLE IF NOT EXISTS key_secrets (
  secret_hash TEXT PRIMARY KEY,
  key_id TEXT NOT NULL REFERENCES api_keys(id),
  valid_until INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS key_secrets_key ON key_secrets(key_id);
CREATE TABLE IF NOT EXISTS team_days (
  team_id TEXT NOT NULL,
  day TEXT NOT NULL,
  used INTEGER NOT NULL,
  PRIMARY KEY (team_id, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS key_days (
  key_id TEXT NOT NULL,
  day TEXT NOT NULL,
  used INTEGER NOT NULL,
  PRIMARY KEY (key_id, day)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage (
  team_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  day TEXT NOT NULL,
  network TEXT NOT NULL,
  method TEXT NOT NULL,
  credits INTEGER NOT NULL,
  requests INTEGER NOT NULL,
  PRIMARY KEY (team_id, day, key_id, network, method)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS usage_key ON usage(key_id, day);
-- What the calls cost at the providers (docs/budgets.md), beside usage: units and money of the
-- attempts that reached priced upstreams, and the units the cache saved.
-- Units every replica spent at each priced upstream per quota period (a UTC day or month).
CREATE TABLE IF NOT EXISTS upstream_units (
  scope TEXT NOT NULL,
  period TEXT NOT NULL,
  units REAL NOT NULL,
  PRIMARY KEY (scope, period)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS provider_spend (
  team_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  day TEXT NOT NULL,
  network TEXT NOT NULL,
  method TEXT NOT NULL,
  units REAL NOT NULL,
  usd REAL NOT NULL,
  saved_units REAL NOT NULL,
  PRIMARY KEY (team_id, day, key_id, network, method)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage_hours (
  team_id TEXT NOT NULL,
  day TEXT NOT NULL,
  key_id TEXT NOT NULL,
  hour INTEGER NOT NULL,
  credits INTEGER NOT NULL,
  requests INTEGER NOT NULL,
  PRIMARY KEY (team_id, day, key_id, hour)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rate_buckets (
  team_id TEXT PRIMARY KEY,
  tokens REAL NOT NULL,
  at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reservations (
  id TEXT PRIMARY KEY,
  owner TEXT NOT NULL,
  team_id TEXT NOT NULL,
  key_id TEXT NOT NULL,
  day TEXT NOT NULL,
  network TEXT NOT NULL,
  method TEXT NOT NULL,
  cost INTEGER NOT NULL,
  created_at INTEGER NOT NULL
) WITHOUT ROWID;
`;

/** SQLite's own `wal_autocheckpoint` default. */
const SQLITE_DEFAULT_AUTOCHECKPOINT_PAGES = 1000;
/** About 40 MB of WAL (4 KiB pages): a bound, reached only when the checkpointing process is not checkpointing. */
const SAFETY_AUTOCHECKPOINT_PAGES = 10_000;

export interface SqliteStoreOptions {
  path: string;
  now?: () => number;
  /**
   * For a long-running server: checkpoint the WAL on a worker thread every `intervalMs` instead of
   * inside the commit that fills it (see sqlite-checkpointer.ts). `onError` hears of a failed
   * thread; automatic checkpoints are then turned back on.
   */
  backgroundCheckpoints?: { intervalMs: number; onError: (error: Error) => void };
  /**
   * Another process on this file runs the background checkpoints (the primary of `serve --workers
   * N`): this connection's commits checkpoint only past {@link SAFETY_AUTOCHECKPOINT_PAGES}, which
   * the other process's checkpoints keep the WAL far below; if they stop, the WAL stays bounded.
   */
  checkpointedElsewhere?: boolean;
}

function openSqliteDatabase(path: string): Database.Database {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // NORMAL is durable across process crashes in WAL mode (only an OS crash may lose the last commits).
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  db.exec(SCHEMA);
  addMissingColumns(db);
  return db;
}

/** Columns added after the first release: a database created before them gets them on open. */
const ADDED_COLUMNS: Array<{ table: string; column: string; type: string }> = [
  { table: 'api_keys', column: 'settings', type: 'TEXT' },
  { table: 'api_keys', column: 'key_secret_hash', type: 'TEXT' },
];

function addMissingColumns(db: Database.Database): void {
  for (const { table, column, type } of ADDED_COLUMNS) {
    const columns = db.pragma(`table_info(${table})`) as Array<{ name: string }>;
    if (!columns.some((existing) => existing.name === column)) db.exec(`ALTER TABLE ${table} ADD COLUMN ${column} ${type}`);
  }
}

interface SpendDbRow {
  day: string;
  team_id: string;
  key_id: string;
  network: string;
  method: string;
  units: number;
  usd: number;
  saved_units: number;
}

interface UsageDbRow {
  day: string;
  team_id: string;
  key_id: string;
  network: string;
  method: string;
  credits: number;
  requests: number;
}

export function createSqliteStore(options: SqliteStoreOptions): Store {
  const db = openSqliteDatabase(options.path);
  const now = options.now ?? Date.now;
  let checkpointer: SqliteCheckpointer | undefined;
  if (options.checkpointedElsewhere && options.path !== ':memory:') db.pragma(`wal_autocheckpoint = ${SAFETY_AUTOCHECKPOINT_PAGES}`);
  if (options.backgroundCheckpoints !== undefined && options.path !== ':memory:') {
    const { intervalMs, onError } = options.backgroundCheckpoints;
    db.pragma('wal_autocheckpoint = 0');
    checkpointer = startSqliteCheckpointer(options.path, {
      intervalMs,
      onError: (error) => {
        if (db.open) db.pragma(`wal_autocheckpoint = ${SQLITE_DEFAULT_AUTOCHECKPOINT_PAGES}`);
        onError(error);
      },
    });
  }
  const ledger = createSqliteLedger(db, { now });
  const directory = createSqliteKeyDirectory(db, { now });
  const portal = createSqliteTeamTokens(db, { now });
  const importAll = db.transaction((snapshot: StoreSnapshot) => {
    directory.importEntries(snapshot);
    ledger.importUsage(snapshot.usage);
    for (const row of snapshot.hourlyUsage) addHourly.run(row.teamId, row.keyId, row.day, row.hour, row.credits, row.requests);
    for (const token of snapshot.teamTokens) insertToken.run(token.id, token.teamId, token.tokenHash, token.label, token.createdAt, token.revokedAt);
    for (const { teamId, settings } of snapshot.alertSettings) {
      setAlerts.run(teamId, settings.thresholds === null ? null : JSON.stringify(settings.thresholds), settings.webhookUrl, settings.signingSecret);
    }
    for (const { name, value } of snapshot.sharedSecrets) replaceSecret.run(name, value);
  });
  const addHourly = db.prepare<[string, string, string, number, number, number]>(
    `INSERT INTO usage_hours (team_id, key_id, day, hour, credits, requests) VALUES (?, ?, ?, ?, ?, ?)
     ON CONFLICT DO UPDATE SET credits = credits + excluded.credits, requests = requests + excluded.requests`,
  );
  const insertToken = db.prepare<[string, string, string, string | null, number, number | null]>(
    'INSERT INTO team_tokens (id, team_id, token_hash, label, created_at, revoked_at) VALUES (?, ?, ?, ?, ?, ?)',
  );
  const setAlerts = db.prepare<[string, string | null, string | null, string | null]>(
    `INSERT INTO team_alerts (team_id, thresholds, webhook_url, signing_secret) VALUES (?, ?, ?, ?)
     ON CONFLICT DO UPDATE SET thresholds = excluded.thresholds, webhook_url = excluded.webhook_url, signing_secret = excluded.signing_secret`,
  );
  const replaceSecret = db.prepare<[string, string]>('INSERT OR REPLACE INTO shared_secrets (name, value) VALUES (?, ?)');

  async function usage(query: UsageQuery): Promise<UsageRow[]> {
    const conditions = ['day >= ?', 'day <= ?'];
    const params: string[] = [query.fromDay, query.toDay];
    if (query.teamId !== undefined) {
      conditions.push('team_id = ?');
      params.push(query.teamId);
    }
    if (query.keyId !== undefined) {
      conditions.push('key_id = ?');
      params.push(query.keyId);
    }
    const rows = db
      .prepare<string[], UsageDbRow>(
        `SELECT day, team_id, key_id, network, method, credits, requests FROM usage
         WHERE ${conditions.join(' AND ')} ORDER BY day, team_id, key_id, network, method`,
      )
      .all(...params);
    const spend = db
      .prepare<string[], SpendDbRow>(`SELECT day, team_id, key_id, network, method, units, usd, saved_units FROM provider_spend WHERE ${conditions.join(' AND ')}`)
      .all(...params);
    return withProviderSpend(
      rows.map((row) => ({
        day: row.day,
        teamId: row.team_id,
        keyId: row.key_id,
        network: row.network,
        method: row.method,
        credits: row.credits,
        requests: row.requests,
      })),
      spend.map((row) => ({ day: row.day, teamId: row.team_id, keyId: row.key_id, network: row.network, method: row.method, units: row.units, usd: row.usd, savedUnits: row.saved_units })),
    );
  }

  const addSpend = db.prepare<[string, string, string, string, string, number, number, number]>(
    `INSERT INTO provider_spend (team_id, key_id, day, network, method, units, usd, saved_units) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT DO UPDATE SET units = units + excluded.units, usd = usd + excluded.usd, saved_units = saved_units + excluded.saved_units`,
  );
  const addUnits = db.prepare<[string, string, number]>(
    'INSERT INTO upstream_units (scope, period, units) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET units = units + excluded.units',
  );
  const addUnitsRows = db.transaction((rows: readonly UpstreamUnitsRow[]) => {
    for (const row of rows) addUnits.run(row.scope, row.period, row.units);
  });
  const unitsOf = db.prepare<[string, string], { units: number }>('SELECT units FROM upstream_units WHERE scope = ? AND period = ?');
  const addSpendRows = db.transaction((rows: readonly ProviderSpendRow[]) => {
    for (const row of rows) addSpend.run(row.teamId, row.keyId, row.day, row.network, row.method, row.units, row.usd, row.savedUnits);
  });

  const storeSecret = db.prepare<[string, string]>('INSERT OR IGNORE INTO shared_secrets (name, value) VALUES (?, ?)');
  const readSecret = db.prepare<[string], { value: string }>('SELECT value FROM shared_secrets WHERE name = ?');
  const hourlyRows = db.prepare<[string, string], { key_id: string; hour: number; credits: number; requests: number }>(
    'SELECT key_id, hour, credits, requests FROM usage_hours WHERE team_id = ? AND day = ? ORDER BY key_id, hour',
  );

  return composeStore({
    ledger,
    directory,
    usage,
    async sharedSecret(name, candidate) {
      storeSecret.run(name, candidate);
      return readSecret.get(name)!.value;
    },
    async hourlyUsage(query) {
      return hourlyRows.all(query.teamId, query.day).map((row) => ({ day: query.day, hour: row.hour, teamId: query.teamId, keyId: row.key_id, credits: row.credits, requests: row.requests }));
    },
    portal,
    requests: createSqliteRequestLog(db),
    providerSpend: {
      async addProviderSpend(rows) {
        addSpendRows(rows);
      },
    },
    upstreamQuotas: {
      async addUpstreamUnits(rows) {
        addUnitsRows(rows);
      },
      async upstreamUnits(scopes, period) {
        return scopes.map((scope) => unitsOf.get(scope, period)?.units ?? 0);
      },
    },
    async teamTokensWithHashes() {
      return db
        .prepare<[], { id: string; team_id: string; token_hash: string; label: string | null; created_at: number; revoked_at: number | null }>(
          'SELECT id, team_id, token_hash, label, created_at, revoked_at FROM team_tokens ORDER BY created_at, id',
        )
        .all()
        .map((row) => ({ id: row.id, teamId: row.team_id, tokenHash: row.token_hash, label: row.label, createdAt: row.created_at, revokedAt: row.revoked_at }));
    },
    async sharedSecrets() {
      return db.prepare<[], { name: string; value: string }>('SELECT name, value FROM shared_secrets ORDER BY name').all();
    },
    async importSnapshot(snapshot) {
      importAll(snapshot);
    },
    async ping() {
      db.prepare('SELECT 1').get();
    },
    async close() {
      await checkpointer?.stop();
      db.close();
    },
  });
}
