import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * Every Prometheus metric of the gateway, in one registry with the `tollgate_` prefix
 * (documented in docs/metrics.md). Labels are bounded: networks, upstreams and methods come from
 * config (a method a network does not offer is `other`), teams are ids, never keys.
 */

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export interface GatewayMetrics {
  registry: Registry;
  requests: Counter<'network' | 'method' | 'outcome' | 'status'>;
  requestDuration: Histogram<'network' | 'method'>;
  inFlight: Gauge;
  upstreamRequests: Counter<'network' | 'upstream' | 'outcome'>;
  upstreamDuration: Histogram<'network' | 'upstream'>;
  upstreamHealthy: Gauge<'network' | 'upstream'>;
  cacheLookups: Counter<'network' | 'result'>;
  cacheEvictions: Counter;
  cacheBytes: Gauge;
  cacheEntries: Gauge;
  creditsCharged: Counter<'network' | 'method' | 'team'>;
  creditRejections: Counter<'network' | 'reason'>;
  configReloads: Counter<'result'>;
  storeErrors: Counter;
}

export function createMetrics(): GatewayMetrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'tollgate_' });
  const registers = [registry];
  return {
    registry,
    requests: new Counter({
      name: 'tollgate_requests_total',
      help: 'JSON-RPC calls answered (each batch item counts), by network, method, outcome and HTTP status of the response',
      labelNames: ['network', 'method', 'outcome', 'status'],
      registers,
    }),
    requestDuration: new Histogram({
      name: 'tollgate_request_duration_seconds',
      help: 'Time from receiving an HTTP request to finishing its response; method is "batch" for batches',
      labelNames: ['network', 'method'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    inFlight: new Gauge({ name: 'tollgate_requests_in_flight', help: 'HTTP requests being processed', registers }),
    upstreamRequests: new Counter({
      name: 'tollgate_upstream_requests_total',
      help: 'Attempts against upstreams, by outcome: result, rpc_error (passed to the client) or the failure reason',
      labelNames: ['network', 'upstream', 'outcome'],
      registers,
    }),
    upstreamDuration: new Histogram({
      name: 'tollgate_upstream_request_duration_seconds',
      help: 'Duration of one attempt against an upstream',
      labelNames: ['network', 'upstream'],
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    upstreamHealthy: new Gauge({
      name: 'tollgate_upstream_healthy',
      help: '1 while the upstream circuit is closed, 0 while it is open',
      labelNames: ['network', 'upstream'],
      registers,
    }),
    cacheLookups: new Counter({
      name: 'tollgate_cache_lookups_total',
      help: 'Block cache lookups by result (hit or miss)',
      labelNames: ['network', 'result'],
      registers,
    }),
    cacheEvictions: new Counter({ name: 'tollgate_cache_evictions_total', help: 'Block cache entries evicted to stay within maxBytes', registers }),
    cacheBytes: new Gauge({ name: 'tollgate_cache_bytes', help: 'Bytes held by the block cache (result bytes plus per-entry overhead)', registers }),
    cacheEntries: new Gauge({ name: 'tollgate_cache_entries', help: 'Entries in the block cache', registers }),
    creditsCharged: new Counter({
      name: 'tollgate_credits_charged_total',
      help: 'Credits charged, by network, method and team id',
      labelNames: ['network', 'method', 'team'],
      registers,
    }),
    creditRejections: new Counter({
      name: 'tollgate_credit_rejections_total',
      help: 'Calls refused for credits: daily_credits_exhausted (HTTP 402) or rate_limited (HTTP 429)',
      labelNames: ['network', 'reason'],
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
  };
}
