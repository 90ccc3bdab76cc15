import type { GatewayConfig } from '../config/schema.js';
import type { Logger } from '../logging/logger.js';
import { createThrottle } from '../logging/throttle.js';
import type { GatewayMetrics } from '../metrics/metrics.js';
import { createMemoryTier } from './memory-tier.js';
import { createResponseCache, type ResponseCache } from './response-cache.js';
import { createSharedTier, openSharedTierClient } from './shared-tier.js';

/** How often a failing shared tier is logged (each failure is counted). */
const SHARED_ERROR_LOG_INTERVAL_MS = 10_000;

/** The response cache the `cache` section asks for: the in-process tier, and the shared tier when `cache.shared` is set. */
export function createResponseCacheFor(
  config: GatewayConfig['cache'],
  deps: { now: () => number; logger: Logger; metrics: GatewayMetrics },
): ResponseCache {
  const { metrics, logger } = deps;
  const memory = createMemoryTier({ maxBytes: config.maxBytes, onEvict: () => metrics.cacheEvictions.inc() });
  const shouldLog = createThrottle(SHARED_ERROR_LOG_INTERVAL_MS, deps.now);
  const shared =
    config.shared === undefined
      ? undefined
      : createSharedTier(openSharedTierClient(config.shared), {
          ttlSeconds: config.shared.ttlSeconds,
          maxItemBytes: config.shared.maxItemBytes,
          now: deps.now,
          onError: (error) => {
            metrics.cacheSharedErrors.inc();
            if (shouldLog()) logger.warn({ err: error }, 'the shared cache (Redis) is failing; answering from the in-process cache and upstreams');
          },
        });
  return createResponseCache({
    memory,
    shared,
    now: deps.now,
    observe: {
      lookup: (network, method, tier, hit) => metrics.cacheLookups.add(1, network, method, tier, hit ? 'hit' : 'miss'),
      stored: (network, method, tier) => metrics.cacheWrites.add(1, network, method, tier),
      reorg: (network) => metrics.cacheReorgs.inc({ network }),
    },
  });
}
