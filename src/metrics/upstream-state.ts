import type { Forwarder } from '../routing/forward.js';
import type { GatewayMetrics } from './metrics.js';

const CIRCUIT_STATE_VALUE = { closed: 0, 'half-open': 1, open: 2 } as const;

/**
 * Upstream state (circuit, head, lag, latency estimate) is read from the forwarders when /metrics
 * is scraped rather than kept in step on every attempt: the routing layer already holds it.
 */
export function recordUpstreamState(metrics: GatewayMetrics, networks: ReadonlyMap<string, { forwarder: Forwarder }>): void {
  const gauges = [metrics.upstreamHealthy, metrics.upstreamCircuitState, metrics.upstreamHeadBlock, metrics.upstreamHeadLag, metrics.upstreamLatencyEstimate, metrics.upstreamFinalizedBlock, metrics.upstreamStateDepth];
  for (const gauge of gauges) gauge.reset();
  for (const [network, { forwarder }] of networks) {
    const best = forwarder.selector.bestHead();
    for (const upstream of forwarder.upstreams) {
      const labels = { network, upstream: upstream.id };
      const { health } = upstream;
      metrics.upstreamHealthy.set(labels, health.isHealthy() ? 1 : 0);
      metrics.upstreamCircuitState.set(labels, CIRCUIT_STATE_VALUE[health.circuit()]);
      metrics.upstreamLatencyEstimate.set(labels, health.currentLatencyMs() / 1000);
      if (health.finalized !== undefined) metrics.upstreamFinalizedBlock.set(labels, health.finalized);
      const stateDepth = forwarder.stateDepthOf(upstream.id);
      if (stateDepth !== undefined) metrics.upstreamStateDepth.set(labels, stateDepth);
      if (health.head === undefined) continue;
      metrics.upstreamHeadBlock.set(labels, health.head);
      if (best !== undefined) metrics.upstreamHeadLag.set(labels, Math.max(0, best - health.head));
    }
  }
}
