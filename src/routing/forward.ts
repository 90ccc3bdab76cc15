import type { NetworkConfig } from '../config/schema.js';
import { GatewayError, type JsonRpcErrorObject } from '../errors.js';
import { resultCheckOf, upstreamParams, type PreparedCall } from '../methods/registry.js';
import { Upstream, type AttemptOutcome } from './upstream.js';

/**
 * Failover across a network's upstreams within one request deadline (DESIGN §2, §5). Upstreams
 * whose circuit is open are skipped; the rest are tried in order of health (last attempt
 * succeeded first), then latency. When every attempt fails the caller gets a `-32603` with the
 * attempts, and the status class tells the HTTP status: 503 if no upstream could be tried at all,
 * 504 if the deadline ran out or every attempt timed out, otherwise 502.
 */

export interface Attempt {
  upstream: string;
  reason: string;
}

export type ForwardOutcome =
  /** `resultBytes`: the result JSON as the upstream sent it; `result`: parsed, for checked methods only. */
  | { kind: 'result'; resultBytes: Buffer; result?: unknown; upstream: string; attempts: Attempt[] }
  | { kind: 'rpc-error'; error: JsonRpcErrorObject; upstream: string; attempts: Attempt[] }
  | { kind: 'failed'; error: GatewayError; attempts: Attempt[] };

export interface AttemptObserver {
  (network: string, upstream: string, outcome: AttemptOutcome): void;
}

export interface Forwarder {
  readonly upstreams: readonly Upstream[];
  forward(call: PreparedCall, deadline: number): Promise<ForwardOutcome>;
  /** True while at least one upstream's circuit is closed (used by readiness). */
  hasHealthyUpstream(): boolean;
  close(): Promise<void>;
}

export function createForwarder(
  network: NetworkConfig,
  options: { observe?: AttemptObserver; now?: () => number } = {},
): Forwarder {
  const now = options.now ?? Date.now;
  const upstreams = network.upstreams.map((config) => new Upstream(config, network.circuitBreaker, now));
  const observe = options.observe;

  function order(): Upstream[] {
    return upstreams
      .filter((upstream) => upstream.isAvailable())
      .sort((a, b) => Number(a.lastAttemptFailed) - Number(b.lastAttemptFailed) || a.latencyMs - b.latencyMs);
  }

  return {
    upstreams,
    hasHealthyUpstream: () => upstreams.some((upstream) => upstream.isHealthy()),
    close: async () => {
      await Promise.all(upstreams.map((upstream) => upstream.close()));
    },
    async forward(call, deadline) {
      const attempts: Attempt[] = [];
      const candidates = order();
      if (candidates.length === 0) {
        for (const upstream of upstreams) attempts.push({ upstream: upstream.id, reason: 'circuit_open' });
        return failed('TG_ERR_NO_HEALTHY_UPSTREAM', attempts);
      }
      const check = resultCheckOf(call);
      let deadlineReached = false;
      let allTimedOut = true;
      for (const upstream of candidates) {
        const remaining = deadline - now();
        if (remaining <= 0) {
          deadlineReached = true;
          break;
        }
        if (!upstream.admit()) continue; // another request holds its half-open trial
        const outcome = await upstream.call(
          call.method,
          upstreamParams(call, upstream.config),
          Math.min(upstream.config.timeoutMs, remaining),
          check,
        );
        observe?.(network.id, upstream.id, outcome);
        if (outcome.kind === 'result') {
          return { kind: 'result', resultBytes: outcome.resultBytes, result: outcome.result, upstream: upstream.id, attempts };
        }
        if (outcome.kind === 'rpc-error') return { kind: 'rpc-error', error: outcome.error, upstream: upstream.id, attempts };
        attempts.push({ upstream: upstream.id, reason: outcome.reason });
        if (!outcome.timedOut) allTimedOut = false;
      }
      if (attempts.length === 0 && !deadlineReached) {
        for (const upstream of candidates) attempts.push({ upstream: upstream.id, reason: 'circuit_open' });
        return failed('TG_ERR_NO_HEALTHY_UPSTREAM', attempts);
      }
      return failed(deadlineReached || allTimedOut ? 'TG_ERR_UPSTREAMS_TIMED_OUT' : 'TG_ERR_UPSTREAMS_FAILED', attempts);
    },
  };
}

function failed(code: 'TG_ERR_NO_HEALTHY_UPSTREAM' | 'TG_ERR_UPSTREAMS_FAILED' | 'TG_ERR_UPSTREAMS_TIMED_OUT', attempts: Attempt[]): ForwardOutcome {
  return { kind: 'failed', error: new GatewayError(code, undefined, { attempts }), attempts };
}
