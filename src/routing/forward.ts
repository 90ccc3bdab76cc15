import { randomBytes } from 'node:crypto';
import type { NetworkConfig } from '../config/schema.js';
import type { PreparedCall } from '../methods/registry.js';
import { createArchiveDepth } from './archive-depth.js';
import { failed, forwardOutcomeOf, type ForwardOutcome } from './call-outcome.js';
import { clockFrom, type Clock } from './clock.js';
import { createExecution, paramsOf, probeExecution, servingOnly } from './executions.js';
import { createFilterCalls } from './filter-calls.js';
import { createFilterIds, type FilterIds } from './filter-ids.js';
import { startHealthProber, type HealthProber } from './health-prober.js';
import { createFinalityProbe, type BlockHeader, type HeaderFetcher } from './finality-probe.js';
import { budgetPolicy } from './policies/budget.js';
import { circuitBreakerPolicy } from './policies/circuit-breaker.js';
import { failoverPolicy } from './policies/failover.js';
import { hedgePolicy, type HedgeResult } from './policies/hedge.js';
import { LOGS_TOO_LARGE, logsTooLargePolicy } from './policies/logs-too-large.js';
import { nullConfirmationPolicy, type NullConfirmation } from './policies/null-confirmation.js';
import { PRUNED_STATE, prunedStatePolicy } from './policies/pruned-state.js';
import { resultCheckPolicy } from './policies/result-check.js';
import { timeoutPolicy } from './policies/timeout.js';
import { tracedPolicy } from './policies/traced.js';
import type { RequestTrace } from './call-trace.js';
import { attemptEachCandidate, chain, NEVER_ABORTED, type Attempt, type AttemptFn, type AttemptPolicy, type CallPolicy, type Execution } from './policies/types.js';
import { createSelector, type Selector } from './selection.js';
import { createTransactionCalls } from './transactions.js';
import type { UpstreamPermits } from '../store/types.js';
import { UpstreamBudget } from './upstream-budget.js';
import { upstreamPriceOf, usdOf, type ProviderSpend, type UpstreamPrice } from './upstream-price.js';
import { Upstream, upstreamScope, type AttemptOutcome, type RoutedUpstream } from './upstream.js';

/**
 * A network's upstreams behind the failsafe chain (docs/routing.md):
 *
 *   null confirmation → hedge → failover → [each candidate] → budget → circuit breaker → trace → observe → logs too large → pruned state → result check → timeout → send
 *
 * Candidates come from the selector (circuit, head lag, latency and errors), less the upstreams
 * that do not keep state at the block a state read names (archive-depth.ts); the health prober
 * keeps what the selector reads fresh. When every attempt fails the caller gets a `-32603` with
 * the attempts, and its status class tells the HTTP status: 503 if no upstream could be tried at
 * all, 504 if the deadline ran out or every attempt timed out, otherwise 502.
 * Stateful methods take their own routes over the same attempt chain: filter calls pinned to the
 * upstream that created the filter (filter-calls.ts), transaction sends (transactions.ts).
 */

export type { Attempt, ForwardOutcome };

/**
 * Who makes a call: filter ids are bound to the API key; a traced request's attempts become spans
 * of its trace; with `spend`, what its attempts cost at priced upstreams is added there.
 */
export interface Caller {
  keyId: string;
  trace?: RequestTrace | undefined;
  spend?: ProviderSpend | undefined;
}

export interface ForwarderObserver {
  /** Every attempt made against an upstream (probes excluded). */
  attempt?(network: string, upstream: string, outcome: AttemptOutcome): void;
  probe?(network: string, upstream: string, outcome: AttemptOutcome): void;
  hedge?(network: string, result: HedgeResult): void;
  nullConfirmation?(network: string, result: NullConfirmation): void;
  /** A state read left this upstream out: its block is older than the upstream keeps state for. */
  archiveSkip?(network: string, upstream: string): void;
  /** An attempt not made: the upstream's rate-limit window was full (docs/budgets.md). */
  overBudget?(network: string, upstream: string): void;
  /** A priced upstream received a call: what it costs there (`usd` when the price has money). */
  upstreamSpend?(network: string, upstream: string, method: string, units: number, usdPerMillion: number | undefined): void;
}

export interface Forwarder {
  readonly upstreams: readonly Upstream[];
  readonly selector: Selector;
  /** True when some upstream has a `price`: calls then carry a {@link ProviderSpend}. */
  readonly priced: boolean;
  forward(call: PreparedCall, deadline: number, caller?: Caller): Promise<ForwardOutcome>;
  /** The criteria of a log filter this process created for the caller (filter-calls.ts), or undefined. */
  filterCriteria(caller: Caller, filterId: unknown): unknown;
  /** True while at least one upstream's circuit is closed (used by readiness). */
  hasHealthyUpstream(): boolean;
  /** Probes every upstream now (also runs on the configured interval). */
  probeAll(): Promise<void>;
  /** What the health probes last said of an upstream: its head and finalized block (or slot). */
  finalityOf(upstreamId: string): { head: number | undefined; finalized: number | undefined };
  /** Blocks of state an upstream keeps (its `blockHistory`, or less as learned); undefined: an archive. */
  stateDepthOf(upstreamId: string): number | undefined;
  /**
   * What a call of `method` would have cost upstream (the cheapest priced upstream's units), for
   * answers the cache gave instead; undefined when no upstream of the network has a price.
   */
  savedBy(method: string): { upstream: string; units: number } | undefined;
  close(): Promise<void>;
}

/** Methods that change state: never hedged, since a second copy is not a harmless read. */
const WRITE_METHODS = new Set(['eth_sendRawTransaction', 'eth_sendTransaction', 'eth_sendRawTransactionConditional', 'sendTransaction']);
/** Methods whose `null` is confirmed with the other upstreams before it is believed. */
const NULL_CONFIRMED_METHODS = new Set(['eth_getBlockByHash']);
const DEFAULT_PROBE_METHOD = { evm: 'eth_blockNumber', asset: 'getSlot' } as const;
/** Attempt reason of a block that failed verification. */
const UNVERIFIED = 'unverified_block';

export interface ForwarderOptions {
  observe?: ForwarderObserver;
  now?: () => number;
  clock?: Clock;
  random?: () => number;
  /** The filter ids' codec (its secret shared by every replica); without it, a random secret of this process. */
  filterIds?: FilterIds;
  /** Told each verified finalized header a probe reads (the response cache's canonical chain). */
  onFinalized?: (network: string, upstream: string, header: BlockHeader, fetchHeader: HeaderFetcher) => Promise<void>;
  /** Rate-limit windows every replica shares (a Redis store); without it each process counts alone. */
  sharedPermits?: UpstreamPermits | undefined;
  /** The shared windows could not be asked: this process's own window still holds. */
  onSharedPermitsError?: (error: unknown) => void;
  /**
   * The share of each declared `rateLimit` this process holds (1/N for each of N workers that
   * cannot share windows); default 1.
   */
  rateLimitShare?: number;
  /** True once an upstream's quota (`price.quota`) for this period is spent (upstream-quotas.ts). */
  quotaSpent?: (scope: string) => boolean;
}

/** How many methods' cache savings a forwarder remembers (unlisted method names are the clients' text). */
const MAX_REMEMBERED_METHODS = 1_024;

/** Calls the gateway makes for itself (internal ones) share one scope, and are not traced. */
export const INTERNAL_CALLER: Caller = Object.freeze({ keyId: '' });
let processFilterIds: FilterIds | undefined;

export function createForwarder(network: NetworkConfig, options: ForwarderOptions = {}): Forwarder {
  const clock = options.clock ?? clockFrom(options.now ?? Date.now);
  const observe = options.observe ?? {};
  const upstreams = network.upstreams.map((config) => new Upstream(config, network.circuitBreaker, clock.now));
  const byId = new Map<string, Upstream>(upstreams.map((upstream) => [upstream.id, upstream]));
  const budgets = new Map<string, UpstreamBudget>(
    upstreams.map((upstream) => [
      upstream.id,
      new UpstreamBudget(
        {
          requestsPerSecond: shareOf(upstream.config.rateLimit?.requestsPerSecond, options.rateLimitShare ?? 1),
          scope: upstreamScope(network.id, upstream.id),
          shared: options.sharedPermits,
          onSharedError: options.onSharedPermitsError,
        },
        clock,
      ),
    ]),
  );
  const prices = new Map<string, UpstreamPrice>();
  for (const upstream of upstreams) {
    const price = upstreamPriceOf(upstream.config.price);
    if (price !== undefined) prices.set(upstream.id, price);
  }
  const savedByMethod = new Map<string, { upstream: string; units: number }>();
  const probing = network.healthCheck.intervalMs > 0;
  const selector = createSelector(
    upstreams,
    {
      strategy: network.selection,
      maxBlockLag: network.maxBlockLag,
      headMaxAgeMs: 3 * network.healthCheck.intervalMs,
      trialsByRequests: !probing,
      // Money where the price has it: units of different providers are not the same money.
      unitsOf: (upstream, method) => {
        const price = prices.get(upstream.id);
        if (price === undefined) return undefined;
        const units = price.unitsOf(method);
        return price.usdPerMillion === undefined ? units : usdOf(units, price.usdPerMillion);
      },
      hasRoom: (upstream) => budgets.get(upstream.id)!.hasRoom(),
      quotaSpent: quotaSpentOf(network, options.quotaSpent),
    },
    clock.now,
    options.random,
  );
  const archive = createArchiveDepth({
    declared: new Map(network.upstreams.flatMap((config) => (config.blockHistory === undefined ? [] : [[config.id, config.blockHistory] as const]))),
    clock,
    bestHead: () => selector.bestHead(),
  });
  const reportSkip = (upstream: string) => observe.archiveSkip?.(network.id, upstream);

  const send: AttemptFn = (upstream, execution, signal) =>
    byId.get(upstream.id)!.send(execution.method, execution.paramsFor(upstream), signal, execution.check !== undefined, execution.upstreamHeaders);
  const observed: AttemptPolicy = (next) => async (upstream, execution, signal) => {
    const outcome = await next(upstream, execution, signal);
    observe.attempt?.(network.id, upstream.id, outcome);
    const price = prices.get(upstream.id);
    if (price !== undefined && reachedUpstream(outcome)) {
      const units = price.unitsOf(execution.method);
      observe.upstreamSpend?.(network.id, upstream.id, execution.method, units, price.usdPerMillion);
      const spend = execution.spend;
      if (spend !== undefined) {
        spend.units += units;
        if (price.usdPerMillion !== undefined) spend.usd += usdOf(units, price.usdPerMillion);
      }
    }
    return outcome;
  };
  const attempt = chain<AttemptFn>(
    budgetPolicy((upstreamId) => budgets.get(upstreamId), clock, { overBudget: (upstreamId) => observe.overBudget?.(network.id, upstreamId) }),
    circuitBreakerPolicy({ wrongAnswerReasons: new Set([UNVERIFIED]), answeredReasons: new Set([LOGS_TOO_LARGE, PRUNED_STATE]) }),
    tracedPolicy(network.id),
    observed,
    logsTooLargePolicy(),
    prunedStatePolicy(archive),
    resultCheckPolicy(UNVERIFIED),
    timeoutPolicy(clock),
  )(send);
  const hedge: CallPolicy = network.hedge.enabled
    ? hedgePolicy(network.hedge, clock, {
        isWrite: (method) => WRITE_METHODS.has(method),
        observe: (result) => observe.hedge?.(network.id, result),
      })
    : (next) => next;
  const call = chain(
    nullConfirmationPolicy(attempt, {
      appliesTo: (method) => NULL_CONFIRMED_METHODS.has(method),
      observe: (result) => observe.nullConfirmation?.(network.id, result),
    }),
    hedge,
    failoverPolicy(clock),
  )(attemptEachCandidate(attempt));

  const statefulDeps = {
    network,
    upstreams,
    attempt,
    clock,
    candidatesFor: (prepared: PreparedCall) => servingOnly(selector.order(prepared.method), prepared.servedBy),
    executionFor: (prepared: PreparedCall, deadline: number, candidates: RoutedUpstream[], trace?: RequestTrace, spend?: ProviderSpend) => createExecution(prepared, deadline, candidates, byId, archive, trace, spend),
  };
  const filters = createFilterCalls(statefulDeps, options.filterIds ?? (processFilterIds ??= createFilterIds(randomBytes(32).toString('hex'))));
  const transactions = createTransactionCalls(statefulDeps);

  const probeTimeout = timeoutPolicy(clock);
  const probeSend = (upstream: RoutedUpstream, method: string, params: unknown[], timeoutMs: number) =>
    // The probe's deadline bounds it (together with the upstream's own timeoutMs).
    probeTimeout((target, _execution, signal) => byId.get(target.id)!.send(method, params, signal, false))(
      upstream,
      probeExecution(method, clock.now() + timeoutMs),
      NEVER_ABORTED,
    );
  const onFinalized = options.onFinalized;
  const finalityProbe = createFinalityProbe({
    kind: network.kind,
    depth: network.finality.depth,
    send: (upstream, method, params) => probeSend(upstream, method, params, network.healthCheck.timeoutMs),
    onFinalized: onFinalized === undefined ? undefined : (upstream, header, fetchHeader) => onFinalized(network.id, upstream.id, header, fetchHeader),
  });
  const prober: HealthProber | undefined = probing
    ? startHealthProber(
        upstreams,
        {
          intervalMs: network.healthCheck.intervalMs,
          timeoutMs: network.healthCheck.timeoutMs,
          method: network.healthCheck.method ?? DEFAULT_PROBE_METHOD[network.kind],
        },
        clock,
        (upstream, method, timeoutMs) => probeSend(upstream, method, [], timeoutMs),
        (upstream, outcome) => observe.probe?.(network.id, upstream.id, outcome),
        finalityProbe,
      )
    : undefined;

  return {
    upstreams,
    selector,
    priced: prices.size > 0,
    hasHealthyUpstream: () => upstreams.some((upstream) => upstream.health.isHealthy()),
    probeAll: () => prober?.probeAll() ?? Promise.resolve(),
    filterCriteria: (caller, filterId) => filters.criteriaOf(caller.keyId, filterId),
    finalityOf(upstreamId) {
      const health = byId.get(upstreamId)?.health;
      return { head: health?.head, finalized: health?.finalized };
    },
    stateDepthOf: (upstreamId) => archive.depthOf(upstreamId),
    savedBy(method) {
      if (prices.size === 0) return undefined;
      // Asked on every cache hit: worked out once per method (method names are bounded by the catalogue and the network's map).
      let saved = savedByMethod.get(method);
      if (saved === undefined) {
        for (const [upstream, price] of prices) {
          const units = price.unitsOf(method);
          if (saved === undefined || units < saved.units) saved = { upstream, units };
        }
        if (savedByMethod.size < MAX_REMEMBERED_METHODS) savedByMethod.set(method, saved!);
      }
      return saved;
    },
    close: async () => {
      prober?.stop();
      await Promise.all(upstreams.map((upstream) => upstream.close()));
    },
    async forward(prepared, deadline, caller = INTERNAL_CALLER) {
      const routed = filters.route(prepared, deadline, caller) ?? transactions.route(prepared, deadline, caller.trace, caller.spend);
      if (routed !== undefined) return routed;
      const candidates = archive.keeping(servingOnly(selector.order(prepared.method), prepared.servedBy), prepared.method, paramsOf(prepared), reportSkip);
      if (candidates.length === 0) {
        return failed('TG_ERR_NO_HEALTHY_UPSTREAM', servingOnly(upstreams, prepared.servedBy).map((upstream) => ({ upstream: upstream.id, reason: 'circuit_open' })));
      }
      const execution = createExecution(prepared, deadline, candidates, byId, archive, caller.trace, caller.spend);
      const outcome = await call(execution, NEVER_ABORTED);
      return (outcome.kind === 'failed' ? prunedEverywhere(execution) : undefined) ?? forwardOutcomeOf(outcome, execution, candidates, clock.now());
    },
  };
}

/** This process's share of a declared limit: at least one call a second, so a small limit split N ways still serves. */
function shareOf(requestsPerSecond: number | undefined, share: number): number | undefined {
  return requestsPerSecond === undefined ? undefined : Math.max(1, Math.floor(requestsPerSecond * share));
}

/** The selector's quota check: only where some upstream of the network has a quota, each upstream's scope made once. */
function quotaSpentOf(network: NetworkConfig, quotaSpent: ((scope: string) => boolean) | undefined): ((upstream: RoutedUpstream) => boolean) | undefined {
  if (quotaSpent === undefined || !network.upstreams.some((upstream) => upstream.price?.quota !== undefined)) return undefined;
  const scopes = new Map(network.upstreams.map((upstream) => [upstream.id, upstreamScope(network.id, upstream.id)]));
  return (upstream) => quotaSpent(scopes.get(upstream.id)!);
}

/**
 * Whether an attempt the budget and the circuit let through reached the upstream (and so is
 * billed there): everything but a connection that was refused. A hedge cancelled after it was
 * sent counts, as the provider counts it.
 */
function reachedUpstream(outcome: AttemptOutcome): boolean {
  return outcome.kind !== 'failure' || outcome.reason !== 'connection_refused';
}

/**
 * When every attempt of a call was a node saying it does not keep the state asked for, the first
 * node's own error is the answer (passed on and charged like any node error), not a gateway
 * `-32603`: it tells the client what a direct call would, including "header not found" for a
 * block no node has yet. A call where anything else failed too stays a gateway failure.
 */
function prunedEverywhere(execution: Execution): ForwardOutcome | undefined {
  const { attempts, passedOverErrors } = execution;
  const first = passedOverErrors?.[0];
  if (first === undefined || attempts.length === 0 || !attempts.every((attempt) => attempt.reason === PRUNED_STATE)) return undefined;
  return { kind: 'rpc-error', error: first.error, upstream: first.upstream, attempts };
}
