import { GatewayError, type JsonRpcErrorObject } from '../errors.js';
import type { ResultBytes } from '../jsonrpc/result-bytes.js';
import { OVER_BUDGET } from './policies/budget.js';
import type { Attempt, CallOutcome, Execution, RoutedUpstream } from './policies/types.js';

/** How a forwarded call ended, as the call executor sees it. */
export type ForwardOutcome =
  /** `resultBytes`: the result JSON as the upstream sent it; `result`: parsed, for checked methods only. */
  | { kind: 'result'; resultBytes: ResultBytes; result?: unknown; upstream: string; attempts: Attempt[] }
  | { kind: 'rpc-error'; error: JsonRpcErrorObject; upstream: string; attempts: Attempt[] }
  | { kind: 'failed'; error: GatewayError; attempts: Attempt[] };

export type FailedCode = 'TG_ERR_NO_HEALTHY_UPSTREAM' | 'TG_ERR_UPSTREAMS_FAILED' | 'TG_ERR_UPSTREAMS_TIMED_OUT';

export function failed(code: FailedCode, attempts: Attempt[]): ForwardOutcome {
  return { kind: 'failed', error: new GatewayError(code, undefined, { attempts }), attempts };
}

/** A call answered by the gateway itself without any upstream call (a filter id that is not this key's, say). */
export function rejected(error: GatewayError): ForwardOutcome {
  return { kind: 'failed', error, attempts: [] };
}

/**
 * A call's outcome with the attempts it made. When every attempt failed, the status class tells
 * the HTTP status: 503 if no upstream could be tried at all, 429 if every upstream was at its
 * rate limit, 504 if the deadline ran out or every attempt timed out, otherwise 502.
 */
export function forwardOutcomeOf(outcome: CallOutcome, execution: Execution, candidates: readonly RoutedUpstream[], now: number): ForwardOutcome {
  const { attempts } = execution;
  if (outcome.kind === 'result') return { ...outcome, attempts };
  if (outcome.kind === 'rpc-error') return { ...outcome, attempts };
  if (attempts.length === 0) {
    if (now >= execution.deadline) return failed('TG_ERR_UPSTREAMS_TIMED_OUT', attempts);
    return failed('TG_ERR_NO_HEALTHY_UPSTREAM', candidates.map((upstream) => ({ upstream: upstream.id, reason: 'circuit_open' })));
  }
  if (attempts.every((attempt) => attempt.reason === OVER_BUDGET)) {
    // Every upstream is at its rate limit for longer than the call could wait: the client's own
    // 429, uncharged; rate-limit windows are one second long, so a second from now there is room.
    return { kind: 'failed', error: new GatewayError('TG_ERR_UPSTREAM_BUDGET', undefined, { reason: 'upstream_budget', attempts }, { 'retry-after': '1' }), attempts };
  }
  const timedOut = now >= execution.deadline || attempts.every((attempt) => attempt.reason === 'timeout');
  return failed(timedOut ? 'TG_ERR_UPSTREAMS_TIMED_OUT' : 'TG_ERR_UPSTREAMS_FAILED', attempts);
}
