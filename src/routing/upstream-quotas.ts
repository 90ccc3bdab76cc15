import { utcDay } from '../metering/meter.js';
import type { UpstreamQuotas } from '../store/types.js';
import { upstreamScope } from './upstream.js';

/**
 * Upstream quotas (`price.quota`: units per UTC day or month, docs/budgets.md): every replica
 * adds the units it sent each priced upstream to one total per period in the store, and reads
 * the totals back, every `syncIntervalMs`. An upstream whose total (with what this process sent
 * since) reached its quota is "spent": the selector tries it after the others. Off the request
 * path: a call only adds to a number in memory.
 */

export interface QuotaSetting {
  /** {@link upstreamScope}. */
  scope: string;
  units: number;
  per: 'day' | 'month';
}

export interface QuotaTracker {
  /** The quotas of the config in force (called again on a reload). */
  configure(quotas: readonly QuotaSetting[]): void;
  /** Units just sent to an upstream; ignored unless it has a quota. */
  add(networkId: string, upstreamId: string, units: number): void;
  /** True once the upstream's quota for this period is spent. */
  spent(scope: string): boolean;
  /** Writes what this process sent since the last sync and reads every total back. */
  sync(): Promise<void>;
  /** Stops the timer and writes what is left. */
  close(): Promise<void>;
}

/** The quota period an instant falls in: its UTC day, or its UTC month. */
export function quotaPeriod(per: QuotaSetting['per'], epochMs: number): string {
  const day = utcDay(epochMs);
  return per === 'day' ? day : day.slice(0, 7);
}

export function createQuotaTracker(store: UpstreamQuotas, options: { now: () => number; syncIntervalMs: number; onError: (error: unknown) => void }): QuotaTracker {
  let settings = new Map<string, QuotaSetting>();
  /** Units sent since the last write, per scope and the period they were sent in. */
  let unsent = new Map<string, { scope: string; period: string; units: number }>();
  /** The store's totals as last read, per scope, for the period they were read for. */
  const totals = new Map<string, { period: string; units: number }>();
  let syncing: Promise<void> = Promise.resolve();

  function localUnits(scope: string, period: string): number {
    return unsent.get(`${scope}\t${period}`)?.units ?? 0;
  }

  async function syncOnce(): Promise<void> {
    const rows = [...unsent.values()];
    unsent = new Map();
    if (rows.length > 0) {
      try {
        await store.addUpstreamUnits(rows);
      } catch (error) {
        options.onError(error);
        for (const row of rows) addUnsent(row.scope, row.period, row.units);
        return;
      }
    }
    const byPeriod = new Map<string, string[]>();
    const now = options.now();
    for (const setting of settings.values()) {
      const period = quotaPeriod(setting.per, now);
      byPeriod.set(period, [...(byPeriod.get(period) ?? []), setting.scope]);
    }
    try {
      for (const [period, scopes] of byPeriod) {
        const units = await store.upstreamUnits(scopes, period);
        scopes.forEach((scope, index) => totals.set(scope, { period, units: units[index]! }));
      }
    } catch (error) {
      options.onError(error);
    }
  }

  function addUnsent(scope: string, period: string, units: number): void {
    const id = `${scope}\t${period}`;
    const entry = unsent.get(id);
    if (entry === undefined) unsent.set(id, { scope, period, units });
    else entry.units += units;
  }

  const sync = (): Promise<void> => (syncing = syncing.then(syncOnce));
  const timer = setInterval(() => void sync(), options.syncIntervalMs);
  timer.unref();

  return {
    configure(quotas) {
      settings = new Map(quotas.map((quota) => [quota.scope, quota]));
      if (quotas.length > 0) void sync();
    },
    add(networkId, upstreamId, units) {
      // Every attempt on a priced upstream comes here: nothing to do (nor a scope to build) without quotas.
      if (settings.size === 0 || units === 0) return;
      const scope = upstreamScope(networkId, upstreamId);
      const setting = settings.get(scope);
      if (setting !== undefined) addUnsent(scope, quotaPeriod(setting.per, options.now()), units);
    },
    spent(scope) {
      const setting = settings.get(scope);
      if (setting === undefined) return false;
      const period = quotaPeriod(setting.per, options.now());
      const total = totals.get(scope);
      // A total read for an earlier period is over: the new period starts from nothing.
      const stored = total !== undefined && total.period === period ? total.units : 0;
      return stored + localUnits(scope, period) >= setting.units;
    },
    sync,
    async close() {
      clearInterval(timer);
      await sync();
    },
  };
}
