import { generateKeySecret, generateSecret, hashSecret } from '../auth/api-key.js';
import { applySettingsPatch, KeySettingsError } from '../auth/key-settings.js';
import { issueKey } from './key-issuer.js';
import { utcDay } from '../metering/meter.js';
import type { ApiKey, KeyDirectory, KeyPatch, NewKey, Team, TeamPatch, UsageReports, UsageRow } from '../store/index.js';
import { StoreConflictError } from '../store/index.js';

/**
 * What operators can do to teams, keys and usage, shared by the admin HTTP API and the CLI so
 * both behave the same. Secrets are generated here, returned once, and only their hashes stored.
 */

export class AdminError extends Error {
  override name = 'AdminError';
  constructor(
    readonly status: 400 | 404 | 409,
    message: string,
  ) {
    super(message);
  }
}

export interface IssuedKey {
  key: ApiKey;
  /** Shown this once; only its SHA-256 is stored. */
  secret: string;
}

export interface UsageReport {
  from: string;
  to: string;
  teamId?: string;
  keyId?: string;
  totals: { credits: number; requests: number };
  /** Summed over the whole range. */
  byNetworkMethod: Array<{ network: string; method: string; credits: number; requests: number }>;
  /** One row per day, key, network and method. */
  rows: UsageRow[];
}

/** A key change as operators submit it: `settings` is checked and merged here (docs/keys.md). */
export type KeyUpdate = Omit<KeyPatch, 'settings' | 'keySecretHash'> & { settings?: unknown };

/** A key, and its key secret when this call issued one (shown this once). */
export interface UpdatedKey {
  key: ApiKey;
  keySecret?: string;
}

const DAY = /^\d{4}-\d{2}-\d{2}$/;
const MAX_REPORT_DAYS = 366;

export interface AdminService {
  createTeam(team: { name: string; dailyCredits: number; creditsPerSecond?: number | null }): Promise<Team>;
  listTeams(): Promise<Team[]>;
  getTeam(idOrName: string): Promise<Team>;
  updateTeam(idOrName: string, patch: TeamPatch): Promise<Team>;
  issueKey(teamIdOrName: string, key: Omit<NewKey, 'secretHash' | 'teamId' | 'settings'> & { settings?: unknown }): Promise<IssuedKey & { keySecret?: string }>;
  listKeys(teamIdOrName?: string): Promise<ApiKey[]>;
  getKey(id: string): Promise<ApiKey>;
  /** Changes a key; turning `requireSecret` on for a key without a key secret issues one. */
  updateKey(id: string, patch: KeyUpdate): Promise<UpdatedKey>;
  /** Issues a new key secret (the previous one stops working at once). */
  issueKeySecret(id: string): Promise<{ key: ApiKey; keySecret: string }>;
  /** New secret; the old one keeps working for `gracePeriodMs` (0: stops at once). */
  rotateKey(id: string, gracePeriodMs: number): Promise<IssuedKey & { previousSecretValidUntil: string }>;
  revokeKey(id: string): Promise<ApiKey>;
  usage(query: { team?: string; key?: string; from?: string; to?: string; days?: number }): Promise<UsageReport>;
}

/** Merged settings, or a 400 naming the field that is wrong. */
function validSettings(current: ApiKey['settings'], input: unknown): ApiKey['settings'] {
  try {
    return applySettingsPatch(current, input);
  } catch (error) {
    if (error instanceof KeySettingsError) throw new AdminError(400, error.message);
    throw error;
  }
}

export function createAdminService(
  store: KeyDirectory & UsageReports,
  options: { now?: () => number; onChange?: () => void; onKeyRevoked?: (key: ApiKey) => void } = {},
): AdminService {
  const now = options.now ?? Date.now;
  const changed = () => options.onChange?.();

  async function team(idOrName: string): Promise<Team> {
    const found = await store.findTeam(idOrName);
    if (found === null) throw new AdminError(404, `no team "${idOrName}"`);
    return found;
  }

  async function key(id: string): Promise<ApiKey> {
    const found = await store.findKey(id);
    if (found === null) throw new AdminError(404, `no key "${id}"`);
    return found;
  }

  return {
    async createTeam(input) {
      if (await store.findTeam(input.name)) throw new AdminError(409, `a team named "${input.name}" already exists`);
      try {
        return await store.createTeam(input);
      } catch (error) {
        // Another process (a replica, the CLI) created the name between the check and the insert.
        if (error instanceof StoreConflictError) throw new AdminError(409, error.message);
        throw error;
      }
    },
    listTeams: () => store.listTeams(),
    getTeam: team,
    async updateTeam(idOrName, patch) {
      const existing = await team(idOrName);
      const updated = await store.updateTeam(existing.id, patch);
      changed();
      return updated!;
    },
    async issueKey(teamIdOrName, input) {
      const owner = await team(teamIdOrName);
      const { settings: settingsInput, ...fields } = input;
      const settings = settingsInput === undefined ? null : validSettings(null, settingsInput);
      const issued = await issueKey(store, { ...fields, teamId: owner.id, settings });
      if (settings?.requireSecret !== true) return issued;
      const keySecret = generateKeySecret();
      const key = await store.updateKey(issued.key.id, { keySecretHash: hashSecret(keySecret) });
      return { ...issued, key: key!, keySecret };
    },
    async listKeys(teamIdOrName) {
      if (teamIdOrName === undefined) return store.listKeys();
      return store.listKeys({ teamId: (await team(teamIdOrName)).id });
    },
    getKey: key,
    async updateKey(id, input) {
      const existing = await key(id);
      const { settings: settingsInput, ...fields } = input;
      const patch: KeyPatch = { ...fields };
      let keySecret: string | undefined;
      if (settingsInput !== undefined) {
        patch.settings = validSettings(existing.settings, settingsInput);
        if (patch.settings?.requireSecret === true && !existing.hasKeySecret) {
          keySecret = generateKeySecret();
          patch.keySecretHash = hashSecret(keySecret);
        }
      }
      const updated = await store.updateKey(id, patch);
      changed();
      return keySecret === undefined ? { key: updated! } : { key: updated!, keySecret };
    },
    async issueKeySecret(id) {
      const existing = await key(id);
      if (existing.revokedAt !== null) throw new AdminError(409, `key "${id}" is revoked`);
      const keySecret = generateKeySecret();
      const updated = await store.updateKey(id, { keySecretHash: hashSecret(keySecret) });
      changed();
      return { key: updated!, keySecret };
    },
    async rotateKey(id, gracePeriodMs) {
      const existing = await key(id);
      if (existing.revokedAt !== null) throw new AdminError(409, `key "${id}" is revoked`);
      const secret = generateSecret();
      const validUntil = now() + gracePeriodMs;
      await store.rotateKey(id, hashSecret(secret), validUntil);
      changed();
      return { key: existing, secret, previousSecretValidUntil: new Date(validUntil).toISOString() };
    },
    async revokeKey(id) {
      await key(id);
      await store.revokeKey(id, now());
      changed();
      const revoked = await key(id);
      options.onKeyRevoked?.(revoked);
      return revoked;
    },
    async usage(query) {
      if ((query.team === undefined) === (query.key === undefined)) throw new AdminError(400, 'give exactly one of team or key');
      const to = query.to ?? utcDay(now());
      const days = query.days ?? 1;
      if (!Number.isInteger(days) || days < 1 || days > MAX_REPORT_DAYS) throw new AdminError(400, `days must be 1 to ${MAX_REPORT_DAYS}`);
      const from = query.from ?? utcDay(Date.parse(`${to}T00:00:00Z`) - (days - 1) * 86_400_000);
      for (const [name, day] of [['from', from], ['to', to]] as const) {
        if (!DAY.test(day) || Number.isNaN(Date.parse(`${day}T00:00:00Z`))) throw new AdminError(400, `${name} must be a YYYY-MM-DD day`);
      }
      if (from > to) throw new AdminError(400, 'from is after to');
      const teamId = query.team === undefined ? undefined : (await team(query.team)).id;
      const keyId = query.key === undefined ? undefined : (await key(query.key)).id;
      const rows = await store.usage({ teamId, keyId, fromDay: from, toDay: to });
      type Sums = Pick<UsageRow, 'credits' | 'requests' | 'upstreamUnits' | 'upstreamUsd' | 'savedUnits'>;
      const grouped = new Map<string, { network: string; method: string } & Sums>();
      const totals: Sums = { credits: 0, requests: 0 };
      for (const row of rows) {
        const groupKey = `${row.network}\u0000${row.method}`;
        const group = grouped.get(groupKey) ?? { network: row.network, method: row.method, credits: 0, requests: 0 };
        for (const sums of [totals, group]) addUsage(sums, row);
        grouped.set(groupKey, group);
      }
      return {
        from,
        to,
        ...(teamId !== undefined ? { teamId } : {}),
        ...(keyId !== undefined ? { keyId } : {}),
        totals,
        byNetworkMethod: [...grouped.values()],
        rows,
      };
    },
  };
}

/** Adds a usage row to running sums; the provider spend fields only where rows carry them (networks with priced upstreams). */
function addUsage(sums: Pick<UsageRow, 'credits' | 'requests' | 'upstreamUnits' | 'upstreamUsd' | 'savedUnits'>, row: UsageRow): void {
  sums.credits += row.credits;
  sums.requests += row.requests;
  if (row.upstreamUnits !== undefined) sums.upstreamUnits = (sums.upstreamUnits ?? 0) + row.upstreamUnits;
  if (row.upstreamUsd !== undefined) sums.upstreamUsd = (sums.upstreamUsd ?? 0) + row.upstreamUsd;
  if (row.savedUnits !== undefined) sums.savedUnits = (sums.savedUnits ?? 0) + row.savedUnits;
}
