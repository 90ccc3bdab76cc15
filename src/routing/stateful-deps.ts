import type { NetworkConfig } from '../config/schema.js';
import type { PreparedCall } from '../methods/registry.js';
import type { Clock } from './clock.js';
import type { RequestTrace } from './call-trace.js';
import type { AttemptFn, Execution, RoutedUpstream } from './policies/types.js';
import type { ProviderSpend } from './upstream-price.js';
import type { Upstream } from './upstream.js';

/**
 * What the routes of stateful methods (filters pinned to their upstream, transactions) take from
 * their network's forwarder: they build their own call from its attempt chain instead of going
 * through hedge and failover.
 */
export interface StatefulRouteDeps {
  network: NetworkConfig;
  upstreams: readonly Upstream[];
  /** One attempt on one upstream: circuit breaker, metrics, result check, timeout. */
  attempt: AttemptFn;
  clock: Clock;
  /** The upstreams to try for `prepared`, best first: the selector's order without those that do not serve its method. */
  candidatesFor(prepared: PreparedCall): readonly RoutedUpstream[];
  /**
   * A fresh execution of `prepared` over `candidates`, in that order (its attempts spans of
   * `trace`, when traced; their provider units added to `spend`, when given).
   */
  executionFor(prepared: PreparedCall, deadline: number, candidates: RoutedUpstream[], trace?: RequestTrace, spend?: ProviderSpend): Execution;
}
