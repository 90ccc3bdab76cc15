import type { Clock } from '../clock.js';
import { childController, type AttemptOutcome, type AttemptPolicy } from './types.js';

/**
 * Bounds one attempt by the upstream's `timeoutMs` and by what is left of the call's deadline.
 * When the bound passes, the attempt is aborted (its connection is released by undici) and ends
 * at once as a `timeout` failure, whatever the attempt does with the abort.
 */
export function timeoutPolicy(clock: Clock): AttemptPolicy {
  return (next) => (upstream, execution, signal) => {
    const budgetMs = Math.min(upstream.timeoutMs, execution.deadline - clock.now());
    const timedOut: AttemptOutcome = { kind: 'failure', reason: 'timeout', timedOut: true, durationMs: Math.max(0, budgetMs) };
    if (budgetMs <= 0) return Promise.resolve(timedOut);
    const { controller, release } = childController(signal);
    return new Promise<AttemptOutcome>((resolve) => {
      let done = false;
      const finish = (outcome: AttemptOutcome) => {
        if (done) return;
        done = true;
        cancelTimer();
        release();
        resolve(outcome);
      };
      const cancelTimer = clock.setTimer(budgetMs, () => {
        finish(timedOut);
        controller.abort(new Error('attempt timed out'));
      });
      next(upstream, execution, controller.signal).then(finish, (error: unknown) => {
        finish({ kind: 'failure', reason: `internal_${(error as Error)?.name ?? 'error'}`, timedOut: false, durationMs: 0 });
      });
    });
  };
}
