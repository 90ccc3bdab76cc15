import { dayRange } from './day-range.js';
import type { AlertStore, KeyDirectory, Ledger, ProviderSpendLog, UpstreamQuotas, RequestLog, SharedSecrets, Store, StoreSnapshot, TeamTokens, UpstreamPermits, UsageReports } from './types.js';

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
  /** The request explorer's bounded log (not part of a snapshot: it is a recent view, not a record). */
  requests: RequestLog;
  /** Provider spend beside the usage rows (read back by `usage`). */
  providerSpend: ProviderSpendLog;
  /** Units spent at each priced upstream per quota period. */
  upstreamQuotas: UpstreamQuotas;
  /** Rate-limit windows shared by every replica; drivers without them leave each process to count alone. */
  upstreamPermits?: UpstreamPermits;
  /** Every team token with its hash, for a snapshot. */
  teamTokensWithHashes(): Promise<StoreSnapshot['teamTokens']>;
  /** Every shared secret, for a snapshot. */
  sharedSecrets(): Promise<StoreSnapshot['sharedSecrets']>;
  /** Writes a snapshot; a team name that exists already refuses it before anything is written. */
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
    appendRequests: parts.requests.appendRequests,
    recentRequests: parts.requests.recentRequests,
    addProviderSpend: parts.providerSpend.addProviderSpend,
    addUpstreamUnits: parts.upstreamQuotas.addUpstreamUnits,
    upstreamUnits: parts.upstreamQuotas.upstreamUnits,
    ...(parts.upstreamPermits === undefined ? {} : { takeUpstreamPermit: parts.upstreamPermits.takeUpstreamPermit }),
    applyLedger: ledger.applyLedger,
    recoverReservations: ledger.recoverReservations,
    usage,
    async exportSnapshot({ fromDay, toDay }) {
      const entries = await directory.exportEntries();
      const days = dayRange(fromDay, toDay);
      const hourly = await Promise.all(entries.teams.flatMap((team) => days.map((day) => parts.hourlyUsage({ teamId: team.id, day }))));
      const alerts = await Promise.all(entries.teams.map(async (team) => ({ teamId: team.id, settings: await parts.portal.alertSettings(team.id) })));
      return {
        ...entries,
        fromDay,
        toDay,
        usage: await usage({ fromDay, toDay }),
        hourlyUsage: hourly.flat(),
        teamTokens: await parts.teamTokensWithHashes(),
        alertSettings: alerts.filter((entry): entry is StoreSnapshot['alertSettings'][number] => entry.settings !== null),
        sharedSecrets: await parts.sharedSecrets(),
      };
    },
    importSnapshot: parts.importSnapshot,
    sharedSecret: parts.sharedSecret,
    ping: parts.ping,
    close: parts.close,
  };
}
