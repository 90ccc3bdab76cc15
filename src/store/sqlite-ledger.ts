import type Database from 'better-sqlite3';
import { decideLedger, type Bucket, type LedgerCounters, type LedgerDecision, type LedgerDeltas } from '../metering/ledger-rule.js';
import { typedResults, type Ledger, type LedgerOp } from '../metering/ledger.js';
import { usageHour } from '../metering/usage-hour.js';
import { isLocalOwnerDead, PROCESS_OWNER_TAG } from './owner.js';
import type { UsageRow } from './types.js';

/**
 * The SQLite driver's ledger. A batch of operations is one IMMEDIATE transaction: the rule
 * (metering/ledger-rule.ts) reads the counters it needs through prepared statements, then what it
 * decided is written, each team's and key's day total and each usage row once, so a turn of 100
 * cache hits on one key costs a read of the team's total and three small writes.
 *
 * Tables (schema in sqlite-store.ts): `team_days`/`key_days` hold what a team or key has spent
 * or reserved on a UTC day; `usage` holds settled charges by team, key, day, network and method;
 * `reservations` holds credits held for calls in flight, tagged with the owning process so a
 * restart can refund those of a process that died.
 * Invariant: team_days.used = Σ usage.credits + Σ reservations.cost for that team and day.
 *
 * The credits-per-second buckets (`rate_buckets`) are read and written in the same transaction,
 * so the processes of one host on one file (the workers of `serve --workers N`) draw from one
 * bucket per team, as replicas do on Redis. Only teams with a limit have a row.
 */

/** How long a ledger batch waits for another process's write lock before it fails (as `busy_timeout`). */
const LOCK_WAIT_LIMIT_MS = 5_000;

export interface SqliteLedger extends Ledger {
  /** Adds a snapshot's usage rows and the day totals they make up; runs inside the caller's transaction. */
  importUsage(rows: readonly UsageRow[]): void;
}

interface ReservationRow {
  team_id: string;
  key_id: string;
  day: string;
  network: string;
  method: string;
  cost: number;
}

export function createSqliteLedger(db: Database.Database, options: { now: () => number }): SqliteLedger {
  const owner = PROCESS_OWNER_TAG;
  const statements = {
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
    addHour: db.prepare<[string, string, string, number, number, number]>(
      `INSERT INTO usage_hours (team_id, key_id, day, hour, credits, requests) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT DO UPDATE SET credits = credits + excluded.credits, requests = requests + excluded.requests`,
    ),
    insertReservation: db.prepare<[string, string, string, string, string, string, string, number, number]>(
      'INSERT INTO reservations (id, owner, team_id, key_id, day, network, method, cost, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)',
    ),
    // Read, then deleted by its own statement: `DELETE … RETURNING` would collect its one row in
    // a temporary b-tree that SQLite opens, zeroes and closes per statement.
    readReservation: db.prepare<[string], ReservationRow>('SELECT team_id, key_id, day, network, method, cost FROM reservations WHERE id = ?'),
    deleteReservation: db.prepare<[string]>('DELETE FROM reservations WHERE id = ?'),
    reservationOwners: db.prepare<[], { owner: string }>('SELECT DISTINCT owner FROM reservations'),
    reservationsOfOwner: db.prepare<[string], { id: string }>('SELECT id FROM reservations WHERE owner = ?'),
    reservationsOlderThan: db.prepare<[number], { id: string }>('SELECT id FROM reservations WHERE created_at < ?'),
    bucket: db.prepare<[string], Bucket>('SELECT tokens, at FROM rate_buckets WHERE team_id = ?'),
    writeBucket: db.prepare<[string, number, number]>(
      'INSERT INTO rate_buckets (team_id, tokens, at) VALUES (?, ?, ?) ON CONFLICT DO UPDATE SET tokens = excluded.tokens, at = excluded.at',
    ),
  };

  const counters: LedgerCounters = {
    teamUsed: (teamId, day) => statements.teamUsed.get(teamId, day)?.used ?? 0,
    keyUsed: (keyId, day) => statements.keyUsed.get(keyId, day)?.used ?? 0,
    bucket: (teamId) => statements.bucket.get(teamId),
    // Only a settle or refund reads a reservation, and either ends it: the row is taken out as it
    // is read, in the same transaction as the rest of the batch.
    reservation(id) {
      const row = statements.readReservation.get(id);
      if (row === undefined) return undefined;
      statements.deleteReservation.run(id);
      return { teamId: row.team_id, keyId: row.key_id, day: row.day, network: row.network, method: row.method, cost: row.cost };
    },
  };

  /** Writes what the rule decided (reservations it ended were taken out when read). */
  function commit(deltas: LedgerDeltas): void {
    for (const team of deltas.teamDays) statements.addTeamUsed.run(team.id, team.day, team.delta);
    for (const key of deltas.keyDays) statements.addKeyUsed.run(key.id, key.day, key.delta);
    for (const row of deltas.usage) {
      statements.addUsage.run(row.teamId, row.keyId, row.day, row.network, row.method, row.credits, row.requests);
      statements.addHour.run(row.teamId, row.keyId, row.day, usageHour(row.day, options.now()), row.credits, row.requests);
    }
    for (const bucket of deltas.buckets) statements.writeBucket.run(bucket.teamId, bucket.tokens, bucket.at);
    for (const row of deltas.reserved) statements.insertReservation.run(row.id, owner, row.teamId, row.keyId, row.day, row.network, row.method, row.cost, row.createdAt);
  }

  function decideAndCommit(ops: readonly LedgerOp[]): LedgerDecision {
    const decision = decideLedger(ops, counters);
    commit(decision.deltas);
    return decision;
  }
  const applyBatch = db.transaction(decideAndCommit);

  // Another process on the file (a sibling worker) may hold the write lock. SQLite's busy handler
  // would wait for it by sleeping on this thread (1, 2, 5, 10 ms...), stalling every request of
  // the worker; instead a batch that finds the lock taken waits on the event loop, and the batches
  // that arrive meanwhile join it, so contention makes fewer, larger transactions.
  const busyTimeoutOff = db.prepare('PRAGMA busy_timeout = 0');
  const busyTimeoutOn = db.prepare(`PRAGMA busy_timeout = ${LOCK_WAIT_LIMIT_MS}`);
  let waiting: Array<{ ops: readonly LedgerOp[]; resolve(decision: LedgerDecision): void; reject(error: unknown): void }> = [];
  let waitingSince = 0;
  let attempts = 0;

  /** The batch applied, or undefined when another connection holds the write lock. */
  function tryApply(ops: readonly LedgerOp[]): LedgerDecision | undefined {
    busyTimeoutOff.get();
    try {
      return applyBatch.immediate(ops);
    } catch (error) {
      if ((error as { code?: string }).code === 'SQLITE_BUSY') return undefined;
      throw error;
    } finally {
      busyTimeoutOn.get();
    }
  }

  function retryWaiting(): void {
    const batches = waiting;
    let decision: LedgerDecision | undefined;
    try {
      decision = tryApply(batches.flatMap((batch) => batch.ops));
    } catch (error) {
      waiting = [];
      for (const batch of batches) batch.reject(error);
      return;
    }
    if (decision === undefined) {
      if (performance.now() - waitingSince < LOCK_WAIT_LIMIT_MS) return scheduleRetry();
      waiting = [];
      const error = new Error(`the SQLite database stayed locked by another process for ${LOCK_WAIT_LIMIT_MS} ms`);
      for (const batch of batches) batch.reject(error);
      return;
    }
    waiting = [];
    let offset = 0;
    for (const batch of batches) {
      const results = decision.results.slice(offset, offset + batch.ops.length);
      offset += batch.ops.length;
      batch.resolve({ ...decision, results });
    }
  }

  function scheduleRetry(): void {
    attempts += 1;
    // The lock is usually held for one transaction (tens of µs): retry at the next turns first,
    // then every millisecond so a holder that is slow (or descheduled) does not keep this thread spinning.
    if (attempts <= 3) setImmediate(retryWaiting);
    else setTimeout(retryWaiting, 1);
  }

  function apply(ops: readonly LedgerOp[]): LedgerDecision | Promise<LedgerDecision> {
    if (waiting.length === 0) {
      const decision = tryApply(ops);
      if (decision !== undefined) return decision;
      waitingSince = performance.now();
      attempts = 0;
      scheduleRetry();
    }
    return new Promise((resolve, reject) => waiting.push({ ops, resolve, reject }));
  }

  const recover = db.transaction((olderThanMs: number): number => {
    const ids = new Set<string>();
    for (const { owner: other } of statements.reservationOwners.all()) {
      if (isLocalOwnerDead(other)) for (const { id } of statements.reservationsOfOwner.all(other)) ids.add(id);
    }
    for (const { id } of statements.reservationsOlderThan.all(options.now() - olderThanMs)) ids.add(id);
    const { results } = decideAndCommit([...ids].map((reservationId): LedgerOp => ({ type: 'refund', reservationId })));
    return results.filter((result) => result.ok).length;
  });

  return {
    async applyLedger(ops) {
      const { results } = await apply(ops);
      return typedResults(ops, results);
    },
    async recoverReservations(olderThanMs) {
      return recover.immediate(olderThanMs);
    },
    importUsage(rows) {
      for (const row of rows) {
        statements.addUsage.run(row.teamId, row.keyId, row.day, row.network, row.method, row.credits, row.requests);
        statements.addTeamUsed.run(row.teamId, row.day, row.credits);
        statements.addKeyUsed.run(row.keyId, row.day, row.credits);
      }
    },
  };
}
