// The SQLite ledger with another process's connection on the same file (the workers of
// `serve --workers N`): a batch that finds the write lock taken waits on the event loop, not in
// SQLite's sleeping busy handler, and the batches arriving meanwhile are committed with it.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import type { ChargeSubject } from '../src/metering/ledger.js';
import { utcDay } from '../src/metering/meter.js';
import { openStore } from '../src/store/index.js';

const dir = mkdtempSync(join(tmpdir(), 'tollgate-lock-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('SQLite ledger under another connection’s write lock', () => {
  it('waits without blocking the event loop, then commits every batch that arrived meanwhile', async () => {
    const path = join(dir, 'lock.db');
    const store = await openStore({ driver: 'sqlite', path });
    const other = new Database(path);
    try {
      const team = await store.createTeam({ name: 'lock', dailyCredits: 1_000 });
      const key = await store.createKey({ teamId: team.id, secretHash: 'h'.repeat(64), label: null, dailyCap: null, allowedNetworks: null, expiresAt: null });
      const subject: ChargeSubject = { teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_chainId', cost: 5, day: utcDay(Date.now()), teamDailyCredits: 1_000, keyDailyCap: null, teamCreditsPerSecond: null };

      // The other connection (another worker's) holds the write lock.
      other.exec('BEGIN IMMEDIATE');
      let settled = 0;
      const first = store.applyLedger([{ type: 'charge', subject, nowMs: Date.now() }]).then((results) => (settled += 1, results));
      const second = store.applyLedger([{ type: 'charge', subject, nowMs: Date.now() }, { type: 'charge', subject, nowMs: Date.now() }]).then((results) => (settled += 1, results));
      // The event loop runs on (timers fire) while both wait; nothing is committed yet.
      for (let turn = 0; turn < 5; turn += 1) await new Promise((resolve) => setImmediate(resolve));
      expect(settled).toBe(0);

      other.exec('COMMIT');
      const [firstResults, secondResults] = await Promise.all([first, second]);
      expect(firstResults.map((result) => result.ok)).toStrictEqual([true]);
      expect(secondResults.map((result) => result.ok)).toStrictEqual([true, true]);
      // One spend, in order: 5, then 10 and 15.
      expect(secondResults.map((result) => (result.ok ? result.teamUsed : -1))).toStrictEqual([10, 15]);
      const [peek] = await store.applyLedger([{ type: 'peek', teamId: team.id, day: subject.day }]);
      expect(peek).toMatchObject({ ok: true, teamUsed: 15 });
    } finally {
      other.close();
      await store.close();
    }
  });
});
