import { SKIPPED, type AttemptPolicy } from './types.js';

/**
 * Admits an attempt only while the upstream's circuit lets it through (closed, or the single
 * trial after a cooldown), and reports how it went: failures count towards opening the circuit,
 * anything the upstream answered properly (a result or its own JSON-RPC error) closes it. A
 * cancelled attempt (a hedge that lost) says nothing about the upstream and is not counted.
 * A wrong answer (a block that failed verification) ranks the upstream lower but does not count
 * towards opening its circuit: it concerns one method's answers, and a circuit shuts every
 * method of the network off that upstream — all of them, should a new fork's block ever fail a
 * verifier that does not know it yet.
 * The state itself lives in {@link UpstreamHealth}, shared with selection and the prober.
 */
export function circuitBreakerPolicy(options: { wrongAnswerReasons?: ReadonlySet<string>; answeredReasons?: ReadonlySet<string> } = {}): AttemptPolicy {
  const wrongAnswers = options.wrongAnswerReasons ?? new Set<string>();
  // Failures that are proper answers of a healthy upstream (it declined a logs range as too large).
  const answered = options.answeredReasons ?? new Set<string>();
  return (next) => async (upstream, execution, signal) => {
    if (!upstream.health.admit()) return { kind: 'failure', reason: SKIPPED, timedOut: false, durationMs: 0 };
    const outcome = await next(upstream, execution, signal);
    if (outcome.kind !== 'failure' || answered.has(outcome.reason)) upstream.health.recordSuccess(outcome.durationMs);
    else if (outcome.reason === 'cancelled') upstream.health.releaseTrial();
    else if (wrongAnswers.has(outcome.reason)) upstream.health.recordWrongAnswer();
    else upstream.health.recordFailure();
    return outcome;
  };
}
