import { AdminError, type AdminService, type KeyUpdate, type UpdatedKey, type UsageReport } from '../admin/admin-service.js';
import { nextUtcMidnight, utcDay } from '../metering/meter.js';
import { quotaForecast, readCreditsLastHour, type QuotaForecast } from '../metering/quota-forecast.js';
import type { ApiKey, HourlyUsageRow, KeyDirectory, Ledger, RequestLog, Team, UsageReports } from '../store/index.js';
import { readRequests, requestQueryOf, type ExplorerRow } from '../explorer/request-queries.js';

/**
 * What a team can do with its team token (docs/portal.md): its own keys and its own usage, and
 * nothing of any other team. Every operation goes through the operator's {@link AdminService}
 * (so key settings, validation and cache invalidation are the same as for the admin API), after
 * checking that the key belongs to the team. A key of another team is answered exactly as a key
 * that does not exist (404, the same message), so nothing about other teams leaks.
 */

export interface KeyView extends ApiKey {
  /** The last UTC hour in which the key was charged (ISO), within the last 30 days; null if none. */
  lastUsedAt: string | null;
}

export interface TeamOverview {
  team: Pick<Team, 'id' | 'name' | 'dailyCredits' | 'creditsPerSecond'>;
  today: { day: string; used: number; remaining: number; limit: number; resetsAt: string };
  /** When today's quota runs out at the last hour's rate (src/metering/quota-forecast.ts). */
  forecast: QuotaForecast;
}

export interface TeamService {
  overview(): Promise<TeamOverview>;
  listKeys(): Promise<KeyView[]>;
  getKey(id: string): Promise<ApiKey>;
  /** As the admin API issues one: settings are checked there, and a key secret issued when required. */
  createKey(input: Parameters<AdminService['issueKey']>[1]): ReturnType<AdminService['issueKey']>;
  /** As the admin API changes one (`{key, keySecret?}`). */
  updateKey(id: string, patch: KeyUpdate): Promise<UpdatedKey>;
  rotateKey(id: string, gracePeriodMs: number): ReturnType<AdminService['rotateKey']>;
  revokeKey(id: string): Promise<ApiKey>;
  usage(query: { key?: string; from?: string; to?: string; days?: number }): Promise<UsageReport>;
  hourlyUsage(day?: string): Promise<{ day: string; rows: HourlyUsageRow[] }>;
  /** The team's last requests (`?key=&method=&status=&limit=`); `asTeam`, when given, must name this team (by id or name). */
  requests(query: URLSearchParams, asTeam?: string): Promise<{ requests: ExplorerRow[] }>;
}

const LAST_USED_WINDOW_DAYS = 30;
const DAY = /^\d{4}-\d{2}-\d{2}$/;

export function createTeamService(
  teamId: string,
  admin: AdminService,
  store: Pick<KeyDirectory, 'findKey' | 'findTeam'> & UsageReports & Pick<Ledger, 'applyLedger'> & Pick<RequestLog, 'recentRequests'>,
  options: { now: () => number },
): TeamService {
  const { now } = options;

  /** The key if it is this team's; otherwise the same 404 as for a key that does not exist. */
  async function ownKey(id: string): Promise<ApiKey> {
    const key = await store.findKey(id);
    if (key === null || key.teamId !== teamId) throw new AdminError(404, `no key "${id}"`);
    return key;
  }

  async function team(): Promise<Team> {
    const found = await store.findTeam(teamId);
    // The token outlived its team: nothing to show.
    if (found === null || found.id !== teamId) throw new AdminError(404, 'no such team');
    return found;
  }

  return {
    async overview() {
      const current = await team();
      const at = now();
      const day = utcDay(at);
      const [[peeked], creditsLastHour] = await Promise.all([store.applyLedger([{ type: 'peek', teamId, day }] as const), readCreditsLastHour((query) => store.hourlyUsage(query), teamId, at)]);
      const used = peeked.teamUsed;
      return {
        team: { id: current.id, name: current.name, dailyCredits: current.dailyCredits, creditsPerSecond: current.creditsPerSecond },
        today: { day, used, remaining: Math.max(0, current.dailyCredits - used), limit: current.dailyCredits, resetsAt: new Date(nextUtcMidnight(at)).toISOString() },
        forecast: quotaForecast({ used, limit: current.dailyCredits, creditsLastHour, now: at }),
      };
    },
    async listKeys() {
      const keys = await admin.listKeys(teamId);
      const to = utcDay(now());
      const from = utcDay(Date.parse(`${to}T00:00:00Z`) - (LAST_USED_WINDOW_DAYS - 1) * 86_400_000);
      const lastDay = new Map<string, string>();
      for (const row of await store.usage({ teamId, fromDay: from, toDay: to })) {
        if (row.requests > 0 && (lastDay.get(row.keyId) ?? '') < row.day) lastDay.set(row.keyId, row.day);
      }
      const lastHour = new Map<string, number>();
      for (const day of new Set(lastDay.values())) {
        for (const row of await store.hourlyUsage({ teamId, day })) {
          if (lastDay.get(row.keyId) === day && row.requests > 0) lastHour.set(row.keyId, Math.max(lastHour.get(row.keyId) ?? 0, row.hour));
        }
      }
      return keys.map((key) => {
        const day = lastDay.get(key.id);
        const hour = String(lastHour.get(key.id) ?? 0).padStart(2, '0');
        return { ...key, lastUsedAt: day === undefined ? null : `${day}T${hour}:00:00.000Z` };
      });
    },
    getKey: ownKey,
    createKey: (input) => admin.issueKey(teamId, input),
    async updateKey(id, patch) {
      await ownKey(id);
      return admin.updateKey(id, patch);
    },
    async rotateKey(id, gracePeriodMs) {
      await ownKey(id);
      return admin.rotateKey(id, gracePeriodMs);
    },
    async revokeKey(id) {
      await ownKey(id);
      return admin.revokeKey(id);
    },
    async usage(query) {
      if (query.key !== undefined) await ownKey(query.key);
      return admin.usage({ ...query, ...(query.key === undefined ? { team: teamId } : {}) });
    },
    async hourlyUsage(day = utcDay(now())) {
      if (!DAY.test(day) || Number.isNaN(Date.parse(`${day}T00:00:00Z`))) throw new AdminError(400, 'day must be a YYYY-MM-DD day');
      return { day, rows: await store.hourlyUsage({ teamId, day }) };
    },
    async requests(query, asTeam) {
      if (asTeam !== undefined && asTeam !== teamId && (await team()).name !== asTeam) throw new AdminError(404, 'no such team');
      return readRequests(store, () => admin.listKeys(teamId), requestQueryOf(teamId, query));
    },
  };
}
