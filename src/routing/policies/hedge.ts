import type { Clock } from '../clock.js';
import type { CallController } from '../abort-signals.js';
import { childController, FAILED, type CallOutcome, type CallPolicy, type RoutedUpstream } from './types.js';

export interface HedgeSettings {
  /** A fixed delay; when absent the delay is the `quantile` of the upstream's recent latencies. */
  delayMs?: number | undefined;
  quantile: number;
  /** Bounds of the quantile delay; `maxDelayMs` is also the delay before there are enough samples. */
  minDelayMs: number;
  maxDelayMs: number;
  /** Extra attempts a call may have running beside its first one. */
  maxHedges: number;
}

/** How a hedged call ended: `won` when a hedge gave the answer, `lost` when the first attempt still did. */
export type HedgeResult = 'won' | 'lost';

export function hedgeDelayMs(settings: HedgeSettings, upstream: RoutedUpstream): number {
  if (settings.delayMs !== undefined) return settings.delayMs;
  const quantile = upstream.health.latencyQuantile(settings.quantile) ?? settings.maxDelayMs;
  return Math.min(settings.maxDelayMs, Math.max(settings.minDelayMs, quantile));
}

/**
 * A read that has not answered within the hedge delay is also sent down the chain again (the
 * inner failover takes the next untried candidate), and the first answer wins: the others are
 * aborted and the call is answered (and charged) once. The upstreams that were too slow are
 * marked slow at that moment, so later calls rank them lower before their timeouts even fire.
 * Writes are never hedged: sending a transaction twice is not a read that can be repeated.
 */
/**
 * Why the attempts that lost were aborted. One shared reason: an Error made per call captured a
 * stack trace for every forwarded call, hedged or not, about 2% of the CPU of a 167 KiB pass-through.
 */
const ANOTHER_ATTEMPT_ANSWERED = new Error('another attempt answered');

export function hedgePolicy(
  settings: HedgeSettings,
  clock: Clock,
  options: { isWrite: (method: string) => boolean; observe?: (result: HedgeResult) => void },
): CallPolicy {
  return (next) => (execution, signal) => {
    const first = execution.peekCandidate();
    if (settings.maxHedges === 0 || options.isWrite(execution.method) || first === undefined) return next(execution, signal);
    const delayMs = hedgeDelayMs(settings, first);
    return new Promise<CallOutcome>((resolve) => {
      const branches: CallController[] = [];
      let running = 0;
      let hedges = 0;
      let settled = false;
      let cancelTimer = () => {};

      /** `answered`: the branch whose outcome this is; it is over, so only the others are aborted. */
      const settle = (outcome: CallOutcome, fromHedge: boolean, answered: CallController) => {
        settled = true;
        cancelTimer();
        for (const branch of branches) if (branch !== answered) branch.abort(ANOTHER_ATTEMPT_ANSWERED);
        if (hedges > 0) options.observe?.(fromHedge ? 'won' : 'lost');
        resolve(outcome);
      };

      const start = (isHedge: boolean) => {
        const { controller, release } = childController(signal);
        branches.push(controller);
        running += 1;
        next(execution, controller.signal).then(
          (outcome) => {
            release();
            running -= 1;
            if (settled) return;
            if (outcome.kind !== 'failed') settle(outcome, isHedge, controller);
            else if (running === 0) settle(FAILED, isHedge, controller);
          },
          () => {
            release();
            running -= 1;
            if (!settled && running === 0) settle(FAILED, isHedge, controller);
          },
        );
      };

      const scheduleHedge = () => {
        cancelTimer = clock.setTimer(delayMs, () => {
          if (settled || signal.aborted || clock.now() >= execution.deadline || execution.peekCandidate() === undefined) return;
          for (const slow of execution.running) slow.health.recordSlow();
          hedges += 1;
          start(true);
          if (hedges < settings.maxHedges) scheduleHedge();
        });
      };

      scheduleHedge();
      start(false);
    });
  };
}
