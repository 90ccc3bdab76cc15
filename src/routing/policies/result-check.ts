import type { AttemptOutcome, AttemptPolicy, ResultCheck } from './types.js';

/**
 * Inspects a result before anyone believes it: for calls that carry a check (a block must hash
 * to the hash asked for, its transactions to its roots), a result that fails is an upstream
 * fault with the check's reason, so the next upstream is tried and nothing is cached or charged.
 */
export function resultCheckPolicy(failureReason: string): AttemptPolicy {
  return (next) => (upstream, execution, signal) => {
    const { check } = execution;
    // A call without a check passes through without an async turn of this policy around it.
    if (check === undefined) return next(upstream, execution, signal);
    return checked(next(upstream, execution, signal), check);
  };

  async function checked(attempt: Promise<AttemptOutcome>, check: ResultCheck): Promise<AttemptOutcome> {
    const outcome = await attempt;
    if (outcome.kind !== 'result') return outcome;
    const problem = await check(outcome.result);
    if (problem === undefined) return outcome;
    return { kind: 'failure', reason: failureReason, detail: problem, timedOut: false, durationMs: outcome.durationMs };
  }
}
