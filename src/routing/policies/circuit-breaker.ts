import { SKIPPED, type AttemptPolicy } from './types.js';

/**
 * Admits an attempt only while the upstream's circuit lets it through (closed, or the single
 * trial after a cooldown), and reports how it went: failures count towards opening the circuit,
 * anything the upstream answered properly (a result or its own JSON-RPC error) closes it. A
 * cancelled attempt (a hedge that lost) says nothing about the upstream and is not counted.
 * The state itself lives in {@link UpstreamHealth}, shared with selection and the prober.
 */
export function circuitBreakerPolicy(): AttemptPolicy {
  return (next) => async (upstream, execution, signal) => {
    if (!upstream.health.admit()) return { kind: 'failure', reason: SKIPPED, timedOut: false, durationMs: 0 };
    const outcome = await next(upstream, execution, signal);
    if (outcome.kind !== 'failure') upstream.health.recordSuccess(outcome.durationMs);
    else if (outcome.reason === 'cancelled') upstream.health.releaseTrial();
    else upstream.health.recordFailure();
    return outcome;
  };
}
