import type { ProviderSpend } from '../routing/upstream-price.js';
import type { ProviderSpendLog, ProviderSpendRow } from '../store/types.js';
import { utcDay } from './meter.js';

/**
 * Collects what calls cost at the providers (docs/budgets.md) per UTC day, team, key, network
 * and method, and writes the totals to the store every `flushIntervalMs` (and on close): one
 * store write per interval, however many calls, off the request path. A write that fails keeps
 * its totals for the next one.
 */

export interface SpendSubject {
  teamId: string;
  keyId: string;
  network: string;
  method: string;
}

export interface ProviderSpendRecorder {
  add(subject: SpendSubject, spend: ProviderSpend): void;
  /** Writes what was collected so far. */
  flush(): Promise<void>;
  /** Stops the timer and writes what is left. */
  close(): Promise<void>;
}

export function createProviderSpendRecorder(
  store: ProviderSpendLog,
  options: { now: () => number; flushIntervalMs: number; onError: (error: unknown) => void },
): ProviderSpendRecorder {
  let pending = new Map<string, ProviderSpendRow>();
  let writing: Promise<void> = Promise.resolve();

  function merge(row: ProviderSpendRow): void {
    const id = `${row.day}\t${row.teamId}\t${row.keyId}\t${row.network}\t${row.method}`;
    const total = pending.get(id);
    if (total === undefined) {
      pending.set(id, { ...row });
      return;
    }
    total.units += row.units;
    total.usd += row.usd;
    total.savedUnits += row.savedUnits;
  }

  function flush(): Promise<void> {
    if (pending.size === 0) return writing;
    const rows = [...pending.values()];
    pending = new Map();
    writing = writing.then(() =>
      store.addProviderSpend(rows).catch((error: unknown) => {
        options.onError(error);
        rows.forEach(merge);
      }),
    );
    return writing;
  }

  const timer = setInterval(() => void flush(), options.flushIntervalMs);
  timer.unref();

  return {
    add(subject, spend) {
      if (spend.units === 0 && spend.usd === 0 && spend.savedUnits === 0) return;
      merge({ day: utcDay(options.now()), teamId: subject.teamId, keyId: subject.keyId, network: subject.network, method: subject.method, units: spend.units, usd: spend.usd, savedUnits: spend.savedUnits });
    },
    flush,
    async close() {
      clearInterval(timer);
      await flush();
    },
  };
}
