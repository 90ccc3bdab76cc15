import { GatewayError } from '../errors.js';
import { upstreamParams, type PreparedCall } from '../methods/registry.js';
import { failed, forwardOutcomeOf, rejected, type ForwardOutcome } from './call-outcome.js';
import type { RequestTrace } from './call-trace.js';
import type { ProviderSpend } from './upstream-price.js';
import type { FilterIds, FilterScope } from './filter-ids.js';
import { failoverPolicy } from './policies/failover.js';
import { attemptEachCandidate, NEVER_ABORTED, type AttemptPolicy } from './policies/types.js';
import type { StatefulRouteDeps } from './stateful-deps.js';
import { contiguous } from '../jsonrpc/result-bytes.js';

/**
 * Filters live on the node that created them (docs/routing.md#filters):
 * - `eth_newFilter`, `eth_newBlockFilter`, `eth_newPendingTransactionFilter` are tried on the
 *   candidates in order, with failover but never hedged (a hedge would leave a second filter
 *   behind on another node); the upstream's filter id is handed out wrapped in a
 *   {@link FilterIds} id bound to the key and naming that upstream;
 * - `eth_getFilterChanges`, `eth_getFilterLogs`, `eth_uninstallFilter` unwrap it and make one
 *   attempt on exactly that upstream: no hedge, no failover (another node does not know the
 *   filter). An id that is not this key's, altered, malformed, or names an upstream no longer in
 *   the network's config is `-32000 filter not found` without any upstream call (uncharged).
 */

export const FILTER_CREATING_METHODS: ReadonlySet<string> = new Set(['eth_newFilter', 'eth_newBlockFilter', 'eth_newPendingTransactionFilter']);
export const FILTER_PINNED_METHODS: ReadonlySet<string> = new Set(['eth_getFilterChanges', 'eth_getFilterLogs', 'eth_uninstallFilter']);

/** Reason of a creation attempt whose result is not a filter id the gateway can carry. */
export const INVALID_FILTER_ID = 'invalid_filter_id';

export interface FilterCalls {
  /** The outcome of a filter call, or undefined for any other method. */
  route(prepared: PreparedCall, deadline: number, caller: { keyId: string; trace?: RequestTrace | undefined; spend?: ProviderSpend | undefined }): Promise<ForwardOutcome> | undefined;
  /**
   * The criteria (`eth_newFilter`'s filter object) of a log filter this process created for this
   * key, or undefined when it does not know them (another replica made it, a restart, or more
   * than {@link MAX_REMEMBERED_CRITERIA} filters since). An `eth_getFilterLogs` that the filter's
   * node declines as too large is answered with them by the logs splitter.
   */
  criteriaOf(keyId: string, filterId: unknown): unknown;
}

/** Log filters whose criteria are remembered; the oldest are forgotten past this. */
export const MAX_REMEMBERED_CRITERIA = 10_000;

export function createFilterCalls(deps: StatefulRouteDeps, filterIds: FilterIds): FilterCalls {
  const { clock, upstreams } = deps;
  const byId = new Map(upstreams.map((upstream) => [upstream.id, upstream]));
  /** Client filter id (bound to its key by its MAC) → the `eth_newFilter` criteria, oldest first. */
  const criteria = new Map<string, unknown>();

  function remember(outcome: ForwardOutcome, prepared: PreparedCall): void {
    if (outcome.kind !== 'result' || prepared.method !== 'eth_newFilter') return;
    const params = upstreamParams(prepared, upstreams[0]!.config);
    const id = parseString(contiguous(outcome.resultBytes));
    if (id === undefined || !Array.isArray(params)) return;
    if (criteria.size >= MAX_REMEMBERED_CRITERIA) criteria.delete(criteria.keys().next().value!);
    criteria.set(id, params[0]);
  }

  /** Wraps an upstream's filter id into the client's id; an answer that is not a filter id is an upstream fault. */
  const wrapping =
    (scope: FilterScope): AttemptPolicy =>
    (next) =>
    async (upstream, execution, signal) => {
      const outcome = await next(upstream, execution, signal);
      if (outcome.kind !== 'result') return outcome;
      const own = parseString(contiguous(outcome.resultBytes));
      const id = own === undefined ? undefined : filterIds.encode(scope, byId.get(upstream.id)!, own);
      if (id === undefined) return { kind: 'failure', reason: INVALID_FILTER_ID, timedOut: false, durationMs: outcome.durationMs };
      return { kind: 'result', resultBytes: Buffer.from(JSON.stringify(id)), durationMs: outcome.durationMs };
    };

  async function create(prepared: PreparedCall, deadline: number, scope: FilterScope, trace: RequestTrace | undefined, spend: ProviderSpend | undefined): Promise<ForwardOutcome> {
    const candidates = [...deps.candidatesFor(prepared)];
    if (candidates.length === 0) return failed('TG_ERR_NO_HEALTHY_UPSTREAM', upstreams.map((upstream) => ({ upstream: upstream.id, reason: 'circuit_open' })));
    const execution = deps.executionFor(prepared, deadline, candidates, trace, spend);
    const call = failoverPolicy(clock)(attemptEachCandidate(wrapping(scope)(deps.attempt)));
    const outcome = forwardOutcomeOf(await call(execution, NEVER_ABORTED), execution, candidates, clock.now());
    remember(outcome, prepared);
    return outcome;
  }

  async function pinned(prepared: PreparedCall, deadline: number, scope: FilterScope, trace: RequestTrace | undefined, spend: ProviderSpend | undefined): Promise<ForwardOutcome> {
    const params = upstreamParams(prepared, upstreams[0]!.config);
    if (!Array.isArray(params) || typeof params[0] !== 'string') {
      return rejected(new GatewayError('TG_ERR_INVALID_PARAMS', 'invalid argument 0: expected a filter id (a hex string)'));
    }
    const pin = filterIds.decode(scope, params[0], upstreams);
    if (pin === undefined) return rejected(new GatewayError('TG_ERR_FILTER_NOT_FOUND'));
    const base = deps.executionFor(prepared, deadline, [pin.upstream], trace, spend);
    const execution = { ...base, paramsFor: () => [pin.upstreamFilterId, ...params.slice(1)] };
    const outcome = await attemptEachCandidate(deps.attempt)(execution, NEVER_ABORTED);
    if (prepared.method === 'eth_uninstallFilter' && outcome.kind === 'result') criteria.delete(params[0]);
    return forwardOutcomeOf(outcome, execution, [pin.upstream], clock.now());
  }

  return {
    route(prepared, deadline, caller) {
      const scope = { network: deps.network.id, keyId: caller.keyId };
      if (FILTER_CREATING_METHODS.has(prepared.method)) return create(prepared, deadline, scope, caller.trace, caller.spend);
      if (FILTER_PINNED_METHODS.has(prepared.method)) return pinned(prepared, deadline, scope, caller.trace, caller.spend);
      return undefined;
    },
    criteriaOf(keyId, filterId) {
      if (typeof filterId !== 'string' || filterIds.decode({ network: deps.network.id, keyId }, filterId, upstreams) === undefined) return undefined;
      return criteria.get(filterId);
    },
  };
}

function parseString(bytes: Buffer): string | undefined {
  // A filter id is a short JSON string; anything else (an object, a huge answer) is not one.
  if (bytes.length > 600 || bytes[0] !== 0x22 /* " */) return undefined;
  try {
    const value: unknown = JSON.parse(bytes.toString('utf8'));
    return typeof value === 'string' ? value : undefined;
  } catch {
    return undefined;
  }
}
