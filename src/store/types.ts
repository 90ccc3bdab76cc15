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
  close(): Promise<void>;
}

/** Thrown for store-level conflicts such as a duplicate team name. */
export class StoreConflictError extends Error {
  override name = 'StoreConflictError';
}
