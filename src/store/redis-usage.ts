import type { Cluster, Redis } from 'ioredis';
import { dayRange } from './day-range.js';
import type { RedisKeyspace } from './redis-keyspace.js';
import type { HourlyUsageQuery, HourlyUsageRow, ProviderSpendRow, UsageQuery, UsageRow } from './types.js';

/**
 * The Redis store's usage: reads of the usage hashes the ledger writes (redis-ledger.ts), and
 * writes of a snapshot's usage (`tollgate migrate`). Every key read or written here belongs to one
 * team, so on Redis Cluster each team's writes are one MULTI on its slot.
 */

export interface RedisUsage {
  /** Settled usage of the given teams, day by day, unordered. */
  usageOf(teamIds: readonly string[], query: UsageQuery): Promise<UsageRow[]>;
  hourlyUsage(query: HourlyUsageQuery): Promise<HourlyUsageRow[]>;
  /** Adds usage rows and the day totals they make up (team and key), one MULTI per team. */
  importUsage(rows: readonly UsageRow[]): Promise<void>;
  /** Adds hourly usage rows, one MULTI per team. */
  importHourlyUsage(rows: readonly HourlyUsageRow[]): Promise<void>;
  /** Provider spend of the given teams, day by day, unordered. */
  spendOf(teamIds: readonly string[], query: UsageQuery): Promise<ProviderSpendRow[]>;
  /** Adds provider spend rows, one MULTI per team. */
  addProviderSpend(rows: readonly ProviderSpendRow[]): Promise<void>;
}

/** The field kinds of a team-day's provider spend hash. */
const SPEND_FIELDS = { u: 'units', d: 'usd', s: 'savedUnits' } as const;

export const usageField = (row: { keyId: string; network: string; method: string }): string => `${row.keyId}\t${row.network}\t${row.method}`;

function byTeam<T extends { teamId: string }>(rows: readonly T[]): Map<string, T[]> {
  const teams = new Map<string, T[]>();
  for (const row of rows) {
    const list = teams.get(row.teamId);
    if (list === undefined) teams.set(row.teamId, [row]);
    else list.push(row);
  }
  return teams;
}

export function createRedisUsage(redis: Redis | Cluster, keys: RedisKeyspace, retentionSeconds: (day: string) => number): RedisUsage {
  return {
    async usageOf(teamIds, query) {
      const rows: UsageRow[] = [];
      const reads: Array<Promise<void>> = [];
      for (const day of dayRange(query.fromDay, query.toDay)) {
        for (const teamId of teamIds) {
          reads.push(
            Promise.all([redis.hgetall(keys.usageCredits(teamId, day)), redis.hgetall(keys.usageRequests(teamId, day))]).then(([credits, requests]) => {
              for (const [field, value] of Object.entries(credits)) {
                const [keyId, network, method] = field.split('\t') as [string, string, string];
                if (query.keyId !== undefined && keyId !== query.keyId) continue;
                rows.push({ day, teamId, keyId, network, method, credits: Number(value), requests: Number(requests[field] ?? 0) });
              }
            }),
          );
        }
      }
      await Promise.all(reads);
      return rows;
    },
    async spendOf(teamIds, query) {
      const rows = new Map<string, ProviderSpendRow>();
      await Promise.all(
        dayRange(query.fromDay, query.toDay).flatMap((day) =>
          teamIds.map(async (teamId) => {
            for (const [field, value] of Object.entries(await redis.hgetall(keys.providerSpend(teamId, day)))) {
              const [kind, keyId, network, method] = field.split('\t') as [keyof typeof SPEND_FIELDS, string, string, string];
              if (query.keyId !== undefined && keyId !== query.keyId) continue;
              const id = `${day}\t${teamId}\t${keyId}\t${network}\t${method}`;
              let row = rows.get(id);
              if (row === undefined) rows.set(id, (row = { day, teamId, keyId, network, method, units: 0, usd: 0, savedUnits: 0 }));
              row[SPEND_FIELDS[kind]] = Number(value);
            }
          }),
        ),
      );
      return [...rows.values()];
    },
    async addProviderSpend(rows) {
      await Promise.all(
        [...byTeam(rows)].map(([teamId, teamRows]) => {
          const multi = redis.multi();
          for (const row of teamRows) {
            const key = keys.providerSpend(teamId, row.day);
            const field = usageField(row);
            if (row.units !== 0) multi.hincrbyfloat(key, `u\t${field}`, row.units);
            if (row.usd !== 0) multi.hincrbyfloat(key, `d\t${field}`, row.usd);
            if (row.savedUnits !== 0) multi.hincrbyfloat(key, `s\t${field}`, row.savedUnits);
            multi.expire(key, retentionSeconds(row.day));
          }
          return multi.exec();
        }),
      );
    },
    async hourlyUsage(query) {
      const hash = await redis.hgetall(keys.usageHours(query.teamId, query.day));
      const rows = new Map<string, HourlyUsageRow>();
      for (const [field, value] of Object.entries(hash)) {
        const [kind, keyId, hour] = field.split('\t') as [string, string, string];
        const id = `${keyId}\t${hour}`;
        let row = rows.get(id);
        if (row === undefined) rows.set(id, (row = { day: query.day, hour: Number(hour), teamId: query.teamId, keyId, credits: 0, requests: 0 }));
        if (kind === 'c') row.credits = Number(value);
        else row.requests = Number(value);
      }
      return [...rows.values()].sort((a, b) => (a.keyId === b.keyId ? a.hour - b.hour : a.keyId < b.keyId ? -1 : 1));
    },
    async importUsage(rows) {
      await Promise.all(
        [...byTeam(rows)].map(([teamId, teamRows]) => {
          const multi = redis.multi();
          for (const row of teamRows) {
            const ttl = retentionSeconds(row.day);
            const credits = keys.usageCredits(teamId, row.day);
            const requests = keys.usageRequests(teamId, row.day);
            const teamDay = keys.teamDay(teamId, row.day);
            const keyDay = keys.keyDay(teamId, row.keyId, row.day);
            multi.hincrby(credits, usageField(row), row.credits).expire(credits, ttl);
            multi.hincrby(requests, usageField(row), row.requests).expire(requests, ttl);
            multi.incrby(teamDay, row.credits).expire(teamDay, ttl);
            multi.incrby(keyDay, row.credits).expire(keyDay, ttl);
          }
          return multi.exec();
        }),
      );
    },
    async importHourlyUsage(rows) {
      await Promise.all(
        [...byTeam(rows)].map(([teamId, teamRows]) => {
          const multi = redis.multi();
          for (const row of teamRows) {
            const hours = keys.usageHours(teamId, row.day);
            multi
              .hincrby(hours, `c\t${row.keyId}\t${row.hour}`, row.credits)
              .hincrby(hours, `r\t${row.keyId}\t${row.hour}`, row.requests)
              .expire(hours, retentionSeconds(row.day));
          }
          return multi.exec();
        }),
      );
    },
  };
}
