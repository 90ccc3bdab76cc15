import type { JwtPublicKey, KeySettings } from '../auth/key-settings.js';
import type { Ledger } from '../metering/ledger.js';

export type { JwtPublicKey, KeySettings };

export type {
  AdmissionResult,
  ChargeSubject,
  FinishResult,
  Ledger,
  LedgerDone,
  LedgerOp,
  LedgerRefusal,
  LedgerResult,
  ReservationGone,
} from '../metering/ledger.js';

/**
 * The state store behind the gateway: teams, keys (only secret hashes), the credit ledger and
 * usage. Every method is async so that a networked driver (Redis) fits the same interfaces as
 * the embedded SQLite one; callers never branch on the driver.
 */

export interface Team {
  id: string;
  name: string;
  /** Credits the team may spend per UTC day. */
  dailyCredits: number;
  /** Optional credits-per-second throughput limit; null means unlimited. */
  creditsPerSecond: number | null;
  createdAt: number;
}

export interface ApiKey {
  id: string;
  teamId: string;
  label: string | null;
  /** Optional daily cap of this key, below the team's quota; null means none. */
  dailyCap: number | null;
  /** Network ids this key may call; null means every network. */
  allowedNetworks: string[] | null;
  /** Epoch milliseconds after which the key stops working; null means never. */
  expiresAt: number | null;
  revokedAt: number | null;
  createdAt: number;
  /** Allowlists, secret and JWT requirements (docs/keys.md); null means none. */
  settings: KeySettings | null;
  /** Whether a key secret (HTTP Basic, docs/keys.md) was issued; only its hash is stored. */
  hasKeySecret: boolean;
}

/** What authentication needs to know, fetched in one lookup. */
export interface KeyWithTeam {
  key: ApiKey;
  team: Team;
  /** Epoch ms after which the secret used stops working (set when the key is rotated), or null. */
  secretValidUntil: number | null;
  /** SHA-256 (hex) of the key secret sent as HTTP Basic (docs/keys.md), or null when none was issued. */
  keySecretHash: string | null;
}

export interface NewTeam {
  name: string;
  dailyCredits: number;
  creditsPerSecond?: number | null;
}

export interface NewKey {
  teamId: string;
  secretHash: string;
  label?: string | null;
  dailyCap?: number | null;
  allowedNetworks?: string[] | null;
  expiresAt?: number | null;
  settings?: KeySettings | null;
}

/** Teams, their keys and the keys' secrets (hashes only): what authentication and the admin API read and change. */
export interface KeyDirectory {
  createTeam(team: NewTeam): Promise<Team>;
  /** By id or by name. */
  findTeam(idOrName: string): Promise<Team | null>;
  listTeams(): Promise<Team[]>;
  updateTeam(id: string, patch: TeamPatch): Promise<Team | null>;
  createKey(key: NewKey): Promise<ApiKey>;
  /**
   * The key whose current secret hashes to `secretHash`, with its team, whatever its state
   * (revoked or expired keys are returned too; authentication decides).
   */
  findKeyBySecretHash(secretHash: string): Promise<KeyWithTeam | null>;
  listKeys(filter?: { teamId?: string }): Promise<ApiKey[]>;
  findKey(id: string): Promise<ApiKey | null>;
  /** Marks a key revoked; false if there is no such key. */
  revokeKey(id: string, at: number): Promise<boolean>;
  updateKey(id: string, patch: KeyPatch): Promise<ApiKey | null>;
  /**
   * Gives a key a new secret, atomically. Its current secrets stay valid until
   * `previousValidUntil` (epoch ms; `at` for no grace period), or their earlier bound from a
   * previous rotation. False if there is no such key.
   */
  rotateKey(id: string, newSecretHash: string, previousValidUntil: number): Promise<boolean>;
}

/** Settled usage, for reports. */
export interface UsageReports {
  usage(query: UsageQuery): Promise<UsageRow[]>;
  /** Settled usage of one team and UTC day by key and hour (the hour the charge was settled, UTC). */
  hourlyUsage(query: HourlyUsageQuery): Promise<HourlyUsageRow[]>;
}

/**
 * Values every replica sharing the store must agree on without an operator typing them in: the
 * key of the filter ids' HMAC when `filters.idSecret` is not configured (docs/routing.md).
 */
export interface SharedSecrets {
  /** The value stored under `name`; when there is none, `candidate` is stored and returned (the first writer wins). */
  sharedSecret(name: string, candidate: string): Promise<string>;
}

/** What `tollgate migrate` copies from one store to another. */
export interface Snapshots {
  /**
   * Everything but what is in flight or short-lived: teams, keys with their secret hashes, team
   * tokens (hashes), alert settings, shared secrets, and the usage (daily and hourly) of the days
   * in the range. Not copied: reservations in flight, throughput buckets, event claims and the
   * webhook delivery log.
   */
  exportSnapshot(range: { fromDay: string; toDay: string }): Promise<StoreSnapshot>;
  /** Writes a snapshot into this store; ids are kept, existing teams with the same name conflict. */
  importSnapshot(snapshot: StoreSnapshot): Promise<void>;
}

/**
 * A store driver: the hot {@link Ledger}, the {@link KeyDirectory}, usage reports and snapshots.
 * Callers take the narrowest of these they need.
 */
/**
 * Upstream rate-limit windows shared by every replica (Redis drivers only: with SQLite each
 * process counts its own, docs/budgets.md).
 */
export interface UpstreamPermits {
  /**
   * Takes one of `limit` permits of `scope`'s sliding window, of which at most `sliceLimit` in
   * any `sliceMs`: 0 when taken, else the ms until one may free.
   */
  takeUpstreamPermit(scope: string, limit: number, windowMs: number, sliceMs: number, sliceLimit: number): Promise<number>;
}

export interface Store extends Ledger, KeyDirectory, UsageReports, Snapshots, SharedSecrets, TeamTokens, AlertStore, RequestLog, ProviderSpendLog, UpstreamQuotas, Partial<UpstreamPermits> {
  /** Resolves if the store answers (readiness); rejects otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export type { TeamToken, TeamTokens, NewTeamToken, AlertSettings, AlertStore, WebhookDelivery, HourlyUsageQuery, HourlyUsageRow } from './portal-types.js';
import type { AlertSettings, AlertStore, HourlyUsageQuery, HourlyUsageRow, TeamToken, TeamTokens } from './portal-types.js';

/**
 * One request as the request explorer keeps it (docs/explorer.md): what happened to it, never what
 * was sent. No params, no bodies, no API keys or secrets; error messages are bounded and have long
 * hex and base58 runs (addresses, hashes, keys) cut out before they are recorded.
 */
export interface RequestRecord {
  /** Epoch ms at which the request arrived. */
  at: number;
  requestId: string;
  teamId: string;
  keyId: string;
  network: string | null;
  transport: 'http' | 'ws';
  /** The method, `batch` for a batch (its methods in `methods`), null when the body could not be read as calls. */
  method: string | null;
  /** A batch's methods (at most {@link MAX_RECORDED_METHODS}); absent for a single call. */
  methods?: string[];
  /** HTTP status (499 when the client left before its answer; 200 on WebSocket). */
  status: number;
  /** False when the request or any of its calls got an error. */
  ok: boolean;
  credits: number;
  latencyMs: number;
  cache: 'hit' | 'miss' | 'bypass' | null;
  upstream: string | null;
  /** Upstream calls of a split `eth_getLogs`, when there were any. */
  upstreamCalls: number | null;
  /** The first error's JSON-RPC code and message, when there was one. */
  errorCode: number | null;
  errorMessage: string | null;
}

/** A batch's methods kept in its record, beyond which the list is cut. */
export const MAX_RECORDED_METHODS = 20;
/** Requests kept per team: the oldest go as new ones arrive. */
export const REQUESTS_KEPT_PER_TEAM = 1_000;

export interface RequestQuery {
  teamId: string;
  keyId?: string;
  method?: string;
  /** `ok`, `error`, or an HTTP status. */
  status?: 'ok' | 'error' | number;
  /** At most this many, newest first. */
  limit: number;
}

/** The request explorer's store: the last {@link REQUESTS_KEPT_PER_TEAM} requests of each team, from every replica. */
export interface RequestLog {
  /** Adds requests (a batch of several teams' requests) and drops each team's beyond the bound. */
  appendRequests(records: readonly RequestRecord[]): Promise<void>;
  /** A team's requests matching the query, newest first. */
  recentRequests(query: RequestQuery): Promise<RequestRecord[]>;
}

/**
 * The records of a team's stored ones (JSON, newest first) that match a query, up to its limit:
 * what both drivers answer `recentRequests` with once they have read the team's records.
 */
export function newestMatching(stored: Iterable<string>, query: RequestQuery): RequestRecord[] {
  const found: RequestRecord[] = [];
  for (const text of stored) {
    const record = JSON.parse(text) as RequestRecord;
    if (!matchesRequestQuery(record, query)) continue;
    found.push(record);
    if (found.length >= query.limit) break;
  }
  return found;
}

/** True when a record matches a query's filters (the team is the store's to match). */
function matchesRequestQuery(record: RequestRecord, query: RequestQuery): boolean {
  if (query.keyId !== undefined && record.keyId !== query.keyId) return false;
  if (query.method !== undefined && record.method !== query.method && !(record.methods?.includes(query.method) ?? false)) return false;
  if (query.status === 'ok') return record.ok;
  if (query.status === 'error') return !record.ok;
  return query.status === undefined || record.status === query.status;
}

/** Thrown for store-level conflicts such as a duplicate team name. */
export class StoreConflictError extends Error {
  override name = 'StoreConflictError';
}

export interface UsageQuery {
  teamId?: string;
  keyId?: string;
  /** Inclusive UTC days, `YYYY-MM-DD`. */
  fromDay: string;
  toDay: string;
}

export interface UsageRow {
  day: string;
  teamId: string;
  keyId: string;
  network: string;
  method: string;
  /** Credits charged. */
  credits: number;
  /** Requests charged (answered calls). */
  requests: number;
  /**
   * What these calls cost at the providers, where the network has priced upstreams (absent
   * otherwise): units of every attempt that reached an upstream (failed and hedged ones too, as
   * the provider bills them), their money where the price has it, and the units the cache saved.
   * A row may hold spend without credits: calls that failed everywhere are not charged, but the
   * providers still billed their attempts.
   */
  upstreamUnits?: number;
  upstreamUsd?: number;
  savedUnits?: number;
}

/** Provider spend to add to a day's usage (docs/budgets.md). */
export interface ProviderSpendRow {
  day: string;
  teamId: string;
  keyId: string;
  network: string;
  method: string;
  units: number;
  usd: number;
  savedUnits: number;
}

/** Units spent at one upstream (`<network>/<upstream>`) in one quota period (`YYYY-MM-DD` or `YYYY-MM`). */
export interface UpstreamUnitsRow {
  scope: string;
  period: string;
  units: number;
}

/** What every replica spent at each priced upstream per quota period (docs/budgets.md). */
export interface UpstreamQuotas {
  /** Adds units to each scope's period total. */
  addUpstreamUnits(rows: readonly UpstreamUnitsRow[]): Promise<void>;
  /** The totals of these scopes in `period` (0 for a scope with none). */
  upstreamUnits(scopes: readonly string[], period: string): Promise<number[]>;
}

/** Provider spend per team, key, network, method and day, beside the credits. */
export interface ProviderSpendLog {
  /** Adds each row's amounts to its day's totals. */
  addProviderSpend(rows: readonly ProviderSpendRow[]): Promise<void>;
}

export interface TeamPatch {
  dailyCredits?: number;
  creditsPerSecond?: number | null;
}

export interface KeyPatch {
  dailyCap?: number | null;
  allowedNetworks?: string[] | null;
  expiresAt?: number | null;
  label?: string | null;
  settings?: KeySettings | null;
  /** SHA-256 of a newly issued key secret, or null to withdraw it. */
  keySecretHash?: string | null;
}

export interface StoreSnapshot {
  teams: Team[];
  keys: Array<ApiKey & { secrets: Array<{ hash: string; validUntil: number | null }>; keySecretHash?: string | null }>;
  /** The UTC days whose usage the snapshot holds, inclusive. */
  fromDay: string;
  toDay: string;
  /** Settled usage of those days; day totals are rebuilt from it on import. */
  usage: UsageRow[];
  hourlyUsage: HourlyUsageRow[];
  teamTokens: Array<TeamToken & { tokenHash: string }>;
  alertSettings: Array<{ teamId: string; settings: AlertSettings }>;
  /** Values replicas agree on (the filter ids' HMAC key): an imported one replaces the target's. */
  sharedSecrets: Array<{ name: string; value: string }>;
}
