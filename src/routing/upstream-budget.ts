import type { UpstreamPermits } from '../store/types.js';
import type { Clock } from './clock.js';
import type { CallSignal } from './abort-signals.js';

/**
 * An upstream's request budget: at most `limit` calls in any one-second window (a sliding window,
 * not a token bucket: a provider that counts per second must never see more, whichever second it
 * looks at), counted over a little more than a second so that delays on the way do not push
 * calls into the provider's same second ({@link BUDGET_JITTER_MARGIN_MS}). The limit is the declared `rateLimit.requestsPerSecond`, lowered at once when the
 * provider says "rate limited" and recovering step by step (auto-tune, docs/budgets.md):
 *
 *   - on a rate-limited answer the limit becomes 90% of the calls this process sent it in the
 *     last second (or of the current limit, if lower); answers to calls sent before the cut
 *     (the next second's) do not cut again;
 *   - every further second without one it grows by 2% (at least one call), until it is back at
 *     the declared limit; an upstream without a declared limit is unlimited again once its
 *     learned limit has doubled without a rate-limited answer. Slowly, because each step past the
 *     provider's real limit costs a rate-limited answer: at 2% a limiter at 40 calls a second is
 *     probed about once every five seconds.
 *
 * With {@link UpstreamPermits} (a Redis store) every permit is also taken from a window all
 * replicas share, so the limit holds for the whole fleet; this process's own window is checked
 * first, since a replica alone past the limit need not ask.
 */

export const BUDGET_WINDOW_MS = 1_000;
/**
 * Permits are counted over a window this much longer than a second. A provider counts calls as
 * they arrive, some time after their permits: calls whose delays on the way differ by up to this
 * much still never exceed the limit in any second of arrivals. The price is a limit used to
 * 1000 / 1100 ≈ 91% at most.
 */
export const BUDGET_JITTER_MARGIN_MS = 100;
/** The window permits are counted over. */
export const BUDGET_COUNTED_MS = BUDGET_WINDOW_MS + BUDGET_JITTER_MARGIN_MS;
/**
 * Permits are also spread over the window: at most a fifth of the limit (rounded up) in any tenth
 * of it. A whole second's permits taken in one burst would reach the provider as one burst, and a
 * burst that some of the calls' delays spread while others arrive promptly lands partly in the
 * provider's next second: spread calls keep a delay from adding up to more than a few calls. A
 * fifth rather than a tenth: bursts of twice the average rate are let through, so calls that
 * arrive in clumps can still use the whole limit.
 */
export const BUDGET_SLICE_MS = BUDGET_WINDOW_MS / 10;
const SLICE_SHARE = 1 / 5;
const CUT_TO = 0.9;
const RECOVERY_PER_SECOND = 0.02;

export interface BudgetOptions {
  /** The declared limit (`rateLimit.requestsPerSecond`), or undefined for none. */
  requestsPerSecond: number | undefined;
  /** The scope of this upstream's shared window: the network and the upstream id. */
  scope: string;
  shared?: UpstreamPermits | undefined;
  /** Told when the shared window could not be asked (the store is down): this process's window still holds. */
  onSharedError?: (error: unknown) => void;
}

interface Waiter {
  latestStart: number;
  done(result: 'taken' | 'too-late' | 'aborted'): void;
}

export class UpstreamBudget {
  /** Send times within the last window, oldest first, from `oldest`. */
  private sent: number[] = [];
  private oldest = 0;
  private learned: number | undefined;
  private readonly waiters: Waiter[] = [];
  private serving = false;
  private cutAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly options: BudgetOptions,
    private readonly clock: Clock,
  ) {}

  /** The limit now (declared, or auto-tuned below it), or undefined when there is none. */
  limit(): number | undefined {
    const declared = this.options.requestsPerSecond;
    const learned = this.learned;
    if (learned === undefined) return declared;
    const seconds = Math.floor((this.clock.now() - this.cutAt) / BUDGET_WINDOW_MS);
    const recovered = learned + seconds * Math.max(1, Math.ceil(learned * RECOVERY_PER_SECOND));
    if (declared !== undefined ? recovered >= declared : recovered >= 2 * learned) {
      this.learned = undefined;
      return declared;
    }
    return recovered;
  }

  /** True when this process's window has room now (the shared window may still say no). */
  hasRoom(): boolean {
    const limit = this.limit();
    return limit === undefined || this.countInWindow(this.clock.now()) < limit;
  }

  /**
   * Takes a permit: 0 when taken, otherwise the ms until one may free. Answered at once unless
   * the shared window must be asked: most attempts (unlimited upstreams, a full local window,
   * SQLite) cost no promise.
   */
  take(): number | Promise<number> {
    const limit = this.limit();
    if (limit === undefined) {
      // Unlimited, but counted: a first rate-limited answer is cut from what was sent.
      this.record(this.clock.now());
      return 0;
    }
    const now = this.clock.now();
    if (this.countInWindow(now) >= limit) return Math.max(1, this.sent[this.oldest]! + BUDGET_COUNTED_MS - now);
    const inSlice = this.countInSlice(now, sliceLimitOf(limit));
    if (inSlice !== undefined) return Math.max(1, inSlice + BUDGET_SLICE_MS - now);
    if (this.options.shared !== undefined) return this.takeShared(this.options.shared, limit);
    this.record(now);
    return 0;
  }

  private async takeShared(shared: UpstreamPermits, limit: number): Promise<number> {
    try {
      const wait = await shared.takeUpstreamPermit(this.options.scope, limit, BUDGET_COUNTED_MS, BUDGET_SLICE_MS, sliceLimitOf(limit));
      if (wait > 0) return wait;
    } catch (error) {
      this.options.onSharedError?.(error);
    }
    this.record(this.clock.now());
    return 0;
  }

  /**
   * Waits in line for a permit: callers that must wait are served one at a time, in order, by one
   * timer, rather than all waking when a permit frees and all asking (the shared window too) at
   * once. 'too-late' when no permit came by `latestStart` (clock ms), 'aborted' when `signal` did.
   */
  waitForPermit(latestStart: number, signal: CallSignal): Promise<'taken' | 'too-late' | 'aborted'> {
    if (signal.aborted) return Promise.resolve('aborted');
    return new Promise((resolve) => {
      const waiter: Waiter = {
        latestStart,
        done: (result) => {
          stopListening();
          resolve(result);
        },
      };
      const onAbort = () => {
        const index = this.waiters.indexOf(waiter);
        if (index >= 0) this.waiters.splice(index, 1);
        waiter.done('aborted');
      };
      const stopListening = signal.listen(onAbort);
      this.waiters.push(waiter);
      if (!this.serving) void this.serveWaiters();
    });
  }

  private async serveWaiters(): Promise<void> {
    this.serving = true;
    try {
      while (this.waiters.length > 0) {
        // Whoever can no longer start in time leaves the line, wherever it stands.
        const now = this.clock.now();
        for (const late of this.waiters.filter((waiter) => now >= waiter.latestStart)) {
          this.waiters.splice(this.waiters.indexOf(late), 1);
          late.done('too-late');
        }
        if (this.waiters.length === 0) break;
        const wait = await this.take();
        if (wait === 0) {
          // The first in line may have left (aborted) while the permit was asked for: the next one takes it.
          this.waiters.shift()?.done('taken');
          continue;
        }
        const soonest = Math.min(...this.waiters.map((waiter) => waiter.latestStart));
        await new Promise<void>((resolve) => this.clock.setTimer(Math.max(1, Math.min(wait, soonest - this.clock.now())), resolve));
      }
    } finally {
      this.serving = false;
    }
  }

  /**
   * The provider said "rate limited": cut the limit now (once per window), unless this process
   * sent it less than half its limit in the last second. Then the answer is not about our rate
   * (the provider is overloaded, or its circuit here is open and only trials get through), and
   * cutting from a trickle would leave the limit at a few calls a second once it recovers.
   */
  rateLimited(): void {
    const now = this.clock.now();
    if (now - this.cutAt < BUDGET_WINDOW_MS) return;
    const current = this.limit() ?? Number.POSITIVE_INFINITY;
    const sentLastSecond = this.countInWindow(now);
    if (Number.isFinite(current) && sentLastSecond < current / 2) return;
    this.learned = Math.max(1, Math.floor(Math.min(current, sentLastSecond) * CUT_TO));
    this.cutAt = now;
  }

  private record(now: number): void {
    this.countInWindow(now);
    this.sent.push(now);
  }

  /**
   * The oldest send time within the last slice when `sliceLimit` sends are already in it (the
   * slice is full), else undefined.
   */
  private countInSlice(now: number, sliceLimit: number): number | undefined {
    const sent = this.sent;
    const index = sent.length - sliceLimit;
    if (index < this.oldest) return undefined;
    const oldestOfLast = sent[index]!;
    return oldestOfLast > now - BUDGET_SLICE_MS ? oldestOfLast : undefined;
  }

  private countInWindow(now: number): number {
    const sent = this.sent;
    while (this.oldest < sent.length && sent[this.oldest]! <= now - BUDGET_COUNTED_MS) this.oldest += 1;
    // Drop what has left the window once it is most of the array, so it does not grow.
    if (this.oldest > 1_024 && this.oldest * 2 > sent.length) {
      this.sent = sent.slice(this.oldest);
      this.oldest = 0;
    }
    return this.sent.length - this.oldest;
  }
}

/** Permits allowed in one slice of the window. */
export function sliceLimitOf(limit: number): number {
  return Math.ceil(limit * SLICE_SHARE);
}
