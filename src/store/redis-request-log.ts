import type { Cluster, Redis } from 'ioredis';
import type { RedisKeyspace } from './redis-keyspace.js';
import { newestMatching, REQUESTS_KEPT_PER_TEAM, type RequestLog, type RequestRecord } from './types.js';

/**
 * The request explorer's log in Redis: a sorted set per team, the record (JSON) scored by its
 * arrival time, so every replica's requests read back newest first whichever replica flushed its
 * batch first. Each append adds a team's records and trims the set to the newest
 * {@link REQUESTS_KEPT_PER_TEAM} atomically. On one Redis a whole batch is one MULTI, one round
 * trip; on Redis Cluster each team's set lives in the team's slot, so a batch is one MULTI per
 * team it holds.
 */

export function createRedisRequestLog(redis: Redis | Cluster, keys: RedisKeyspace, kept = REQUESTS_KEPT_PER_TEAM): RequestLog {
  function byTeam(records: readonly RequestRecord[]): Map<string, Array<string | number>> {
    const teams = new Map<string, Array<string | number>>();
    for (const record of records) {
      let members = teams.get(record.teamId);
      if (members === undefined) teams.set(record.teamId, (members = []));
      members.push(record.at, JSON.stringify(record));
    }
    return teams;
  }

  return {
    async appendRequests(records) {
      if (records.length === 0) return;
      const teams = byTeam(records);
      if (!keys.clustered) {
        const multi = redis.multi();
        for (const [teamId, members] of teams) {
          const key = keys.requests(teamId);
          multi.zadd(key, ...members).zremrangebyrank(key, 0, -(kept + 1));
        }
        await multi.exec();
        return;
      }
      await Promise.all(
        [...teams].map(([teamId, members]) => {
          const key = keys.requests(teamId);
          return redis.multi().zadd(key, ...members).zremrangebyrank(key, 0, -(kept + 1)).exec();
        }),
      );
    },
    async recentRequests(query) {
      return newestMatching(await redis.zrevrange(keys.requests(query.teamId), 0, kept - 1), query);
    },
  };
}
