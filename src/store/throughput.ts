/**
 * Credits-per-second token buckets, one per team. A bucket holds at most one second's credits
 * (the burst) and refills continuously. A call costing more than a whole second's credits is let
 * through when the bucket is full and drives it negative, so expensive methods are not locked out
 * by a low limit; the debt is paid back by waiting.
 */
export interface ThroughputLimiter {
  /** Takes `cost` credits if the bucket allows it; returns 0, or the milliseconds to wait. */
  take(teamId: string, cost: number, creditsPerSecond: number, nowMs: number): number;
}

export function createThroughputLimiter(): ThroughputLimiter {
  const buckets = new Map<string, { tokens: number; updatedAt: number }>();
  return {
    take(teamId, cost, creditsPerSecond, nowMs) {
      const capacity = creditsPerSecond;
      let bucket = buckets.get(teamId);
      if (bucket === undefined) {
        bucket = { tokens: capacity, updatedAt: nowMs };
        buckets.set(teamId, bucket);
      } else {
        const elapsed = Math.max(0, nowMs - bucket.updatedAt);
        bucket.tokens = Math.min(capacity, bucket.tokens + (elapsed * creditsPerSecond) / 1000);
        bucket.updatedAt = nowMs;
      }
      const needed = Math.min(cost, capacity);
      if (bucket.tokens >= needed) {
        bucket.tokens -= cost;
        return 0;
      }
      return Math.max(1, Math.ceil(((needed - bucket.tokens) * 1000) / creditsPerSecond));
    },
  };
}
