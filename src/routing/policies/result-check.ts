import type { AttemptPolicy } from './types.js';

/**
 * Inspects a result before anyone believes it: for calls that carry a check (a block must hash
 * to the hash asked for, its transactions to its roots), a result that fails is an upstream
 * fault with the check's reason, so the next upstream is tried and nothing is cached or charged.
 */
export function resultCheckPolicy(failureReason: string): AttemptPolicy {
  return (next) => async (upstream, execution, signal) => {
    const outcome = await next(upstream, execution, signal);
    if (outcome.kind !== 'result' || execution.check === undefined) return outcome;
    const problem = await execution.check(outcome.result);
    if (problem === undefined) return outcome;
    return { kind: 'failure', reason: failureReason, detail: problem, timedOut: false, durationMs: outcome.durationMs };
  };
}
