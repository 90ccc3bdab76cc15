import type { NetworkConfig } from '../config/schema.js';
import type { PreparedCall } from '../methods/registry.js';
import type { Clock } from './clock.js';
import type { AttemptFn, Execution, RoutedUpstream } from './policies/types.js';
import type { Selector } from './selection.js';
import type { Upstream } from './upstream.js';

/**
 * What the routes of stateful methods (filters pinned to their upstream, transactions) take from
 * their network's forwarder: they build their own call from its attempt chain instead of going
 * through hedge and failover.
 */
export interface StatefulRouteDeps {
  network: NetworkConfig;
  upstreams: readonly Upstream[];
  selector: Selector;
  /** One attempt on one upstream: circuit breaker, metrics, result check, timeout. */
  attempt: AttemptFn;
  clock: Clock;
  /** A fresh execution of `prepared` over `candidates`, in that order. */
  executionFor(prepared: PreparedCall, deadline: number, candidates: RoutedUpstream[]): Execution;
}
