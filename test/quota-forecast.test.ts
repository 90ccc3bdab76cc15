// The quota forecast (src/metering/quota-forecast.ts) with concrete numbers: the last hour's
// credits from hourly buckets (the current hour plus the previous one weighted by what is left of
// the current hour; in hour 0 the previous hour is yesterday's 23), and when the daily quota runs
// out at that rate: a time before the next 00:00 UTC, or null when nothing was spent, when it
// lasts until the reset, or when it is used up already. The last test reads the hours from a
// real SQLite store whose charges were settled at injected times.

import { afterEach, describe, expect, it } from 'vitest';
import { creditsLastHour, lastHourDays, quotaForecast, readCreditsLastHour } from '../src/metering/quota-forecast.js';
import { openStore, type ChargeSubject, type Store } from '../src/store/index.js';

const at = (iso: string) => Date.parse(iso);

describe('creditsLastHour', () => {
  it('at 14:15: all of hour 14 (every key) plus 0.75 × hour 13; older hours and other days do not count', () => {
    const rows = [
      { day: '2026-03-14', hour: 14, credits: 20 },
      { day: '2026-03-14', hour: 14, credits: 10 },
      { day: '2026-03-14', hour: 13, credits: 40 },
      { day: '2026-03-14', hour: 12, credits: 1_000 },
      { day: '2026-03-13', hour: 14, credits: 1_000 },
      { day: '2026-03-13', hour: 13, credits: 1_000 },
    ];
    expect(creditsLastHour(rows, at('2026-03-14T14:15:00Z'))).toBe(30 + 0.75 * 40);
    // On the hour the previous hour counts whole; just before the next, hardly at all.
    expect(creditsLastHour(rows, at('2026-03-14T14:00:00Z'))).toBe(70);
    expect(creditsLastHour(rows, at('2026-03-14T14:54:00Z'))).toBe(30 + 4);
    expect(lastHourDays(at('2026-03-14T14:15:00Z'))).toEqual(['2026-03-14']);
  });

  it("in hour 0 the previous hour is yesterday's hour 23", () => {
    const rows = [
      { day: '2026-03-15', hour: 0, credits: 10 },
      { day: '2026-03-14', hour: 23, credits: 20 },
      { day: '2026-03-14', hour: 0, credits: 1_000 },
      { day: '2026-03-15', hour: 23, credits: 1_000 },
    ];
    expect(lastHourDays(at('2026-03-15T00:30:00Z'))).toEqual(['2026-03-14', '2026-03-15']);
    expect(creditsLastHour(rows, at('2026-03-15T00:30:00Z'))).toBe(10 + 0.5 * 20);
    expect(lastHourDays(at('2026-03-15T01:00:00Z'))).toEqual(['2026-03-15']);
  });

  it('is rounded to hundredths', () => {
    // 20 minutes into hour 14: 2/3 of hour 13's 10 credits.
    expect(creditsLastHour([{ day: '2026-03-14', hour: 13, credits: 10 }], at('2026-03-14T14:20:00Z'))).toBe(6.67);
  });
});

describe('quotaForecast', () => {
  const now = at('2026-03-14T14:15:00Z');

  it('runs out before midnight: 300 left at 60 an hour is 5 hours, at 19:15 UTC', () => {
    expect(quotaForecast({ used: 700, limit: 1_000, creditsLastHour: 60, now })).toEqual({ state: 'runs-out', creditsLastHour: 60, runsOutAt: '2026-03-14T19:15:00.000Z' });
    expect(quotaForecast({ used: 990, limit: 1_000, creditsLastHour: 60, now })).toEqual({ state: 'runs-out', creditsLastHour: 60, runsOutAt: '2026-03-14T14:25:00.000Z' });
  });

  it('lasts until the daily reset: 600 left at 60 an hour is 10 hours, past 00:00 UTC; exactly at midnight lasts too', () => {
    expect(quotaForecast({ used: 400, limit: 1_000, creditsLastHour: 60, now })).toEqual({ state: 'lasts', creditsLastHour: 60, runsOutAt: null });
    // 585 / 60 = 9.75 hours: 00:00:00.000, the reset itself.
    expect(quotaForecast({ used: 415, limit: 1_000, creditsLastHour: 60, now })).toEqual({ state: 'lasts', creditsLastHour: 60, runsOutAt: null });
    expect(quotaForecast({ used: 416, limit: 1_000, creditsLastHour: 60, now }).runsOutAt).toBe('2026-03-14T23:59:00.000Z');
  });

  it('nothing spent in the last hour: lasts', () => {
    expect(quotaForecast({ used: 999, limit: 1_000, creditsLastHour: 0, now })).toEqual({ state: 'lasts', creditsLastHour: 0, runsOutAt: null });
  });

  it('at or over the limit: exhausted, no time', () => {
    expect(quotaForecast({ used: 1_000, limit: 1_000, creditsLastHour: 60, now })).toEqual({ state: 'exhausted', creditsLastHour: 60, runsOutAt: null });
    expect(quotaForecast({ used: 1_005, limit: 1_000, creditsLastHour: 0, now })).toEqual({ state: 'exhausted', creditsLastHour: 0, runsOutAt: null });
  });
});

describe('readCreditsLastHour', () => {
  const stores: Store[] = [];
  afterEach(async () => {
    await Promise.all(stores.splice(0).map((store) => store.close()));
  });

  it("reads yesterday's hour 23 and today's hour 0 from a real store", async () => {
    let time = at('2026-03-14T22:50:00Z');
    const store = await openStore({ driver: 'sqlite', path: ':memory:' }, { now: () => time });
    stores.push(store);
    const team = await store.createTeam({ name: 'acme', dailyCredits: 1_000 });
    const keys = [await store.createKey({ teamId: team.id, secretHash: 'a'.repeat(64) }), await store.createKey({ teamId: team.id, secretHash: 'b'.repeat(64) })];
    const charge = async (keyIndex: number, cost: number) => {
      const subject: ChargeSubject = { teamId: team.id, keyId: keys[keyIndex]!.id, network: 'eth', method: 'eth_call', cost, day: new Date(time).toISOString().slice(0, 10), teamDailyCredits: 1_000, keyDailyCap: null, teamCreditsPerSecond: null };
      const [result] = await store.applyLedger([{ type: 'charge', subject, nowMs: time }]);
      expect(result!.ok).toBe(true);
    };
    await charge(0, 500); // hour 22: too old at 00:45
    time = at('2026-03-14T23:40:00Z');
    await charge(0, 40);
    await charge(1, 40);
    time = at('2026-03-15T00:10:00Z');
    await charge(1, 7);
    time = at('2026-03-15T00:45:00Z');
    expect(await readCreditsLastHour(store.hourlyUsage, team.id, time)).toBe(7 + 0.25 * 80);
  });
});
