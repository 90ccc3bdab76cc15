import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { newId } from './ids.js';
import { startSqliteCheckpointer, type SqliteCheckpointer } from './sqlite-checkpointer.js';
import { isLocalOwnerDead, PROCESS_OWNER_TAG } from './owner.js';
import { createThroughputLimiter } from './throughput.js';
import {
  StoreConflictError,
  type ApiKey,
  type ChargeSubject,
  type KeyPatch,
  type KeyWithTeam,
  type LedgerOp,
  type LedgerResult,
  type NewKey,
  type NewTeam,
  type Store,
  type Team,
  type TeamPatch,
  type StoreSnapshot,
} from './types.js';

/**
 * The embedded store: one SQLite file in WAL mode, for one gateway process or several on one
 * host (writers take the database lock with `BEGIN IMMEDIATE` and wait up to `busy_timeout`).
 * better-sqlite3 is synchronous; its calls are wrapped in promises to honour the async
 * {@link Store} interface.
 *
 * Ledger: `team_days`/`key_days` hold what a team or key has spent or reserved on a UTC day, so
 * a reservation is one read and one write instead of a sum over usage rows; `usage` holds settled
 * charges by team, key, day, network and method; `reservations` holds credits held for calls in
 * flight, tagged with the owning process so a restart can refund those of a process that died.
 * Invariant: team_days.used = Σ usage.credits + Σ reservations.cost for that team and day.
 *
 * The credits-per-second limiter is in process memory with this driver: with several processes
 * on one host each enforces the limit on its own traffic (the Redis driver shares it).
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
  daily_cap INTEGER,
  allowed_networks TEXT,
  expires_at INTEGER,
  revoked_at INTEGER,
  created_at INTEGER NOT NULL
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

/** A team's or key's spend of one day, as read at the start of a batch plus what the batch changed. */
interface DayAccount {
  id: string;
  day: string;
  used: number;
  delta: number;
}

interface UsageAccount {
  teamId: string;
  keyId: string;
  day: string;
  network: string;
  method: string;
  credits: number;
  requests: number;
}

interface ReservationRow {
  team_id: string;
  key_id: string;
  day: string;
  network: string;
  method: string;
  cost: number;
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
/** SQLite's own `wal_autocheckpoint` default. */
const SQLITE_DEFAULT_AUTOCHECKPOINT_PAGES = 1000;

const TEAM_COLUMNS = 'id, name, daily_credits, credits_per_second, created_at';

export interface SqliteStoreOptions {
  path: string;
  now?: () => number;
  /**
   * For a long-running server: checkpoint the WAL on a worker thread every `intervalMs` instead of
   * inside the commit that fills it (see sqlite-checkpointer.ts). `onError` hears of a failed
   * thread; automatic checkpoints are then turned back on.
   */
  backgroundCheckpoints?: { intervalMs: number; onError: (error: Error) => void };
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
  return db;
}

export function createSqliteStore(options: SqliteStoreOptions): Store {
  const db = openSqliteDatabase(options.path);
  const now = options.now ?? Date.now;
  let checkpointer: SqliteCheckpointer | undefined;
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
  const owner = PROCESS_OWNER_TAG;
  const throughput = createThroughputLimiter();
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
      `INSERT INTO api_keys (id, team_id, label, daily_cap, allowed_networks, expires_at, revoked_at, created_at)
       VALUES (@id, @teamId, @label, @dailyCap, @allowedNetworks, @expiresAt, NULL, @createdAt)`,
    ),
    insertSecret: db.prepare<[string, string]>('INSERT INTO key_secrets (secret_hash, key_id, valid_until) VALUES (?, ?, NULL)'),
    // Named parameters: better-sqlite3 rejects numbered ones (`?1`) bound positionally ("Too many parameter values").
    expireSecrets: db.prepare<[{ validUntil: number; keyId: string }]>(
      'UPDATE key_secrets SET valid_until = MIN(COALESCE(valid_until, @validUntil), @validUntil) WHERE key_id = @keyId',
    ),
    keyBySecretHash: db.prepare<[string], KeyRow & { valid_until: number | null }>(
      `SELECT k.id, k.team_id, k.label, k.daily_cap, k.allowed_networks, k.expires_at, k.revoked_at, k.created_at, s.valid_until
       FROM key_secrets s JOIN api_keys k ON k.id = s.key_id WHERE s.secret_hash = ?`,
    ),
    keyById: db.prepare<[string], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ?`),
    listKeys: db.prepare<[], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY created_at, id`),
    listKeysOfTeam: db.prepare<[string], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE team_id = ? ORDER BY created_at, id`),
    revokeKey: db.prepare<[number, string]>('UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?'),
    updateKey: db.prepare(
      `UPDATE api_keys SET
         label = CASE WHEN @setLabel THEN @label ELSE label END,
         daily_cap = CASE WHEN @setDailyCap THEN @dailyCap ELSE daily_cap END,
         allowed_networks = CASE WHEN @setAllowedNetworks THEN @allowedNetworks ELSE allowed_networks END,
         expires_at = CASE WHEN @setExpiresAt THEN @expiresAt ELSE expires_at END
       WHERE id = @id`,
    ),
    teamUsed: db.prepare<[string, string], { used: number }>('SELECT used FROM team_days WHERE team_id = ? AND day = ?'),
    keyUsed: db.prepare<[string, string], { used: number }>('SELECT used FROM key_days WHERE key_id = ? AND day = ?'),
    addTeamUsed: db.prepare<[string, string, number]>(
      'INSERT INTO team_days (team_id, day, used) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET used = used + excluded.used',
    ),
    addKeyUsed: db.prepare<[string, string, number]>(
      'INSERT INTO key_days (key_id, day, used) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET used = used + excluded.used',
    ),
    addUsage: db.prepare<[string, string, string, string, string, number, number]>(
      `INSERT INTO usage (team_id, key_id, day, network, method, credits, requests) VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT DO UPDATE SET credits = credits + excluded.credits, requests = requests + excluded.requests`,
    ),
    insertReservation: db.prepare(
      `INSERT INTO reservations (id, owner, team_id, key_id, day, network, method, cost, created_at)
       VALUES (@id, @owner, @teamId, @keyId, @day, @network, @method, @cost, @createdAt)`,
    ),
    takeReservation: db.prepare<[string], ReservationRow>(
      'DELETE FROM reservations WHERE id = ? RETURNING team_id, key_id, day, network, method, cost',
    ),
    reservationOwners: db.prepare<[], { owner: string }>('SELECT DISTINCT owner FROM reservations'),
    takeReservationsOfOwner: db.prepare<[string], ReservationRow>(
      'DELETE FROM reservations WHERE owner = ? RETURNING team_id, key_id, day, network, method, cost',
    ),
    takeReservationsOlderThan: db.prepare<[number], ReservationRow>(
      'DELETE FROM reservations WHERE created_at < ? RETURNING team_id, key_id, day, network, method, cost',
    ),
  };

  /**
   * Applies a batch of ledger operations in one IMMEDIATE transaction. A team's or key's spend of
   * a day is read once per batch into an account object; operations are decided in order against
   * those objects, and each account (and each usage row) is written once at the end, so a turn
   * of 100 cache hits on one key costs three small writes. Consecutive operations of the same
   * subject (the common case under load) reuse the previous one's accounts without any lookup.
   */
  const applyLedgerBatch = db.transaction((ops: readonly LedgerOp[]): LedgerResult[] => {
    const teams = new Map<string, DayAccount>();
    const keys = new Map<string, DayAccount>();
    const usage = new Map<string, UsageAccount>();

    const account = (accounts: Map<string, DayAccount>, read: (id: string, day: string) => { used: number } | undefined, id: string, day: string) => {
      const mapKey = `${id}\u0000${day}`;
      let found = accounts.get(mapKey);
      if (found === undefined) {
        found = { id, day, used: read(id, day)?.used ?? 0, delta: 0 };
        accounts.set(mapKey, found);
      }
      return found;
    };
    const teamAccount = (teamId: string, day: string) => account(teams, (id, d) => statements.teamUsed.get(id, d), teamId, day);
    const keyAccount = (keyId: string, day: string) => account(keys, (id, d) => statements.keyUsed.get(id, d), keyId, day);
    const usageAccount = (teamId: string, keyId: string, day: string, network: string, method: string): UsageAccount => {
      const mapKey = `${teamId}\u0000${keyId}\u0000${day}\u0000${network}\u0000${method}`;
      let found = usage.get(mapKey);
      if (found === undefined) {
        found = { teamId, keyId, day, network, method, credits: 0, requests: 0 };
        usage.set(mapKey, found);
      }
      return found;
    };
    const spend = (team: DayAccount, key: DayAccount, credits: number): void => {
      team.used += credits;
      team.delta += credits;
      key.used += credits;
      key.delta += credits;
    };

    let last: { subject: ChargeSubject; team: DayAccount; key: DayAccount; usage: UsageAccount } | undefined;
    const accountsOf = (subject: ChargeSubject) => {
      const previous = last?.subject;
      if (
        previous === undefined ||
        previous.teamId !== subject.teamId ||
        previous.keyId !== subject.keyId ||
        previous.day !== subject.day ||
        previous.network !== subject.network ||
        previous.method !== subject.method
      ) {
        last = {
          subject,
          team: teamAccount(subject.teamId, subject.day),
          key: keyAccount(subject.keyId, subject.day),
          usage: usageAccount(subject.teamId, subject.keyId, subject.day, subject.network, subject.method),
        };
      }
      return last!;
    };

    /** Quota and throughput checks; consumes throughput only when the whole op is allowed. */
    const admit = (subject: ChargeSubject, nowMs: number, accounts: { team: DayAccount; key: DayAccount }): LedgerResult => {
      const used = accounts.team.used;
      if (used + subject.cost > subject.teamDailyCredits) {
        return { ok: false, reason: 'daily_credits_exhausted', scope: 'team', limit: subject.teamDailyCredits, used, teamUsed: used };
      }
      if (subject.keyDailyCap !== null && accounts.key.used + subject.cost > subject.keyDailyCap) {
        return { ok: false, reason: 'daily_credits_exhausted', scope: 'key', limit: subject.keyDailyCap, used: accounts.key.used, teamUsed: used };
      }
      if (subject.teamCreditsPerSecond !== null) {
        const retryAfterMs = throughput.take(subject.teamId, subject.cost, subject.teamCreditsPerSecond, nowMs);
        if (retryAfterMs > 0) return { ok: false, reason: 'rate_limited', retryAfterMs, teamUsed: used };
      }
      spend(accounts.team, accounts.key, subject.cost);
      return { ok: true, teamUsed: used + subject.cost };
    };

    const results = ops.map((op): LedgerResult => {
      switch (op.type) {
        case 'peek':
          return { ok: true, teamUsed: teamAccount(op.teamId, op.day).used };
        case 'charge': {
          const accounts = accountsOf(op.subject);
          const result = admit(op.subject, op.nowMs, accounts);
          if (result.ok) {
            accounts.usage.credits += op.subject.cost;
            accounts.usage.requests += 1;
          }
          return result;
        }
        case 'reserve': {
          const result = admit(op.subject, op.nowMs, accountsOf(op.subject));
          if (result.ok) {
            const { subject } = op;
            statements.insertReservation.run({
              id: op.reservationId,
              owner,
              teamId: subject.teamId,
              keyId: subject.keyId,
              day: subject.day,
              network: subject.network,
              method: subject.method,
              cost: subject.cost,
              createdAt: op.nowMs,
            });
          }
          return result;
        }
        case 'settle': {
          const row = statements.takeReservation.get(op.reservationId);
          if (row === undefined) return { ok: true, teamUsed: 0 };
          const entry = usageAccount(row.team_id, row.key_id, row.day, row.network, row.method);
          entry.credits += row.cost;
          entry.requests += 1;
          return { ok: true, teamUsed: teamAccount(row.team_id, row.day).used };
        }
        case 'refund': {
          const row = statements.takeReservation.get(op.reservationId);
          if (row === undefined) return { ok: true, teamUsed: 0 };
          const team = teamAccount(row.team_id, row.day);
          spend(team, keyAccount(row.key_id, row.day), -row.cost);
          return { ok: true, teamUsed: team.used };
        }
      }
    });

    for (const team of teams.values()) if (team.delta !== 0) statements.addTeamUsed.run(team.id, team.day, team.delta);
    for (const key of keys.values()) if (key.delta !== 0) statements.addKeyUsed.run(key.id, key.day, key.delta);
    for (const row of usage.values()) {
      if (row.requests > 0) statements.addUsage.run(row.teamId, row.keyId, row.day, row.network, row.method, row.credits, row.requests);
    }
    return results;
  });

  const refundRows = db.transaction((rows: ReservationRow[]) => {
    for (const row of rows) {
      statements.addTeamUsed.run(row.team_id, row.day, -row.cost);
      statements.addKeyUsed.run(row.key_id, row.day, -row.cost);
    }
  });

  const recover = db.transaction((olderThanMs: number): number => {
    const taken: ReservationRow[] = [];
    for (const { owner: other } of statements.reservationOwners.all()) {
      if (isLocalOwnerDead(other)) taken.push(...statements.takeReservationsOfOwner.all(other));
    }
    taken.push(...statements.takeReservationsOlderThan.all(now() - olderThanMs));
    refundRows(taken);
    return taken.length;
  });

  const rotate = db.transaction((id: string, newSecretHash: string, previousValidUntil: number): boolean => {
    if (statements.keyById.get(id) === undefined) return false;
    statements.expireSecrets.run({ validUntil: previousValidUntil, keyId: id });
    statements.insertSecret.run(newSecretHash, id);
    return true;
  });

  const importAll = db.transaction((snapshot: StoreSnapshot) => {
    for (const team of snapshot.teams) {
      statements.insertTeam.run(team.id, team.name, team.dailyCredits, team.creditsPerSecond, team.createdAt);
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
      });
      if (key.revokedAt !== null) statements.revokeKey.run(key.revokedAt, key.id);
      for (const secret of key.secrets) {
        statements.insertSecret.run(secret.hash, key.id);
        if (secret.validUntil !== null) db.prepare('UPDATE key_secrets SET valid_until = ? WHERE secret_hash = ?').run(secret.validUntil, secret.hash);
      }
    }
    for (const row of snapshot.usage) {
      statements.addUsage.run(row.teamId, row.keyId, row.day, row.network, row.method, row.credits, row.requests);
      statements.addTeamUsed.run(row.teamId, row.day, row.credits);
      statements.addKeyUsed.run(row.keyId, row.day, row.credits);
    }
  });

  const insertKeyWithSecret = db.transaction((row: Record<string, unknown>, secretHash: string) => {
    statements.insertKey.run(row);
    statements.insertSecret.run(secretHash, row.id as string);
  });

  const store: Store = {
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
      return { key: toKey(keyRow), team: toTeam(teamRow), secretValidUntil: keyRow.valid_until };
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
      });
      const row = statements.keyById.get(id);
      return row === undefined ? null : toKey(row);
    },
    async rotateKey(id, newSecretHash, previousValidUntil) {
      return rotate(id, newSecretHash, previousValidUntil);
    },
    async applyLedger(ops) {
      return applyLedgerBatch.immediate(ops);
    },
    async usage(query) {
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
        .prepare<string[], { day: string; team_id: string; key_id: string; network: string; method: string; credits: number; requests: number }>(
          `SELECT day, team_id, key_id, network, method, credits, requests FROM usage
           WHERE ${conditions.join(' AND ')} ORDER BY day, team_id, key_id, network, method`,
        )
        .all(...params);
      return rows.map((row) => ({
        day: row.day,
        teamId: row.team_id,
        keyId: row.key_id,
        network: row.network,
        method: row.method,
        credits: row.credits,
        requests: row.requests,
      }));
    },
    async recoverReservations(olderThanMs) {
      return recover.immediate(olderThanMs);
    },
    async exportSnapshot(day) {
      const secrets = db.prepare<[], { key_id: string; secret_hash: string; valid_until: number | null }>('SELECT key_id, secret_hash, valid_until FROM key_secrets').all();
      const keys = statements.listKeys.all().map((row) => ({
        ...toKey(row),
        secrets: secrets.filter((secret) => secret.key_id === row.id).map((secret) => ({ hash: secret.secret_hash, validUntil: secret.valid_until })),
      }));
      return { teams: statements.listTeams.all().map(toTeam), keys, day, usage: await store.usage({ fromDay: day, toDay: day }) };
    },
    async importSnapshot(snapshot) {
      try {
        importAll(snapshot);
      } catch (error) {
        // The transaction rolled back; a team name clash is a conflict, as the interface says.
        const clash =
          (error as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE'
            ? snapshot.teams.find((team) => statements.teamByIdOrName.get(team.name, team.name)?.name === team.name)
            : undefined;
        if (clash !== undefined) throw new StoreConflictError(`a team named "${clash.name}" already exists`);
        throw error;
      }
    },
    async ping() {
      db.prepare('SELECT 1').get();
    },
    async close() {
      await checkpointer?.stop();
      db.close();
    },
  };
  return store;
}
