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
  /** Units a cache answer saved (no spend object made on the hit path). */
  addSaved(subject: SpendSubject, savedUnits: number): void;
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

  /** Adds to the pending total of a day and subject; a row is made only for the first call of each. */
  function addTo(day: string, subject: SpendSubject, units: number, usd: number, savedUnits: number): void {
    const id = `${day}\t${subject.teamId}\t${subject.keyId}\t${subject.network}\t${subject.method}`;
    const total = pending.get(id);
    if (total === undefined) {
      pending.set(id, { day, teamId: subject.teamId, keyId: subject.keyId, network: subject.network, method: subject.method, units, usd, savedUnits });
      return;
    }
    total.units += units;
    total.usd += usd;
    total.savedUnits += savedUnits;
  }
  const merge = (row: ProviderSpendRow): void => addTo(row.day, row, row.units, row.usd, row.savedUnits);

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
      addTo(utcDay(options.now()), subject, spend.units, spend.usd, spend.savedUnits);
    },
    addSaved(subject, savedUnits) {
      if (savedUnits !== 0) addTo(utcDay(options.now()), subject, 0, 0, savedUnits);
    },
    flush,
    async close() {
      clearInterval(timer);
      await flush();
    },
  };
}
