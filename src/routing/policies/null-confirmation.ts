import { attemptOf, childController, isListedFailure, isNullResult, type AttemptFn, type CallFn, type CallOutcome, type CallPolicy, type CallSignal, type Execution } from './types.js';

/** How a null answer ended: believed after the others agreed, or replaced by another's answer. */
export type NullConfirmation = 'confirmed' | 'contradicted';

/**
 * A `null` ("no such block") is believed only when no other available upstream has an answer:
 * a node that is behind does not know a block its peers already have, and must not answer for
 * the pool. The others are asked at once, in parallel, through the same attempt chain (circuit
 * breaker, timeout, verification) and within the call's deadline; the first one with a verified,
 * non-null result wins and the rest are cancelled.
 */
export function nullConfirmationPolicy(
  attempt: AttemptFn,
  options: { appliesTo: (method: string) => boolean; observe?: (result: NullConfirmation) => void },
): CallPolicy {
  return (next) => (execution, signal) => {
    // Other methods pass through without an async turn of this policy around them.
    if (!options.appliesTo(execution.method)) return next(execution, signal);
    return confirmed(next, execution, signal);
  };

  async function confirmed(next: CallFn, execution: Execution, signal: CallSignal): Promise<CallOutcome> {
    const outcome = await next(execution, signal);
    if (outcome.kind !== 'result' || !isNullResult(outcome.resultBytes)) return outcome;
    const others = execution.othersThan(outcome.upstream);
    if (others.length === 0) return outcome;
    const { controller, release } = childController(signal);
    const found = await new Promise<CallOutcome | undefined>((resolve) => {
      let pending = others.length;
      for (const upstream of others) {
        attempt(upstream, execution, controller.signal).then((answer) => {
          pending -= 1;
          if (answer.kind === 'result' && !isNullResult(answer.resultBytes)) {
            controller.abort(new Error('another upstream has the answer'));
            resolve({ kind: 'result', resultBytes: answer.resultBytes, result: answer.result, upstream: upstream.id });
          } else if (isListedFailure(answer)) {
            execution.attempts.push(attemptOf(upstream, answer));
          }
          if (pending === 0) resolve(undefined);
        }, () => {
          pending -= 1;
          if (pending === 0) resolve(undefined);
        });
      }
    });
    release();
    options.observe?.(found === undefined ? 'confirmed' : 'contradicted');
    return found ?? outcome;
  }
}
