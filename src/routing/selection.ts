import type { RoutedUpstream } from './upstream.js';

/**
 * The order in which a call tries a network's upstreams. Upstreams whose circuit refuses
 * attempts are left out; those more than `maxBlockLag` behind the best head seen by the probes
 * go last (a node that is behind answers `null` or stale state for what its peers have); the
 * rest are ranked by {@link UpstreamHealth.score} (latency inflated by recent errors, both
 * fading with time), or under `weighted` the first is drawn at random by weight among the
 * healthy ones (a weight reduced by recent errors), so that load spreads, and the rest follow by
 * score. Under `cheapest`, healthy upstreams with rate-limit budget left go first, cheapest for
 * the method first, ties by score; then the others by score. Under every strategy an upstream
 * whose quota for the period is spent goes last.
 */

export type SelectionStrategy = 'fastest' | 'weighted' | 'cheapest';

export interface SelectionSettings {
  strategy: SelectionStrategy;
  maxBlockLag: number;
  /** A probed head older than this is not used to judge lag (the probe has stopped answering). */
  headMaxAgeMs: number;
  /** With probes off, an upstream whose cooldown is over goes first, so its trial happens. */
  trialsByRequests: boolean;
  /** What one call of `method` costs at the upstream (`cheapest`); undefined when it has no price (ranked after priced ones). */
  unitsOf?: (upstream: RoutedUpstream, method: string) => number | undefined;
  /** False while the upstream's rate-limit window is full (`cheapest` ranks it after those with room). */
  hasRoom?: (upstream: RoutedUpstream) => boolean;
  /** True once the upstream's quota for this period is spent: it goes after every other (any strategy). */
  quotaSpent?: (upstream: RoutedUpstream) => boolean;
}

export interface Selector {
  /** The upstreams to try for a call of `method`, best first (the method matters under `cheapest`). */
  order(method?: string): RoutedUpstream[];
  /** The highest head among fresh probe results, or undefined. */
  bestHead(): number | undefined;
  isLagging(upstream: RoutedUpstream): boolean;
}

export function createSelector(
  upstreams: readonly RoutedUpstream[],
  settings: SelectionSettings,
  now: () => number,
  random: () => number = Math.random,
): Selector {
  function bestHead(): number | undefined {
    let best: number | undefined;
    const oldest = now() - settings.headMaxAgeMs;
    for (const upstream of upstreams) {
      const head = upstream.health.head;
      if (head !== undefined && upstream.health.headAt >= oldest && (best === undefined || head > best)) best = head;
    }
    return best;
  }

  function lagOf(upstream: RoutedUpstream, best: number | undefined): boolean {
    const head = upstream.health.head;
    if (best === undefined || head === undefined || upstream.health.headAt < now() - settings.headMaxAgeMs) return false;
    return best - head > settings.maxBlockLag;
  }

  return {
    bestHead,
    isLagging: (upstream) => lagOf(upstream, bestHead()),
    order(method) {
      const best = bestHead();
      const ranked = upstreams
        .filter((upstream) => upstream.health.isAvailable())
        .map((upstream) => ({
          upstream,
          trial: settings.trialsByRequests && upstream.health.trialReady(),
          spent: settings.quotaSpent?.(upstream) ?? false,
          lagging: lagOf(upstream, best),
          score: upstream.health.score(),
        }))
        .sort((a, b) => Number(b.trial) - Number(a.trial) || Number(a.spent) - Number(b.spent) || Number(a.lagging) - Number(b.lagging) || a.score - b.score)
        .map((entry) => entry.upstream);
      const trialFirst = ranked[0] !== undefined && settings.trialsByRequests && ranked[0].health.trialReady();
      if (settings.strategy === 'cheapest' && !trialFirst && method !== undefined) return cheapestFirst(ranked, method, best);
      if (settings.strategy === 'weighted' && !trialFirst) {
        const eligible = ranked.filter((upstream) => upstream.health.isHealthy() && !lagOf(upstream, best) && !(settings.quotaSpent?.(upstream) ?? false));
        const pick = pickByWeight(eligible, random());
        if (pick !== undefined) ranked.unshift(...ranked.splice(ranked.indexOf(pick), 1));
      }
      // Without any upstream fit for a weighted draw (all failed or slow just now), the ranking stands.
      return ranked;
    },
  };

  /**
   * `ranked` (by lag, then score) reordered so that healthy, non-lagging upstreams with budget
   * come first, cheapest first; a stable sort keeps the score order among equal prices and
   * among the rest.
   */
  function cheapestFirst(ranked: RoutedUpstream[], method: string, best: number | undefined): RoutedUpstream[] {
    const unitsOf = settings.unitsOf ?? (() => undefined);
    const hasRoom = settings.hasRoom ?? (() => true);
    const keyed = ranked.map((upstream) => {
      const fit = upstream.health.isHealthy() && !lagOf(upstream, best) && hasRoom(upstream) && !(settings.quotaSpent?.(upstream) ?? false);
      return { upstream, fit, units: unitsOf(upstream, method) ?? Number.POSITIVE_INFINITY };
    });
    keyed.sort((a, b) => Number(b.fit) - Number(a.fit) || (a.fit && a.units !== b.units ? (a.units < b.units ? -1 : 1) : 0));
    return keyed.map((entry) => entry.upstream);
  }
}

/**
 * An upstream's share of weighted first attempts: its configured weight, reduced by its recent
 * error rate (failures, and answers slower than the hedge delay). One failure (a rate of 0.2)
 * takes 40% of its share; a stall, marked slow by every hedge, soon takes all of it. The share
 * comes back as the rate fades with time and with each successful probe.
 */
function effectiveWeight(upstream: RoutedUpstream): number {
  return upstream.weight * Math.max(0, 1 - 2 * upstream.health.currentErrorRate());
}

/** The upstream that `point` (uniform in [0, 1)) falls on when each takes its effective share. */
function pickByWeight(upstreams: readonly RoutedUpstream[], point: number): RoutedUpstream | undefined {
  const weights = upstreams.map(effectiveWeight);
  const total = weights.reduce((sum, weight) => sum + weight, 0);
  if (total <= 0) return undefined;
  let remaining = point * total;
  for (const [index, upstream] of upstreams.entries()) {
    remaining -= weights[index]!;
    if (remaining < 0) return upstream;
  }
  return upstreams[weights.findLastIndex((weight) => weight > 0)];
}
