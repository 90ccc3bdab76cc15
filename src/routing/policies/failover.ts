import type { Clock } from '../clock.js';
import type { CallPolicy } from './types.js';

/**
 * Tries the call's candidates one after another until one answers (a result or the upstream's
 * own JSON-RPC error), the candidates run out, the call's deadline passes or the call is
 * cancelled. Every failure is already listed in the execution by the attempt below.
 */
export function failoverPolicy(clock: Clock): CallPolicy {
  return (next) => async (execution, signal) => {
    for (;;) {
      const outcome = await next(execution, signal);
      if (outcome.kind !== 'failed' || signal.aborted || execution.peekCandidate() === undefined || clock.now() >= execution.deadline) {
        return outcome;
      }
    }
  };
}
