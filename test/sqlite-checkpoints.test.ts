// WAL checkpoints of the SQLite store off the event loop (src/store/sqlite-checkpointer.ts).
// What reached the database file itself (not just the WAL) is read from a copy of that file
// alone: a copy without its -wal file holds exactly what was checkpointed.

import Database from 'better-sqlite3';
import { randomBytes } from 'node:crypto';
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createSqliteStore, type SqliteStoreOptions } from '../src/store/sqlite-store.js';
import { startSqliteCheckpointer } from '../src/store/sqlite-checkpointer.js';
import type { ChargeSubject, Store } from '../src/store/index.js';
import { until } from './helpers/until.js';

const tempDir = mkdtempSync(join(tmpdir(), 'tollgate-checkpoints-'));
afterAll(() => rmSync(tempDir, { recursive: true, force: true }));
const opened: Store[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((store) => store.close()));
});

let counter = 0;
function openStoreAt(options: Omit<SqliteStoreOptions, 'path'> = {}): { store: Store; path: string } {
  counter += 1;
  const path = join(tempDir, `ledger-${counter}.db`);
  const store = createSqliteStore({ path, ...options });
  opened.push(store);
  return { store, path };
}

/**
 * Requests in `usage` as the database file alone tells (0 if not even the table reached it), or
 * undefined when the copy caught a checkpoint half-way through writing its pages into the file (a
 * torn copy reads as malformed): the caller polling a running checkpointer reads again.
 */
function checkpointedRequests(path: string): number | undefined {
  const copy = join(tempDir, `copy-${randomBytes(4).toString('hex')}.db`);
  copyFileSync(path, copy);
  let db: Database.Database | undefined;
  try {
    db = new Database(copy, { readonly: true });
    const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'usage'").get();
    if (table === undefined) return 0;
    return (db.prepare('SELECT COALESCE(SUM(requests), 0) AS requests FROM usage').get() as { requests: number }).requests;
  } catch (error) {
    if (TORN_COPY_CODES.has((error as { code?: string }).code ?? '')) return undefined;
    throw error;
  } finally {
    db?.close();
  }
}

/** What SQLite says of a file whose pages were copied while a checkpoint was writing them. */
const TORN_COPY_CODES = new Set(['SQLITE_CORRUPT', 'SQLITE_NOTADB']);

/** `count` charges, each in its own transaction (one awaited ledger call each). */
async function chargeOneByOne(store: Store, count: number): Promise<void> {
  const team = await store.createTeam({ name: `team-${randomBytes(4).toString('hex')}`, dailyCredits: 1_000_000_000 });
  const key = await store.createKey({ teamId: team.id, secretHash: randomBytes(32).toString('hex') });
  const subject: ChargeSubject = {
    teamId: team.id,
    keyId: key.id,
    network: 'eth',
    method: 'eth_getBlockByHash',
    cost: 80,
    day: new Date().toISOString().slice(0, 10),
    teamDailyCredits: team.dailyCredits,
    keyDailyCap: null,
    teamCreditsPerSecond: null,
  };
  for (let index = 0; index < count; index++) {
    const [result] = await store.applyLedger([{ type: 'charge', subject, nowMs: Date.now() }]);
    expect(result?.ok).toBe(true);
  }
}


describe('SQLite WAL checkpoints', () => {
  it('a store without background checkpoints checkpoints inside its commits once the WAL passes 1000 pages', async () => {
    // The behaviour the background thread replaces: after enough transactions the file has data.
    const { store, path } = openStoreAt();
    await chargeOneByOne(store, 1_000);
    expect(checkpointedRequests(path)).toBeGreaterThan(0);
  });

  it('with background checkpoints, commits never checkpoint: the file lags the WAL until the thread runs', async () => {
    const errors: Error[] = [];
    // An interval longer than the test: only an automatic checkpoint could move data into the file.
    const { store, path } = openStoreAt({ backgroundCheckpoints: { intervalMs: 3_600_000, onError: (error) => errors.push(error) } });
    await chargeOneByOne(store, 1_000);
    expect(checkpointedRequests(path)).toBe(0);
    expect(errors).toEqual([]);
  });

  it('the background thread checkpoints the WAL every interval, without any commit asking', async () => {
    const errors: Error[] = [];
    const { store, path } = openStoreAt({ backgroundCheckpoints: { intervalMs: 50, onError: (error) => errors.push(error) } });
    // Far below the 1000-page threshold: no automatic checkpoint would run for these.
    await chargeOneByOne(store, 10);
    await until(() => checkpointedRequests(path) === 10, 'the 10 charges in the database file');
    await chargeOneByOne(store, 5);
    await until(() => checkpointedRequests(path) === 15, 'the 15 charges in the database file');
    expect(errors).toEqual([]);
  });

  it('closing the store stops the thread without reporting an error', async () => {
    const errors: Error[] = [];
    const { store } = openStoreAt({ backgroundCheckpoints: { intervalMs: 10, onError: (error) => errors.push(error) } });
    await chargeOneByOne(store, 3);
    opened.splice(opened.indexOf(store), 1);
    // close() returns once the thread has exited, its exit handled: an error it reported is here.
    await store.close();
    expect(errors).toEqual([]);
  });

  it('a thread that cannot open the database reports it', async () => {
    const failure = await new Promise<Error>((resolve) => {
      startSqliteCheckpointer(join(tempDir, 'no-such-dir', 'x', 'ledger.db'), { intervalMs: 10, onError: resolve });
    });
    expect(failure.message).toMatch(/directory does not exist|unable to open/);
  });
});
