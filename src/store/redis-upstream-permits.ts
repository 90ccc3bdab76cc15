import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { RedisKeyspace } from './redis-keyspace.js';
import { UPSTREAM_PERMIT_SCRIPT } from './redis-scripts.js';
import type { UpstreamPermits, UpstreamQuotas } from './types.js';

type RedisWithPermits = (Redis | Cluster) & { tgUpstreamPermit(key: string, limit: number, windowMs: number, sliceMs: number, sliceLimit: number, member: string): Promise<number> };

/**
 * Upstream rate-limit windows every replica shares (docs/budgets.md): one script call per
 * permit, on the window's own key (on Redis Cluster its own slot, so upstreams spread over the
 * masters).
 */
export function createRedisUpstreamPermits(client: Redis | Cluster, keys: RedisKeyspace): UpstreamPermits {
  const redis = client as RedisWithPermits;
  redis.defineCommand('tgUpstreamPermit', { numberOfKeys: 1, lua: UPSTREAM_PERMIT_SCRIPT });
  // Members only need to be unique within one window: a per-process prefix and a counter.
  const prefix = randomBytes(6).toString('hex');
  let next = 0;
  return {
    takeUpstreamPermit: (scope, limit, windowMs, sliceMs, sliceLimit) =>
      redis.tgUpstreamPermit(keys.upstreamWindow(scope), limit, windowMs, sliceMs, sliceLimit, `${prefix}-${(next++).toString(36)}`),
  };
}

/** A quota period's key lives this long after the period could last end (a month and a day). */
const QUOTA_KEY_TTL_SECONDS = 32 * 86_400;

/**
 * Units spent at each priced upstream per quota period, shared by every replica: one hash per
 * period (on Redis Cluster one slot), a field per upstream.
 */
export function createRedisUpstreamQuotas(redis: Redis | Cluster, keys: RedisKeyspace): UpstreamQuotas {
  return {
    async addUpstreamUnits(rows) {
      const multi = redis.multi();
      for (const row of rows) multi.hincrbyfloat(keys.upstreamUnits(row.period), row.scope, row.units).expire(keys.upstreamUnits(row.period), QUOTA_KEY_TTL_SECONDS);
      await multi.exec();
    },
    async upstreamUnits(scopes, period) {
      if (scopes.length === 0) return [];
      const values = await redis.hmget(keys.upstreamUnits(period), ...scopes);
      return values.map((value) => (value === null ? 0 : Number(value)));
    },
  };
}
