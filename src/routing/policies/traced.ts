import type { AttemptTrace } from '../call-trace.js';
import type { AttemptOutcome } from '../upstream.js';
import type { AttemptPolicy, Execution } from './types.js';

/**
 * A span per attempt of a traced call (docs/tracing.md): which upstream, the attempt's number in
 * its call, whether it is a hedge or a null confirmation, why the one before it failed, and how it
 * ended. It sits inside the circuit breaker, so attempts the breaker skips are not spans, and
 * outside the timeout, so a timed-out attempt ends its span as `timeout`. An untraced call passes
 * straight through.
 */
export function tracedPolicy(network: string): AttemptPolicy {
  return (next) => (upstream, execution, signal) => {
    const trace = execution.trace;
    if (trace === undefined) return next(upstream, execution, signal);
    execution.attemptsStarted += 1;
    // attemptEachCandidate marks a candidate running before its attempt; a confirmation is not one.
    const candidate = execution.running.has(upstream);
    const previous = execution.attempts[execution.attempts.length - 1];
    const span = trace.attempt({
      network,
      upstream: upstream.id,
      method: execution.method,
      attempt: execution.attemptsStarted,
      hedge: candidate && execution.running.size > 1,
      confirmation: !candidate,
      retryReason: candidate ? previous?.reason : undefined,
    });
    return next(upstream, span.headers === undefined ? execution : withUpstreamHeaders(execution, span.headers), signal).then(
      (outcome) => ended(span, outcome),
      (error: unknown) => {
        span.end({ kind: 'failure', reason: 'internal', timedOut: false, durationMs: 0 });
        throw error;
      },
    );
  };
}

function ended(span: AttemptTrace, outcome: AttemptOutcome): AttemptOutcome {
  span.end(outcome);
  return outcome;
}

/** The same execution (its state shared, not copied) whose attempts send these headers too. */
function withUpstreamHeaders(execution: Execution, headers: Readonly<Record<string, string>>): Execution {
  return Object.create(execution, { upstreamHeaders: { value: headers } }) as Execution;
}
