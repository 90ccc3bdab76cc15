import { resultCheckOf, upstreamParams, type PreparedCall } from '../methods/registry.js';
import type { ArchiveDepth } from './archive-depth.js';
import type { RequestTrace } from './call-trace.js';
import type { Execution } from './policies/types.js';
import type { ProviderSpend } from './upstream-price.js';
import type { RoutedUpstream, Upstream } from './upstream.js';

/**
 * The state one call shares between the failsafe policies (policies/types.ts `Execution`): its
 * candidates in order (with the upstreams skipped for want of rate-limit budget put back after
 * the others), the params per upstream, and what its attempts cost.
 */

/**
 * The one place where an upstream's `methods.deny` takes effect: the candidates of a call (and so
 * its failover and hedges) and the upstreams asked to confirm a `null` are those that serve it.
 */
export function servingOnly<U extends RoutedUpstream>(upstreams: readonly U[], servedBy: ReadonlySet<string> | undefined): readonly U[] {
  return servedBy === undefined ? upstreams : upstreams.filter((upstream) => servedBy.has(upstream.id));
}

/** The params a call names its block in (pass-through calls), for the archive depth filter. */
export function paramsOf(prepared: PreparedCall): unknown {
  return prepared.kind === 'pass-through' ? prepared.params : undefined;
}

export function createExecution(
  prepared: PreparedCall,
  deadline: number,
  candidates: readonly RoutedUpstream[],
  byId: ReadonlyMap<string, Upstream>,
  archive: ArchiveDepth,
  trace: RequestTrace | undefined,
  spend?: ProviderSpend,
): Execution {
  let next = 0;
  const all = servingOnly([...byId.values()], prepared.servedBy);
  // Upstreams skipped for want of rate-limit budget come back after the others (policies/budget.ts).
  const deferred: RoutedUpstream[] = [];
  const everDeferred = new Set<RoutedUpstream>();
  return {
    method: prepared.method,
    trace,
    spend,
    attemptsStarted: 0,
    deadline,
    attempts: [],
    running: new Set(),
    check: resultCheckOf(prepared),
    paramsFor: (upstream) => upstreamParams(prepared, byId.get(upstream.id)!.config),
    takeCandidate: () => (next < candidates.length ? candidates[next++] : deferred.shift()),
    peekCandidate: () => (next < candidates.length ? candidates[next] : deferred[0]),
    defer(upstream) {
      if (everDeferred.has(upstream)) return false;
      everDeferred.add(upstream);
      deferred.push(upstream);
      return true;
    },
    // Confirmations, like candidates, leave out upstreams that do not keep state at the call's block.
    othersThan: (upstreamId) => archive.keeping(all, prepared.method, paramsOf(prepared)).filter((upstream) => upstream.id !== upstreamId && upstream.health.isAvailable()),
    passedOverErrors: [],
  };
}

/**
 * The execution of one call made on the gateway's own behalf (a health probe, a transaction
 * lookup): no candidates, no check, its own deadline, the same params for every upstream.
 */
export function probeExecution(method: string, deadline: number, params: unknown[] = []): Execution {
  return {
    method,
    deadline,
    trace: undefined,
    attemptsStarted: 0,
    attempts: [],
    running: new Set(),
    check: undefined,
    paramsFor: () => params,
    takeCandidate: () => undefined,
    peekCandidate: () => undefined,
    othersThan: () => [],
  };
}
