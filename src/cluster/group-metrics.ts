import { AggregatorRegistry, type Registry } from 'prom-client';
import type { MetricsJson } from './worker-messages.js';

/**
 * One `/metrics` for a worker group: the primary's own registry and every worker's, merged by
 * prom-client's AggregatorRegistry. Counters and histograms are summed; each gauge says how it
 * merges with its `aggregator` (sum, min, max, average; documented per metric in docs/metrics.md).
 *
 * A sum over workers must never go down, or Prometheus takes the drop for a counter reset and
 * `rate()` jumps by the whole sum. A worker that dies takes its counts with it, so the counters
 * and histograms it last reported are kept as "retired" and stay in the sum; a worker that does
 * not answer one scrape in time is counted with its last report (its gauges are left out).
 * Counts a worker made after its last report are lost with it: scrape often.
 */

export interface GroupMetrics {
  /** The exposition: the primary's metrics, the retired counts and these workers' reports. */
  exposition(workers: ReadonlyArray<{ slot: number; report: MetricsJson | undefined }>): Promise<{ text: string; contentType: string }>;
  /** A worker ended: its last report's counters and histograms stay in the sums. */
  retire(slot: number): Promise<void>;
}

/** Series that only ever grow while their process lives. */
function cumulativeOnly(report: MetricsJson): MetricsJson {
  // prom-client's JSON carries the type as its string ('counter', 'histogram', ...).
  return report.filter((metric) => ['counter', 'histogram'].includes(metric.type as unknown as string));
}

export function createGroupMetrics(primary: Registry): GroupMetrics {
  /** Each worker's last report, by slot. */
  const lastReports = new Map<number, MetricsJson>();
  let retired: MetricsJson = [];

  async function primaryReport(): Promise<MetricsJson> {
    const report = (await primary.getMetricsAsJSON()) as MetricsJson;
    // prom-client omits the start time when merging (whose would it be?); the group's is the
    // primary's, which comes first in the merge.
    return report.map((metric) => (metric.name.endsWith('process_start_time_seconds') ? { ...metric, aggregator: 'first' } : metric));
  }

  return {
    async exposition(workers) {
      const reports: MetricsJson[] = [await primaryReport(), retired];
      for (const { slot, report } of workers) {
        if (report !== undefined) {
          lastReports.set(slot, report);
          reports.push(report);
        } else {
          const last = lastReports.get(slot);
          if (last !== undefined) reports.push(cumulativeOnly(last));
        }
      }
      const merged = AggregatorRegistry.aggregate(reports);
      return { text: await merged.metrics(), contentType: merged.contentType };
    },
    async retire(slot) {
      const last = lastReports.get(slot);
      lastReports.delete(slot);
      if (last === undefined) return;
      const merged = AggregatorRegistry.aggregate([retired, cumulativeOnly(last)]);
      retired = (await merged.getMetricsAsJSON()) as MetricsJson;
    },
  };
}
