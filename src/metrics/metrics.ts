import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { answerBuffers } from '../jsonrpc/answer-buffers.js';
import { fastHistogram, tallied, type FastHistogram, type Tally } from './fast-metrics.js';

/**
 * Every Prometheus metric of the gateway, in one registry with the `tollgate_` prefix
 * (documented in docs/metrics.md). Labels are bounded: networks, upstreams and methods come from
 * config (a method a network does not offer is `other`), teams are ids, never keys.
 */

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export interface GatewayMetrics {
  registry: Registry;
  /** Labels: network, method, outcome, status. */
  requests: Tally;
  /** Labels: network, method. */
  requestDuration: FastHistogram;
  inFlight: Gauge;
  /** Read from this thread's answer buffer pool at scrape time. */
  answerBuffersIdle: Gauge;
  answerBuffersTaken: Counter<'source'>;
  arrayBuffers: Gauge;
  /** Labels: network, upstream, outcome. */
  upstreamRequests: Tally;
  /** Labels: network, upstream. */
  upstreamDuration: FastHistogram;
  upstreamHealthy: Gauge<'network' | 'upstream'>;
  /** Labels: network, upstream. Units of priced upstreams, as each provider bills them. */
  upstreamUnits: Tally;
  /** Labels: network, upstream. */
  upstreamUsd: Tally;
  /** Labels: network, upstream (the cheapest priced upstream the cache spared). */
  upstreamUnitsSaved: Tally;
  /** Labels: network, upstream. */
  upstreamOverBudget: Tally;
  /** 0 closed, 1 half-open (trial under way), 2 open. */
  upstreamCircuitState: Gauge<'network' | 'upstream'>;
  upstreamHeadBlock: Gauge<'network' | 'upstream'>;
  upstreamHeadLag: Gauge<'network' | 'upstream'>;
  upstreamFinalizedBlock: Gauge<'network' | 'upstream'>;
  upstreamLatencyEstimate: Gauge<'network' | 'upstream'>;
  /** Labels: network, upstream, outcome. */
  upstreamProbes: Tally;
  /** Labels: network, upstream. State reads that left the upstream out (their block is older than it keeps). */
  upstreamArchiveSkips: Tally;
  /** Blocks of state the upstream keeps, declared or learned; absent for an archive. */
  upstreamStateDepth: Gauge<'network' | 'upstream'>;
  /** Labels: network, result (won, lost). */
  hedges: Tally;
  /** Labels: network, result (confirmed, contradicted). */
  nullConfirmations: Tally;
  /** Labels: network, method, tier (memory, shared), result (hit, miss). */
  cacheLookups: Tally;
  /** Labels: network, method. Upstream calls one `eth_getLogs` call took (chunks, bisections, tag resolution). */
  logsUpstreamCalls: FastHistogram;
  /** Labels: network, method, tier. */
  cacheWrites: Tally;
  /** Labels: network, method, reason (memory, shared, coalesced). */
  cacheCallsSaved: Tally;
  cacheReorgs: Counter<'network'>;
  cacheSharedErrors: Counter;
  cacheEvictions: Counter;
  cacheBytes: Gauge;
  cacheEntries: Gauge;
  /** Labels: network, method, team. */
  creditsCharged: Tally;
  /** Labels: network, reason. */
  creditRejections: Tally;
  /** Labels: network, rule (origin, user_agent, ip, method, address). */
  keySettingsRejections: Tally;
  configReloads: Counter<'result'>;
  storeErrors: Counter;
  /** WebSocket endpoint (docs/websocket.md). Labels: network. */
  wsConnections: Gauge<'network'>;
  /** Labels: network, type. Client subscriptions. */
  wsSubscriptions: Gauge<'network' | 'type'>;
  /** Labels: network, type. Upstream subscriptions the clients' share. */
  wsUpstreamSubscriptions: Gauge<'network' | 'type'>;
  /** Labels: network, type. */
  wsEventsDelivered: Tally;
  /** Labels: network, type, reason. */
  wsEventsDropped: Tally;
  /** Labels: reason. */
  wsDisconnects: Counter<'reason'>;
  /** Labels: status. */
  wsUpgradesRejected: Counter<'status'>;
  /** Labels: network, upstream, reason. */
  wsUpstreamFailovers: Counter<'network' | 'upstream' | 'reason'>;
  /** Labels: type (quota.threshold, key.revoked, key.expiring), outcome (delivered, failed, timeout, error). */
  webhookDeliveries: Counter<'type' | 'outcome'>;
  /** Request explorer (docs/explorer.md): store writes, records written, records dropped. */
  explorerWrites: Counter;
  explorerRecords: Counter;
  explorerDropped: Counter;
  explorerSuperseded: Counter;
}

/**
 * prom-client's default metrics include three gauges named `…_active_handles_total`,
 * `…_active_requests_total` and `…_active_resources_total`; `_total` is reserved for counters, and
 * `promtool check metrics` rejects them. They are the sums of the by-type gauges that stay
 * (`…_active_handles`, `…_active_requests`, `…_active_resources`), so they are dropped.
 */
function dropTotalSuffixedGauges(registry: Registry): void {
  for (const name of ['active_handles', 'active_requests', 'active_resources']) {
    registry.removeSingleMetric(`tollgate_nodejs_${name}_total`);
  }
}

/**
 * Buffers the answer pool handed out, by where they came from: `idle` (one that came back, used
 * again) or `allocated` (memory mapped afresh, a page fault for every 4 KiB of it that is written).
 * Counted by the pool, read at scrape time: the counter moves by what the pool counted since.
 */
function answerBuffersTakenCounter(registers: Registry[]): Counter<'source'> {
  const counted = { idle: 0, allocated: 0 };
  return new Counter({
    name: 'tollgate_answer_buffers_taken_total',
    help: 'Pooled buffers handed out for upstream answers of 1 MiB or more, by source (idle: reused; allocated: mapped afresh)',
    labelNames: ['source'] as const,
    registers,
    collect() {
      const { reused, allocated } = answerBuffers.snapshot();
      this.inc({ source: 'idle' }, reused - counted.idle);
      this.inc({ source: 'allocated' }, allocated - counted.allocated);
      counted.idle = reused;
      counted.allocated = allocated;
    },
  });
}

export function createMetrics(): GatewayMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'tollgate_' });
  dropTotalSuffixedGauges(registry);
  const registers = [registry];
  /** Upstream state read from the routing layer at scrape time (see upstream-state.ts). */
  // `aggregator`: how `serve --workers N` merges a gauge over its workers (docs/metrics.md, per metric).
  const upstreamGauge = (name: string, help: string, aggregator: 'min' | 'max' | 'average') =>
    new Gauge({ name, help, labelNames: ['network', 'upstream'] as const, registers, aggregator });
  return {
    registry,
    requests: tallied({
      name: 'tollgate_requests_total',
      help: 'JSON-RPC calls answered (each batch item counts), by network, method, outcome and HTTP status of the response',
      labelNames: ['network', 'method', 'outcome', 'status'],
      registers,
    }),
    requestDuration: fastHistogram({
      name: 'tollgate_request_duration_seconds',
      help: 'Time from receiving an HTTP request to finishing its response; method is "batch" for batches',
      labelNames: ['network', 'method'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    inFlight: new Gauge({ name: 'tollgate_requests_in_flight', help: 'HTTP requests being processed', registers, aggregator: 'sum' }),
    answerBuffersIdle: new Gauge({
      name: 'tollgate_answer_buffers_idle_bytes',
      help: 'Bytes of pooled buffers for large upstream answers kept idle for the next ones; each dropped after 10 s unused',
      registers,
      aggregator: 'sum',
      collect() {
        this.set(answerBuffers.snapshot().retainedBytes);
      },
    }),
    answerBuffersTaken: answerBuffersTakenCounter(registers),
    arrayBuffers: new Gauge({
      name: 'tollgate_array_buffers_bytes',
      help: "Memory held by the process's Buffers and ArrayBuffers (process.memoryUsage().arrayBuffers)",
      registers,
      aggregator: 'sum',
      collect() {
        this.set(process.memoryUsage().arrayBuffers);
      },
    }),
    upstreamRequests: tallied({
      name: 'tollgate_upstream_requests_total',
      help: 'Attempts against upstreams, by outcome: result, rpc_error (passed to the client) or the failure reason',
      labelNames: ['network', 'upstream', 'outcome'],
      registers,
    }),
    upstreamUnits: tallied({
      name: 'tollgate_upstream_units_total',
      help: "Provider units (compute units, credits) of the calls sent to priced upstreams, by each upstream's price",
      labelNames: ['network', 'upstream'],
      registers,
    }),
    upstreamUsd: tallied({
      name: 'tollgate_upstream_usd_total',
      help: 'Money of the calls sent to upstreams whose price has usdPerMillion',
      labelNames: ['network', 'upstream'],
      registers,
    }),
    upstreamUnitsSaved: tallied({
      name: 'tollgate_upstream_units_saved_total',
      help: 'Provider units not spent: calls the cache answered, at the price of the cheapest priced upstream',
      labelNames: ['network', 'upstream'],
      registers,
    }),
    upstreamOverBudget: tallied({
      name: 'tollgate_upstream_over_budget_total',
      help: "Attempts not made because the upstream's rate-limit window was full (the call went on or waited)",
      labelNames: ['network', 'upstream'],
      registers,
    }),
    upstreamDuration: fastHistogram({
      name: 'tollgate_upstream_request_duration_seconds',
      help: 'Duration of one attempt against an upstream',
      labelNames: ['network', 'upstream'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    upstreamHealthy: upstreamGauge('tollgate_upstream_healthy', '1 while the upstream circuit is closed, 0 while it is open or half-open', 'min'),
    upstreamCircuitState: upstreamGauge('tollgate_upstream_circuit_state', "The upstream's circuit: 0 closed, 1 half-open (a trial under way), 2 open", 'max'),
    upstreamHeadBlock: upstreamGauge('tollgate_upstream_head_block', 'Chain head the last health probe of the upstream reported', 'max'),
    upstreamHeadLag: upstreamGauge('tollgate_upstream_head_lag_blocks', "Blocks the upstream's probed head is behind the best probed head of its network", 'max'),
    upstreamFinalizedBlock: upstreamGauge('tollgate_upstream_finalized_block', "The upstream's finalized block (or slot) as its last finality probe read it; the cache keeps its answers by number up to it", 'max'),
    upstreamLatencyEstimate: upstreamGauge('tollgate_upstream_latency_estimate_seconds', "The latency estimate that ranks the upstream (fades while it is not refreshed)", 'average'),
    upstreamProbes: tallied({
      name: 'tollgate_upstream_probes_total',
      help: 'Health probes of upstreams, by outcome: ok or the failure reason',
      labelNames: ['network', 'upstream', 'outcome'],
      registers,
    }),
    upstreamArchiveSkips: tallied({
      name: 'tollgate_upstream_archive_skips_total',
      help: 'State reads and traces that left the upstream out because their block is older than the state it keeps (blockHistory, declared or learned)',
      labelNames: ['network', 'upstream'],
      registers,
    }),
    upstreamStateDepth: upstreamGauge('tollgate_upstream_state_depth_blocks', 'Blocks of state a pruned upstream keeps (its blockHistory, or less as learned from its answers); absent for an archive', 'min'),
    hedges: tallied({
      name: 'tollgate_hedges_total',
      help: 'Calls that sent a hedged attempt, by result: won (the hedge answered first) or lost',
      labelNames: ['network', 'result'],
      registers,
    }),
    nullConfirmations: tallied({
      name: 'tollgate_null_confirmations_total',
      help: 'Null block answers checked with the other upstreams: confirmed (none had it) or contradicted (another had it and answered)',
      labelNames: ['network', 'result'],
      registers,
    }),
    cacheLookups: tallied({
      name: 'tollgate_cache_lookups_total',
      help: 'Response cache lookups by network, method, tier (memory, shared) and result (hit or miss)',
      labelNames: ['network', 'method', 'tier', 'result'],
      registers,
    }),
    logsUpstreamCalls: fastHistogram({
      name: 'tollgate_logs_upstream_calls',
      help: 'Upstream calls one eth_getLogs call took: its chunks, bisected halves and tag resolution (0 when every chunk was cached)',
      labelNames: ['network', 'method'],
      buckets: [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000],
      registers,
    }),
    cacheWrites: tallied({
      name: 'tollgate_cache_writes_total',
      help: 'Answers kept by the response cache, by network, method and tier',
      labelNames: ['network', 'method', 'tier'],
      registers,
    }),
    cacheCallsSaved: tallied({
      name: 'tollgate_cache_upstream_calls_saved_total',
      help: 'Upstream calls not made: answered from a cache tier (memory, shared) or shared with an identical call in flight (coalesced)',
      labelNames: ['network', 'method', 'reason'],
      registers,
    }),
    cacheReorgs: new Counter({ name: 'tollgate_cache_reorgs_total', help: 'Reorgs noticed below a finalized block: entries by number on the replaced branch became unreachable', labelNames: ['network'], registers }),
    cacheSharedErrors: new Counter({ name: 'tollgate_cache_shared_errors_total', help: 'Failed commands of the shared (Redis) cache tier; lookups became misses', registers }),
    cacheEvictions: new Counter({ name: 'tollgate_cache_evictions_total', help: 'In-process cache entries evicted to stay within maxBytes', registers }),
    cacheBytes: new Gauge({ name: 'tollgate_cache_bytes', help: 'Bytes held by the in-process cache (answer bytes plus per-entry overhead)', registers, aggregator: 'sum' }),
    cacheEntries: new Gauge({ name: 'tollgate_cache_entries', help: 'Entries in the in-process cache', registers, aggregator: 'sum' }),
    creditsCharged: tallied({
      name: 'tollgate_credits_charged_total',
      help: 'Credits charged, by network, method and team id',
      labelNames: ['network', 'method', 'team'],
      registers,
    }),
    creditRejections: tallied({
      name: 'tollgate_credit_rejections_total',
      help: 'Calls refused for credits: daily_credits_exhausted (HTTP 402) or rate_limited (HTTP 429)',
      labelNames: ['network', 'reason'],
      registers,
    }),
    keySettingsRejections: tallied({
      name: 'tollgate_key_settings_rejections_total',
      help: 'Requests (origin, user_agent, ip) and calls (method, address) refused by a key setting, by rule type',
      labelNames: ['network', 'rule'],
      registers,
    }),
    configReloads: new Counter({
      name: 'tollgate_config_reloads_total',
      help: 'Config reloads by result (ok or rejected)',
      labelNames: ['result'],
      registers,
    }),
    storeErrors: new Counter({
      name: 'tollgate_store_errors_total',
      help: 'Ledger operations that failed because the store was unreachable',
      registers,
    }),
    wsConnections: new Gauge({ name: 'tollgate_ws_connections', help: 'Open WebSocket connections, by network', labelNames: ['network'], registers, aggregator: 'sum' }),
    wsSubscriptions: new Gauge({ name: 'tollgate_ws_subscriptions', help: 'Client subscriptions open on WebSocket connections, by network and type', labelNames: ['network', 'type'], registers, aggregator: 'sum' }),
    wsUpstreamSubscriptions: new Gauge({
      name: 'tollgate_ws_upstream_subscriptions',
      help: 'Subscriptions held on upstream sockets (shared by identical client subscriptions), by network and type; the internal head tracker counts as newHeads',
      labelNames: ['network', 'type'],
      registers,
      aggregator: 'sum',
    }),
    wsEventsDelivered: tallied({
      name: 'tollgate_ws_events_delivered_total',
      help: 'Subscription events sent to clients (one per client subscription), by network and type',
      labelNames: ['network', 'type'],
      registers,
    }),
    wsEventsDropped: tallied({
      name: 'tollgate_ws_events_dropped_total',
      help: 'Subscription events not sent to a client subscription (never charged), by reason: closed, slow_client, credits_exhausted, store_error',
      labelNames: ['network', 'type', 'reason'],
      registers,
    }),
    wsDisconnects: new Counter({
      name: 'tollgate_ws_disconnects_total',
      help: 'WebSocket connections closed, by reason: client, credits_exhausted, slow_client, pong_timeout, message_too_large, key_invalid, network_removed, shutdown, error',
      labelNames: ['reason'],
      registers,
    }),
    wsUpgradesRejected: new Counter({ name: 'tollgate_ws_upgrades_rejected_total', help: 'WebSocket upgrades refused, by HTTP status', labelNames: ['status'], registers }),
    wsUpstreamFailovers: new Counter({
      name: 'tollgate_ws_upstream_failovers_total',
      help: "Moves of a network's subscriptions off an upstream socket, by reason (closed, stalled, subscribe_failed, backfill_failed, unverified_block, queue_full, or the socket error)",
      labelNames: ['network', 'upstream', 'reason'],
      registers,
    }),
    webhookDeliveries: new Counter({
      name: 'tollgate_webhook_deliveries_total',
      help: 'Webhook delivery attempts by event type and outcome (delivered, failed: non-2xx, timeout, error: no answer)',
      labelNames: ['type', 'outcome'],
      registers,
    }),
    explorerWrites: new Counter({ name: 'tollgate_explorer_writes_total', help: 'Batches of finished requests written to the store for the request explorer', registers }),
    explorerRecords: new Counter({ name: 'tollgate_explorer_records_total', help: 'Finished requests written to the store for the request explorer', registers }),
    explorerDropped: new Counter({
      name: 'tollgate_explorer_records_dropped_total',
      help: 'Finished requests the request explorer did not keep: the store refused their write',
      registers,
    }),
    explorerSuperseded: new Counter({
      name: 'tollgate_explorer_records_superseded_total',
      help: "Finished requests not written because 1,000 newer ones of the same team were written in the same batch (they would have been dropped from the team's last 1,000 at once)",
      registers,
    }),
  };
}

/** The primary's own metrics under `serve --workers N` (docs/metrics.md, "Worker group"). */
export interface WorkerGroupMetrics {
  /** Workers serving the RPC port right now. */
  workers: Gauge;
  /** Labels: reason (the signal that ended the worker, e.g. SIGKILL, or exit_<code>). */
  workerRestarts: Counter<'reason'>;
}

export function createWorkerGroupMetrics(registry: Registry): WorkerGroupMetrics {
  const registers = [registry];
  return {
    workers: new Gauge({ name: 'tollgate_workers', help: 'Workers of the group serving the RPC port', registers, aggregator: 'sum' }),
    workerRestarts: new Counter({
      name: 'tollgate_worker_restarts_total',
      help: 'Workers restarted after they ended unasked, by reason: the signal that ended them (SIGKILL, ...) or exit_<code>',
      labelNames: ['reason'],
      registers,
    }),
  };
}
