import type { JsonRpcErrorObject } from '../../errors.js';
import type { ResultBytes } from '../../jsonrpc/result-bytes.js';
import type { RequestTrace } from '../call-trace.js';
import type { ProviderSpend } from '../upstream-price.js';
import type { AttemptOutcome, RoutedUpstream } from '../upstream.js';
import type { CallSignal } from '../abort-signals.js';

export { childController, NEVER_ABORTED, type CallSignal } from '../abort-signals.js';

/**
 * The failsafe chain (docs/routing.md): small policies around one function, each testable
 * alone with a scripted `next` and a manual clock. Two levels:
 *   - an {@link AttemptFn} makes one attempt against a given upstream; attempt policies wrap it
 *     (timeout, circuit breaker, result check);
 *   - a {@link CallFn} answers the whole call from the candidates of one {@link Execution}; call
 *     policies wrap it (failover, hedge, null confirmation).
 * {@link attemptEachCandidate} turns the first into the second.
 */

export type { AttemptOutcome, RoutedUpstream };

/** A failed attempt, as listed in logs and in the `-32603` error's `data.attempts`. */
export interface Attempt {
  upstream: string;
  reason: string;
  detail?: string;
}

export function attemptOf(upstream: RoutedUpstream, failure: Extract<AttemptOutcome, { kind: 'failure' }>): Attempt {
  return failure.detail === undefined ? { upstream: upstream.id, reason: failure.reason } : { upstream: upstream.id, reason: failure.reason, detail: failure.detail };
}

/** Why a parsed result cannot be the answer (an upstream fault), or undefined when it can. */
export type ResultCheck = (result: unknown) => Promise<string | undefined> | string | undefined;

/** The state one call shares between its policies. */
export interface Execution {
  readonly method: string;
  /** The params to send to one upstream (forms differ per upstream for DAS methods). */
  paramsFor(upstream: RoutedUpstream): unknown;
  /** Present for methods whose results are inspected before they are believed (blocks). */
  readonly check: ResultCheck | undefined;
  /** Absolute time (clock ms) by which the whole call must be answered. */
  readonly deadline: number;
  /** Failed attempts in the order they ended. */
  readonly attempts: Attempt[];
  /** Upstreams with an attempt of this call under way (a hedge marks them slow). */
  readonly running: Set<RoutedUpstream>;
  /** Takes the next upstream this call has not tried yet, best first. */
  takeCandidate(): RoutedUpstream | undefined;
  peekCandidate(): RoutedUpstream | undefined;
  /**
   * Puts an upstream back at the end of the candidates, once per call: one without rate-limit
   * budget now is tried again after the others (waiting for a permit if it is then the last).
   * False when it was deferred before (or the execution does not defer).
   */
  defer?(upstream: RoutedUpstream): boolean;
  /** Every other upstream of the network that is not refusing attempts (for confirmations). */
  othersThan(upstreamId: string): RoutedUpstream[];
  /** The request's trace when it is traced: each attempt becomes a span (policies/traced.ts). */
  readonly trace: RequestTrace | undefined;
  /** Attempts started so far, counted for the trace only. */
  attemptsStarted: number;
  /** What the call cost at the providers so far, when its network has priced upstreams. */
  readonly spend?: ProviderSpend | undefined;
  /** Extra headers of this attempt's upstream request (the trace's `traceparent`), if any. */
  readonly upstreamHeaders?: Readonly<Record<string, string>>;
  /**
   * Upstream errors failover looked past (a pruned node's "missing trie node"), in order: when
   * every attempt ended that way, the first is the call's answer rather than a gateway error.
   */
  readonly passedOverErrors?: Array<{ upstream: string; error: JsonRpcErrorObject }>;
}

export type AttemptFn = (upstream: RoutedUpstream, execution: Execution, signal: CallSignal) => Promise<AttemptOutcome>;
export type AttemptPolicy = (next: AttemptFn) => AttemptFn;

export type CallOutcome =
  | { kind: 'result'; resultBytes: ResultBytes; result?: unknown; upstream: string }
  | { kind: 'rpc-error'; error: JsonRpcErrorObject; upstream: string }
  /** Every attempt failed (listed in the execution), or none could be made. */
  | { kind: 'failed' };

export type CallFn = (execution: Execution, signal: CallSignal) => Promise<CallOutcome>;
export type CallPolicy = (next: CallFn) => CallFn;

/** Applies policies outermost first: `chain(a, b)(fn)` is `a(b(fn))`. */
export function chain<F>(...policies: Array<(next: F) => F>): (fn: F) => F {
  return (fn) => policies.reduceRight((next, policy) => policy(next), fn);
}

/**
 * The bridge from attempts to calls: takes the next candidate and makes one attempt on it. A
 * failure is recorded in the execution's attempts (a cancelled attempt is not: it did not fail,
 * another answer won); `failed` without a candidate means there was nobody left to ask.
 */
export function attemptEachCandidate(attempt: AttemptFn): CallFn {
  return async (execution, signal) => {
    const upstream = execution.takeCandidate();
    if (upstream === undefined) return FAILED;
    execution.running.add(upstream);
    let outcome: AttemptOutcome;
    try {
      outcome = await attempt(upstream, execution, signal);
    } finally {
      execution.running.delete(upstream);
    }
    if (outcome.kind === 'result') return { kind: 'result', resultBytes: outcome.resultBytes, result: outcome.result, upstream: upstream.id };
    if (outcome.kind === 'rpc-error') return { kind: 'rpc-error', error: outcome.error, upstream: upstream.id };
    if (isListedFailure(outcome)) execution.attempts.push(attemptOf(upstream, outcome));
    return FAILED;
  };
}

export const FAILED: CallOutcome = Object.freeze({ kind: 'failed' });

/** Reason of an attempt that was never made (another call holds the upstream's half-open trial). */
export const SKIPPED = 'skipped';

/** Failures that say nothing against an upstream and are not listed: never made, or cancelled. */
export function isListedFailure(outcome: AttemptOutcome): outcome is Extract<AttemptOutcome, { kind: 'failure' }> {
  return outcome.kind === 'failure' && outcome.reason !== 'cancelled' && outcome.reason !== SKIPPED;
}

export function isNullResult(resultBytes: ResultBytes): boolean {
  return Buffer.isBuffer(resultBytes) && resultBytes.length === 4 && resultBytes.toString('latin1') === 'null';
}
