/**
 * At most one `true` per interval on the given clock: one log line per burst of the same
 * failure (a Redis outage would otherwise log every request). The first call passes.
 */
export function createThrottle(intervalMs: number, now: () => number): () => boolean {
  let last = Number.NEGATIVE_INFINITY;
  return () => {
    const at = now();
    if (at - last < intervalMs) return false;
    last = at;
    return true;
  };
}
