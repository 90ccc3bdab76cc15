// Upstream quotas (docs/budgets.md) on a real SQLite store, time injected: units add up per UTC
// day or month, an upstream is spent once its total (stored, plus what this process sent since)
// reaches its quota, a new period starts from nothing, and a second tracker on the same store
// (another replica) sees the first one's units after a sync.

import { afterEach, describe, expect, it } from 'vitest';
import { createQuotaTracker, quotaPeriod, type QuotaTracker } from '../src/routing/upstream-quotas.js';
import { openStore } from '../src/store/index.js';
import type { Store } from '../src/store/types.js';

const opened: Array<Store | QuotaTracker> = [];
afterEach(async () => {
  for (const thing of opened.splice(0).reverse()) await thing.close();
});

describe('upstream quotas', () => {
  it('counts units per day or month, spends an upstream at its quota, starts over in a new period, and shares totals through the store', async () => {
    const store = await openStore({ driver: 'sqlite', path: ':memory:' });
    opened.push(store);
    let now = Date.UTC(2026, 10, 30, 23, 0);
    const errors: unknown[] = [];
    const tracker = (): QuotaTracker => {
      const made = createQuotaTracker(store, { now: () => now, syncIntervalMs: 3_600_000, onError: (error) => errors.push(error) });
      made.configure([
        { scope: 'eth/daily', units: 100, per: 'day' },
        { scope: 'eth/monthly', units: 1_000, per: 'month' },
      ]);
      opened.push(made);
      return made;
    };
    const first = tracker();
    expect(quotaPeriod('day', now)).toBe('2026-11-30');
    expect(quotaPeriod('month', now)).toBe('2026-11');

    first.add('eth', 'daily', 60);
    first.add('eth', 'monthly', 600);
    first.add('eth', 'unlimited', 10_000);
    expect([first.spent('eth/daily'), first.spent('eth/monthly'), first.spent('eth/unlimited')]).toEqual([false, false, false]);
    first.add('eth', 'daily', 40);
    expect(first.spent('eth/daily')).toBe(true);
    await first.sync();
    expect(await store.upstreamUnits(['eth/daily', 'eth/monthly', 'eth/unlimited'], '2026-11-30')).toEqual([100, 0, 0]);
    expect(await store.upstreamUnits(['eth/monthly'], '2026-11')).toEqual([600]);

    // Another replica reads the totals in its first sync.
    const second = tracker();
    await second.sync();
    expect(second.spent('eth/daily')).toBe(true);
    second.add('eth', 'monthly', 400);
    expect(second.spent('eth/monthly')).toBe(true);
    await second.sync();
    await first.sync();
    expect(first.spent('eth/monthly')).toBe(true);

    // Past midnight UTC the day's quota starts over; the month's too, on the 1st.
    now = Date.UTC(2026, 11, 1, 0, 1);
    expect([first.spent('eth/daily'), first.spent('eth/monthly')]).toEqual([false, false]);
    first.add('eth', 'daily', 99);
    await first.sync();
    expect(await store.upstreamUnits(['eth/daily'], '2026-12-01')).toEqual([99]);
    expect(first.spent('eth/daily')).toBe(false);
    expect(errors).toEqual([]);
  });
});
