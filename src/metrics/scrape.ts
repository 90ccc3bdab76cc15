import type { MetricObjectWithValues, MetricValue } from 'prom-client';
import type { CacheStats } from '../cache/memory-tier.js';
import type { Forwarder } from '../routing/forward.js';
import type { GatewayMetrics } from './metrics.js';
import { recordUpstreamState } from './upstream-state.js';

export interface ScrapeSources {
  cache: { stats(): CacheStats };
  /** Requests in flight (counted in plain counters on the hot path). */
  inFlight: () => number;
  networks: () => { byId: ReadonlyMap<string, { forwarder: Forwarder }> };
}

/**
 * The Prometheus exposition. Gauges whose truth lives elsewhere (cache size, requests in flight,
 * upstream state) are set from their sources when scraped rather than kept in step per request.
 */
function refreshScrapeGauges(metrics: GatewayMetrics, sources: ScrapeSources): void {
  const stats = sources.cache.stats();
  metrics.cacheBytes.set(stats.bytes);
  metrics.cacheEntries.set(stats.entries);
  metrics.inFlight.set(sources.inFlight());
  recordUpstreamState(metrics, sources.networks().byId);
}

export function createScrape(metrics: GatewayMetrics, sources: ScrapeSources): () => Promise<{ text: string; contentType: string }> {
  return async () => {
    refreshScrapeGauges(metrics, sources);
    return { text: await metrics.registry.metrics(), contentType: metrics.registry.contentType };
  };
}

/** The same metrics as JSON, for the primary of `serve --workers N` to merge (src/cluster/group-metrics.ts). */
export function createScrapeJson(metrics: GatewayMetrics, sources: ScrapeSources): () => Promise<MetricObjectWithValues<MetricValue<string>>[]> {
  return async () => {
    refreshScrapeGauges(metrics, sources);
    return (await metrics.registry.getMetricsAsJSON()) as MetricObjectWithValues<MetricValue<string>>[];
  };
}
