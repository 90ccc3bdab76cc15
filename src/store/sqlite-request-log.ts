import type Database from 'better-sqlite3';
import { randomInt } from 'node:crypto';
import { newestMatching, REQUESTS_KEPT_PER_TEAM, type RequestLog, type RequestRecord } from './types.js';

/**
 * The request explorer's log in SQLite: one row per request, the record as JSON. Every process on
 * the host writes into the same table, so a team's explorer shows every worker's requests. An
 * append inserts its records in transactions of {@link CHUNK} rows, yielding to the event loop
 * between them (SQLite is synchronous: a batch of a thousand rows in one go holds every request of
 * the process for ~10 ms), then trims its teams back to the newest {@link REQUESTS_KEPT_PER_TEAM},
 * so a team's rows never grow past the bound for longer than one batch.
 */

/** Rows per transaction: about a millisecond of the event loop. */
const CHUNK = 100;

/**
 * Clustered on (team, arrival, sequence): one B-tree, no rowid table beside an index, so an insert
 * and the trim's range delete each touch one tree. `seq` orders a process's requests of one
 * millisecond and keeps keys of several processes apart (a random prefix per process).
 */
const SCHEMA = `
CREATE TABLE IF NOT EXISTS request_log (
  team_id TEXT NOT NULL,
  at INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  record TEXT NOT NULL,
  PRIMARY KEY (team_id, at, seq)
) WITHOUT ROWID;
`;

/** 2^31 process prefixes × 2^21 sequence numbers: within Number's exact integers. */
const SEQUENCE_SPACE = 2 ** 21;

export function createSqliteRequestLog(db: Database.Database, kept = REQUESTS_KEPT_PER_TEAM): RequestLog {
  db.exec(SCHEMA);
  const insert = db.prepare<[string, number, number, string]>('INSERT INTO request_log (team_id, at, seq, record) VALUES (?, ?, ?, ?)');
  // Everything older than the team's kept-th newest row.
  const trim = db.prepare<[string, string, number]>(
    'DELETE FROM request_log WHERE team_id = ? AND (at, seq) < (SELECT at, seq FROM request_log WHERE team_id = ? ORDER BY at DESC, seq DESC LIMIT 1 OFFSET ?)',
  );
  const newest = db.prepare<[string, number], { record: string }>('SELECT record FROM request_log WHERE team_id = ? ORDER BY at DESC, seq DESC LIMIT ?');
  const prefix = randomInt(2 ** 31) * SEQUENCE_SPACE;
  let sequence = 0;
  const insertAll = db.transaction((records: readonly RequestRecord[], from: number, to: number) => {
    for (let index = from; index < to; index += 1) {
      const record = records[index]!;
      insert.run(record.teamId, record.at, prefix + (sequence++ % SEQUENCE_SPACE), JSON.stringify(record));
    }
  });
  const trimAll = db.transaction((teams: ReadonlySet<string>) => {
    for (const teamId of teams) trim.run(teamId, teamId, kept - 1);
  });

  return {
    async appendRequests(records) {
      if (records.length === 0) return;
      for (let from = 0; from < records.length; from += CHUNK) {
        if (from > 0) await new Promise<void>((resolve) => setImmediate(resolve));
        insertAll(records, from, Math.min(records.length, from + CHUNK));
      }
      await new Promise<void>((resolve) => setImmediate(resolve));
      trimAll(new Set(records.map((record) => record.teamId)));
    },
    async recentRequests(query) {
      return newestMatching(newest.all(query.teamId, kept).map((row) => row.record), query);
    },
  };
}
