/**
 * The state store behind the gateway: teams, keys (only secret hashes), and later the credit
 * ledger. Every method is async so that a networked driver (Redis) fits the same interface as
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
}

/** What authentication needs to know, fetched in one lookup. */
export interface KeyWithTeam {
  key: ApiKey;
  team: Team;
  /** Epoch ms after which the secret used stops working (set when the key is rotated), or null. */
  secretValidUntil: number | null;
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
}

export interface Store {
  createTeam(team: NewTeam): Promise<Team>;
  /** By id or by name. */
  findTeam(idOrName: string): Promise<Team | null>;
  listTeams(): Promise<Team[]>;
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
  updateTeam(id: string, patch: TeamPatch): Promise<Team | null>;
  updateKey(id: string, patch: KeyPatch): Promise<ApiKey | null>;
  /**
   * Gives a key a new secret. Its current secrets stay valid until `previousValidUntil`
   * (epoch ms; `at` for no grace period). False if there is no such key.
   */
  rotateKey(id: string, newSecretHash: string, previousValidUntil: number): Promise<boolean>;

  /** Applies ledger operations in order; one result per operation. */
  applyLedger(ops: readonly LedgerOp[]): Promise<LedgerResult[]>;
  usage(query: UsageQuery): Promise<UsageRow[]>;
  /**
   * Refunds reservations that can no longer settle: those of gateway processes that died
   * (checked at start-up) and any older than `olderThanMs`. Returns how many were refunded.
   */
  recoverReservations(olderThanMs: number): Promise<number>;
  /** Teams, keys with their secret hashes, and one day's usage: what `tollgate migrate` copies. */
  exportSnapshot(day: string): Promise<StoreSnapshot>;
  /** Writes a snapshot into this store; ids are kept, existing teams with the same name conflict. */
  importSnapshot(snapshot: StoreSnapshot): Promise<void>;
  /** Resolves if the store answers (readiness); rejects otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** Thrown for store-level conflicts such as a duplicate team name. */
export class StoreConflictError extends Error {
  override name = 'StoreConflictError';
}

/** Who is charged for one call, and the limits that apply, as known when the call arrived. */
export interface ChargeSubject {
  teamId: string;
  keyId: string;
  network: string;
  method: string;
  cost: number;
  /** The UTC day (`YYYY-MM-DD`) the charge belongs to. */
  day: string;
  teamDailyCredits: number;
  keyDailyCap: number | null;
  teamCreditsPerSecond: number | null;
}

/**
 * One ledger operation. Operations are applied in order, atomically per operation, and a batch
 * of them (everything one event-loop turn produced) is applied in one store round trip.
 */
export type LedgerOp =
  /** Hold credits before an upstream call; settled or refunded later by `reservationId`. */
  | { type: 'reserve'; reservationId: string; subject: ChargeSubject; nowMs: number }
  /** Reserve and settle at once: answers known before any upstream call (cache hits, local answers). */
  | { type: 'charge'; subject: ChargeSubject; nowMs: number }
  /** The call was answered: the reserved credits become a charge in the usage ledger. */
  | { type: 'settle'; reservationId: string }
  /** The call cost nothing after all (every upstream failed): give the credits back. */
  | { type: 'refund'; reservationId: string }
  /** Read the team's spend of a day without changing anything (for X-Credits-Remaining). */
  | { type: 'peek'; teamId: string; day: string };

export type LedgerResult =
  | { ok: true; teamUsed: number }
  | { ok: false; reason: 'daily_credits_exhausted'; scope: 'team' | 'key'; limit: number; used: number; teamUsed: number }
  | { ok: false; reason: 'rate_limited'; retryAfterMs: number; teamUsed: number };

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
}

export interface StoreSnapshot {
  teams: Team[];
  keys: Array<ApiKey & { secrets: Array<{ hash: string; validUntil: number | null }> }>;
  day: string;
  /** The day's settled usage; day totals are rebuilt from it on import. */
  usage: UsageRow[];
}
