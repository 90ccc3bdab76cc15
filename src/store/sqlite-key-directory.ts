import type Database from 'better-sqlite3';
import { newId } from './ids.js';
import { StoreConflictError, type ApiKey, type KeySettings, type KeyDirectory, type KeyPatch, type KeyWithTeam, type NewKey, type NewTeam, type StoreSnapshot, type Team, type TeamPatch } from './types.js';

/**
 * The SQLite driver's teams, keys and secrets (tables `teams`, `api_keys`, `key_secrets`; schema
 * in sqlite-store.ts). Only secret hashes are stored; a key may have several secrets while a
 * rotation's grace period runs.
 */

export interface SqliteKeyDirectory extends KeyDirectory {
  /** Teams and keys with their secrets, for a snapshot. */
  exportEntries(): Pick<StoreSnapshot, 'teams' | 'keys'>;
  /** Writes a snapshot's teams and keys, ids kept; runs inside the caller's transaction. */
  importEntries(snapshot: Pick<StoreSnapshot, 'teams' | 'keys'>): void;
}

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
  settings: string | null;
  key_secret_hash: string | null;
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
    settings: row.settings === null ? null : (JSON.parse(row.settings) as KeySettings),
    hasKeySecret: row.key_secret_hash !== null,
  };
}

const settingsText = (settings: KeySettings | null | undefined): string | null => (settings == null ? null : JSON.stringify(settings));

const KEY_COLUMNS = 'id, team_id, label, daily_cap, allowed_networks, expires_at, revoked_at, created_at, settings, key_secret_hash';
const TEAM_COLUMNS = 'id, name, daily_credits, credits_per_second, created_at';

const isUniqueViolation = (error: unknown): boolean => (error as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE';

export function createSqliteKeyDirectory(db: Database.Database, options: { now: () => number }): SqliteKeyDirectory {
  const { now } = options;
  const statements = {
    insertTeam: db.prepare<[string, string, number, number | null, number]>(
      'INSERT INTO teams (id, name, daily_credits, credits_per_second, created_at) VALUES (?, ?, ?, ?, ?)',
    ),
    teamByIdOrName: db.prepare<[string, string], TeamRow>(`SELECT ${TEAM_COLUMNS} FROM teams WHERE id = ? OR name = ?`),
    teamById: db.prepare<[string], TeamRow>(`SELECT ${TEAM_COLUMNS} FROM teams WHERE id = ?`),
    listTeams: db.prepare<[], TeamRow>(`SELECT ${TEAM_COLUMNS} FROM teams ORDER BY created_at, name`),
    updateTeam: db.prepare(
      `UPDATE teams SET
         daily_credits = COALESCE(@dailyCredits, daily_credits),
         credits_per_second = CASE WHEN @setCreditsPerSecond THEN @creditsPerSecond ELSE credits_per_second END
       WHERE id = @id`,
    ),
    insertKey: db.prepare(
      `INSERT INTO api_keys (id, team_id, label, daily_cap, allowed_networks, expires_at, revoked_at, created_at, settings, key_secret_hash)
       VALUES (@id, @teamId, @label, @dailyCap, @allowedNetworks, @expiresAt, NULL, @createdAt, @settings, @keySecretHash)`,
    ),
    insertSecret: db.prepare<[string, string, number | null]>('INSERT INTO key_secrets (secret_hash, key_id, valid_until) VALUES (?, ?, ?)'),
    // Named parameters: better-sqlite3 rejects numbered ones (`?1`) bound positionally ("Too many parameter values").
    expireSecrets: db.prepare<[{ validUntil: number; keyId: string }]>(
      'UPDATE key_secrets SET valid_until = MIN(COALESCE(valid_until, @validUntil), @validUntil) WHERE key_id = @keyId',
    ),
    keyBySecretHash: db.prepare<[string], KeyRow & { valid_until: number | null }>(
      `SELECT k.id, k.team_id, k.label, k.daily_cap, k.allowed_networks, k.expires_at, k.revoked_at, k.created_at, k.settings, k.key_secret_hash, s.valid_until
       FROM key_secrets s JOIN api_keys k ON k.id = s.key_id WHERE s.secret_hash = ?`,
    ),
    keyById: db.prepare<[string], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ?`),
    listKeys: db.prepare<[], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`),
    listKeysOfTeam: db.prepare<[string], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE team_id = ? ORDER BY created_at, id`),
    listSecrets: db.prepare<[], { key_id: string; secret_hash: string; valid_until: number | null }>('SELECT key_id, secret_hash, valid_until FROM key_secrets'),
    revokeKey: db.prepare<[number, string]>('UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?'),
    updateKey: db.prepare(
      `UPDATE api_keys SET
         label = CASE WHEN @setLabel THEN @label ELSE label END,
         daily_cap = CASE WHEN @setDailyCap THEN @dailyCap ELSE daily_cap END,
         allowed_networks = CASE WHEN @setAllowedNetworks THEN @allowedNetworks ELSE allowed_networks END,
         expires_at = CASE WHEN @setExpiresAt THEN @expiresAt ELSE expires_at END,
         settings = CASE WHEN @setSettings THEN @settings ELSE settings END,
         key_secret_hash = CASE WHEN @setKeySecretHash THEN @keySecretHash ELSE key_secret_hash END
       WHERE id = @id`,
    ),
  };

  const rotate = db.transaction((id: string, newSecretHash: string, previousValidUntil: number): boolean => {
    if (statements.keyById.get(id) === undefined) return false;
    statements.expireSecrets.run({ validUntil: previousValidUntil, keyId: id });
    statements.insertSecret.run(newSecretHash, id, null);
    return true;
  });

  const insertKeyWithSecret = db.transaction((row: Record<string, unknown>, secretHash: string) => {
    statements.insertKey.run(row);
    statements.insertSecret.run(secretHash, row.id as string, null);
  });

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
        if (isUniqueViolation(error)) throw new StoreConflictError(`a team named "${team.name}" already exists`);
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
    async updateTeam(id, patch: TeamPatch) {
      statements.updateTeam.run({
        id,
        dailyCredits: patch.dailyCredits ?? null,
        setCreditsPerSecond: patch.creditsPerSecond !== undefined ? 1 : 0,
        creditsPerSecond: patch.creditsPerSecond ?? null,
      });
      const row = statements.teamById.get(id);
      return row === undefined ? null : toTeam(row);
    },
    async createKey(key: NewKey) {
      const id = newId('key');
      insertKeyWithSecret(
        {
          id,
          teamId: key.teamId,
          label: key.label ?? null,
          dailyCap: key.dailyCap ?? null,
          allowedNetworks: key.allowedNetworks == null ? null : JSON.stringify(key.allowedNetworks),
          expiresAt: key.expiresAt ?? null,
          createdAt: now(),
          settings: settingsText(key.settings),
          keySecretHash: null,
        },
        key.secretHash,
      );
      return toKey(statements.keyById.get(id)!);
    },
    async findKeyBySecretHash(secretHash): Promise<KeyWithTeam | null> {
      const keyRow = statements.keyBySecretHash.get(secretHash);
      if (keyRow === undefined) return null;
      const teamRow = statements.teamById.get(keyRow.team_id);
      if (teamRow === undefined) return null;
      return { key: toKey(keyRow), team: toTeam(teamRow), secretValidUntil: keyRow.valid_until, keySecretHash: keyRow.key_secret_hash };
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
    async updateKey(id, patch: KeyPatch) {
      statements.updateKey.run({
        id,
        setLabel: patch.label !== undefined ? 1 : 0,
        label: patch.label ?? null,
        setDailyCap: patch.dailyCap !== undefined ? 1 : 0,
        dailyCap: patch.dailyCap ?? null,
        setAllowedNetworks: patch.allowedNetworks !== undefined ? 1 : 0,
        allowedNetworks: patch.allowedNetworks == null ? null : JSON.stringify(patch.allowedNetworks),
        setExpiresAt: patch.expiresAt !== undefined ? 1 : 0,
        expiresAt: patch.expiresAt ?? null,
        setSettings: patch.settings !== undefined ? 1 : 0,
        settings: settingsText(patch.settings),
        setKeySecretHash: patch.keySecretHash !== undefined ? 1 : 0,
        keySecretHash: patch.keySecretHash ?? null,
      });
      const row = statements.keyById.get(id);
      return row === undefined ? null : toKey(row);
    },
    async rotateKey(id, newSecretHash, previousValidUntil) {
      return rotate(id, newSecretHash, previousValidUntil);
    },
    exportEntries() {
      const secrets = statements.listSecrets.all();
      const keys = statements.listKeys.all().map((row) => ({
        ...toKey(row),
        keySecretHash: row.key_secret_hash,
        secrets: secrets.filter((secret) => secret.key_id === row.id).map((secret) => ({ hash: secret.secret_hash, validUntil: secret.valid_until })),
      }));
      return { teams: statements.listTeams.all().map(toTeam), keys };
    },
    importEntries(snapshot) {
      for (const team of snapshot.teams) {
        try {
          statements.insertTeam.run(team.id, team.name, team.dailyCredits, team.creditsPerSecond, team.createdAt);
        } catch (error) {
          // A name clash is a conflict, as the interface says (the caller's transaction rolls back).
          if (isUniqueViolation(error) && statements.teamByIdOrName.get(team.name, team.name)?.name === team.name) {
            throw new StoreConflictError(`a team named "${team.name}" already exists`);
          }
          throw error;
        }
      }
      for (const key of snapshot.keys) {
        statements.insertKey.run({
          id: key.id,
          teamId: key.teamId,
          label: key.label,
          dailyCap: key.dailyCap,
          allowedNetworks: key.allowedNetworks === null ? null : JSON.stringify(key.allowedNetworks),
          expiresAt: key.expiresAt,
          createdAt: key.createdAt,
          settings: settingsText(key.settings),
          keySecretHash: key.keySecretHash ?? null,
        });
        if (key.revokedAt !== null) statements.revokeKey.run(key.revokedAt, key.id);
        for (const secret of key.secrets) statements.insertSecret.run(secret.hash, key.id, secret.validUntil);
      }
    },
  };
}
