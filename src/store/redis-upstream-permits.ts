import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { RedisKeyspace } from './redis-keyspace.js';
import { UPSTREAM_PERMIT_SCRIPT } from './redis-scripts.js';
import type { UpstreamPermits } from './types.js';

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
