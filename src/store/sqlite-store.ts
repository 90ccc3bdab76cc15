import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { newId } from './ids.js';
import { StoreConflictError, type ApiKey, type KeyWithTeam, type NewKey, type NewTeam, type Store, type Team } from './types.js';

/**
 * The embedded store: one SQLite file in WAL mode, safe for one gateway process or several on
 * one host (writers wait up to `busy_timeout`). better-sqlite3 is synchronous; its calls are
 * wrapped in resolved promises to honour the async {@link Store} interface.
 */

const SCHEMA = `
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
  secret_hash TEXT NOT NULL UNIQUE,
  daily_cap INTEGER,
  allowed_networks TEXT,
  expires_at INTEGER,
  revoked_at INTEGER,
  created_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS api_keys_team ON api_keys(team_id);
`;

interface TeamRow {
  id: string;
  name: string;
  daily_credits: number;
  credits_per_second: number | null;
  created_at: number;
}

interface KeyRow {
  id: string;
  team_id: string;
  label: string | null;
  daily_cap: number | null;
  allowed_networks: string | null;
  expires_at: number | null;
  revoked_at: number | null;
  created_at: number;
}

function toTeam(row: TeamRow): Team {
  return {
    id: row.id,
    name: row.name,
    dailyCredits: row.daily_credits,
    creditsPerSecond: row.credits_per_second,
    createdAt: row.created_at,
  };
}

function toKey(row: KeyRow): ApiKey {
  return {
    id: row.id,
    teamId: row.team_id,
    label: row.label,
    dailyCap: row.daily_cap,
    allowedNetworks: row.allowed_networks === null ? null : (JSON.parse(row.allowed_networks) as string[]),
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
    createdAt: row.created_at,
  };
}

const KEY_COLUMNS = 'id, team_id, label, daily_cap, allowed_networks, expires_at, revoked_at, created_at';
const TEAM_COLUMNS = 'id, name, daily_credits, credits_per_second, created_at';

export interface SqliteStoreOptions {
  path: string;
  now?: () => number;
}

export function openSqliteDatabase(path: string): Database.Database {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  // NORMAL is durable across process crashes in WAL mode (only an OS crash may lose the last commits).
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  db.exec(SCHEMA);
  return db;
}

export function createSqliteStore(options: SqliteStoreOptions): Store {
  const db = openSqliteDatabase(options.path);
  const now = options.now ?? Date.now;
  const statements = {
    insertTeam: db.prepare<[string, string, number, number | null, number]>(
      'INSERT INTO teams (id, name, daily_credits, credits_per_second, created_at) VALUES (?, ?, ?, ?, ?)',
    ),
    teamByIdOrName: db.prepare<[string, string], TeamRow>(`SELECT ${TEAM_COLUMNS} FROM teams WHERE id = ? OR name = ?`),
    teamById: db.prepare<[string], TeamRow>(`SELECT ${TEAM_COLUMNS} FROM teams WHERE id = ?`),
    listTeams: db.prepare<[], TeamRow>(`SELECT ${TEAM_COLUMNS} FROM teams ORDER BY created_at, name`),
    insertKey: db.prepare(
      `INSERT INTO api_keys (id, team_id, label, secret_hash, daily_cap, allowed_networks, expires_at, revoked_at, created_at)
       VALUES (@id, @teamId, @label, @secretHash, @dailyCap, @allowedNetworks, @expiresAt, NULL, @createdAt)`,
    ),
    keyBySecretHash: db.prepare<[string], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE secret_hash = ?`),
    keyById: db.prepare<[string], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ?`),
    listKeys: db.prepare<[], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`),
    listKeysOfTeam: db.prepare<[string], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE team_id = ? ORDER BY created_at, id`),
    revokeKey: db.prepare<[number, string]>('UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?'),
  };

  return {
    async createTeam(team: NewTeam) {
      const row: TeamRow = {
        id: newId('team'),
        name: team.name,
        daily_credits: team.dailyCredits,
        credits_per_second: team.creditsPerSecond ?? null,
        created_at: now(),
      };
      try {
        statements.insertTeam.run(row.id, row.name, row.daily_credits, row.credits_per_second, row.created_at);
      } catch (error) {
        if ((error as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE') {
          throw new StoreConflictError(`a team named "${team.name}" already exists`);
        }
        throw error;
      }
      return toTeam(row);
    },
    async findTeam(idOrName) {
      const row = statements.teamByIdOrName.get(idOrName, idOrName);
      return row === undefined ? null : toTeam(row);
    },
    async listTeams() {
      return statements.listTeams.all().map(toTeam);
    },
    async createKey(key: NewKey) {
      const id = newId('key');
      const createdAt = now();
      statements.insertKey.run({
        id,
        teamId: key.teamId,
        label: key.label ?? null,
        secretHash: key.secretHash,
        dailyCap: key.dailyCap ?? null,
        allowedNetworks: key.allowedNetworks == null ? null : JSON.stringify(key.allowedNetworks),
        expiresAt: key.expiresAt ?? null,
        createdAt,
      });
      return toKey(statements.keyById.get(id)!);
    },
    async findKeyBySecretHash(secretHash): Promise<KeyWithTeam | null> {
      const keyRow = statements.keyBySecretHash.get(secretHash);
      if (keyRow === undefined) return null;
      const teamRow = statements.teamById.get(keyRow.team_id);
      if (teamRow === undefined) return null;
      return { key: toKey(keyRow), team: toTeam(teamRow) };
    },
    async listKeys(filter = {}) {
      const rows = filter.teamId === undefined ? statements.listKeys.all() : statements.listKeysOfTeam.all(filter.teamId);
      return rows.map(toKey);
    },
    async findKey(id) {
      const row = statements.keyById.get(id);
      return row === undefined ? null : toKey(row);
    },
    async revokeKey(id, at) {
      return statements.revokeKey.run(at, id).changes > 0;
    },
    async close() {
      db.close();
    },
  };
}
