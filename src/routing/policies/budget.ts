import type { Clock } from '../clock.js';
import type { UpstreamBudget } from '../upstream-budget.js';
import { RATE_LIMITED } from '../upstream.js';
import type { AttemptFn, AttemptOutcome, AttemptPolicy, CallSignal, Execution, RoutedUpstream } from './types.js';

/** Reason of an attempt not made because the upstream had no budget left within the call's deadline. */
export const OVER_BUDGET = 'over_budget';

/**
 * A call waits for a permit only if this much of its deadline is left after the wait (or twice
 * the upstream's recent 99th-percentile latency, if more): enough for the attempt to be
 * answered, rather than a permit spent on an attempt that times out.
 */
export const WAIT_MARGIN_MS = 200;

/**
 * Spends an upstream's request budget (upstream-budget.ts) on each attempt. Without a permit the
 * call moves on to its next candidate, and this upstream is tried again after the others (once);
 * on its last candidate it waits for a permit as long as
 * its deadline allows (leaving time for the attempt, {@link WAIT_MARGIN_MS}), and otherwise fails with {@link OVER_BUDGET} (listed, so the caller can
 * tell "every upstream is at its limit" from an outage). An answer that says "rate limited" cuts
 * the upstream's limit at once. The outermost attempt policy: an attempt that is never made
 * costs no permit and says nothing to the circuit breaker.
 */
export function budgetPolicy(budgetOf: (upstreamId: string) => UpstreamBudget | undefined, clock: Clock, observe: { overBudget?(upstreamId: string): void } = {}): AttemptPolicy {
  return (next) => (upstream, execution, signal) => {
    const budget = budgetOf(upstream.id);
    // Without a budget the attempt is the next policy's own promise, with no async turn of this
    // one around it.
    if (budget === undefined) return next(upstream, execution, signal);
    return attemptWithin(budget, next, upstream, execution, signal);
  };

  async function attemptWithin(budget: UpstreamBudget, next: AttemptFn, upstream: RoutedUpstream, execution: Execution, signal: CallSignal): Promise<AttemptOutcome> {
    const taken = budget.take();
    const wait = typeof taken === 'number' ? taken : await taken;
    if (wait > 0) {
      const lastCandidate = execution.peekCandidate() === undefined;
      const margin = Math.max(WAIT_MARGIN_MS, 2 * (upstream.health.latencyQuantile(0.99) ?? 0));
      const latestStart = execution.deadline - margin;
      const overBudget = (): AttemptOutcome => {
        observe.overBudget?.(upstream.id);
        return { kind: 'failure', reason: OVER_BUDGET, timedOut: false, durationMs: 0 };
      };
      if (!lastCandidate) {
        // Others first; if they fail, this one again (then perhaps the last, and so waiting).
        execution.defer?.(upstream);
        return overBudget();
      }
      if (clock.now() + wait >= latestStart) return overBudget();
      const permit = await budget.waitForPermit(latestStart, signal);
      if (permit === 'aborted') return { kind: 'failure', reason: 'cancelled', timedOut: false, durationMs: 0 };
      if (permit === 'too-late') return overBudget();
    }
    const outcome = await next(upstream, execution, signal);
    if (isRateLimited(outcome)) budget.rateLimited();
    return outcome;
  }
}

export function isRateLimited(outcome: AttemptOutcome): boolean {
  return outcome.kind === 'failure' && (outcome.reason === RATE_LIMITED || outcome.reason === 'http_429');
}
