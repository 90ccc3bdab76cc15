import type { AlertStore, KeyDirectory, Ledger, SharedSecrets, Store, StoreSnapshot, TeamTokens, UsageReports } from './types.js';

/** What a driver builds; {@link composeStore} makes the one {@link Store} of them. */
export interface StoreParts {
  ledger: Ledger;
  directory: KeyDirectory & {
    /** Teams and keys with their secrets, for a snapshot. */
    exportEntries(): Pick<StoreSnapshot, 'teams' | 'keys'> | Promise<Pick<StoreSnapshot, 'teams' | 'keys'>>;
  };
  usage: UsageReports['usage'];
  sharedSecret: SharedSecrets['sharedSecret'];
  hourlyUsage: UsageReports['hourlyUsage'];
  /** Team tokens, alert settings, event claims and webhook deliveries. */
  portal: TeamTokens & AlertStore;
  /** Writes a snapshot's teams, keys and usage, all or nothing. */
  importSnapshot(snapshot: StoreSnapshot): Promise<void>;
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** A store of a driver's parts; a snapshot is the directory's teams and keys with one day's usage. */
export function composeStore(parts: StoreParts): Store {
  const { ledger, directory, usage } = parts;
  return {
    ...directory,
    ...parts.portal,
    hourlyUsage: parts.hourlyUsage,
    applyLedger: ledger.applyLedger,
    recoverReservations: ledger.recoverReservations,
    usage,
    async exportSnapshot(day) {
      return { ...(await directory.exportEntries()), day, usage: await usage({ fromDay: day, toDay: day }) };
    },
    importSnapshot: parts.importSnapshot,
    sharedSecret: parts.sharedSecret,
    ping: parts.ping,
    close: parts.close,
  };
}
