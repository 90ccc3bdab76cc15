// The tally (a counter) and the fast histogram the request path counts with: plain memory on the
// hot path, handed to prom-client only when the registry is scraped. Separate from metrics.ts,
// which defines the gateway's metrics with them: this is how a series is counted, not which.
import { Counter, type CounterConfiguration, type Registry } from 'prom-client';

/**
 * A counter counted in plain memory on the request path and handed to prom-client when the
 * registry is scraped. prom-client validates and hashes the label set on every `inc`, which
 * showed in cache-hit profiles; here a count is a few map lookups and an addition.
 */
export interface Tally {
  /** Adds `amount` to the series with these label values, in the counter's labelNames order. */
  add(amount: number, ...values: string[]): void;
}

/**
 * Finds (or creates) the entry of a series by its label values, one map level per label, so a
 * lookup builds no string. Label sets here are few and bounded (see metrics.ts's module comment).
 */
function seriesTree<Entry>(create: (values: readonly string[]) => Entry): (values: readonly string[]) => Entry {
  type Level = Map<string, Level | Entry>;
  const root: Level = new Map();
  // Under load one request after another has the same labels: the last series found answers
  // those without any map lookup.
  let lastValues: readonly string[] = [];
  let lastEntry: Entry | undefined;
  const sameAsLast = (values: readonly string[]): boolean => {
    if (values.length !== lastValues.length) return false;
    for (let index = 0; index < values.length; index += 1) if (values[index] !== lastValues[index]) return false;
    return true;
  };
  return (values) => {
    if (lastEntry !== undefined && sameAsLast(values)) return lastEntry;
    let level = root;
    const last = values.length - 1;
    for (let index = 0; index < last; index += 1) {
      let next = level.get(values[index]!) as Level | undefined;
      if (next === undefined) {
        next = new Map();
        level.set(values[index]!, next);
      }
      level = next;
    }
    let entry = level.get(values[last]!) as Entry | undefined;
    if (entry === undefined) {
      entry = create(values);
      level.set(values[last]!, entry);
    }
    lastValues = values;
    lastEntry = entry;
    return entry;
  };
}
export function tallied<L extends string>(config: CounterConfiguration<L> & { labelNames: readonly L[] }): Tally {
  type Entry = { labels: Partial<Record<L, string>>; pending: number };
  const entries: Entry[] = [];
  const find = seriesTree((values): Entry => {
    const labels: Partial<Record<L, string>> = {};
    config.labelNames.forEach((name, index) => (labels[name] = values[index]));
    const entry = { labels, pending: 0 };
    entries.push(entry);
    return entry;
  });
  new Counter<L>({
    ...config,
    collect() {
      for (const entry of entries) {
        if (entry.pending === 0) continue;
        this.inc(entry.labels, entry.pending);
        entry.pending = 0;
      }
    },
  });
  return {
    add(amount, ...values) {
      const entry = find(values);
      entry.pending += amount;
    },
  };
}

/**
 * A histogram observed in plain memory on the request path (one bucket search, three additions)
 * and exposed through the registry like prom-client's own: `_bucket{le}`, `_sum`, `_count`.
 * prom-client's Histogram validates and hashes the label set on every observation.
 */
export interface FastHistogram {
  /** Records `value` for the series with these label values, in labelNames order. */
  observe(value: number, ...values: string[]): void;
}

export function fastHistogram<L extends string>(config: { name: string; help: string; labelNames: readonly L[]; buckets: readonly number[]; registers: Registry[] }): FastHistogram {
  type Series = { labels: Record<string, string>; buckets: Float64Array; sum: number; count: number };
  const bounds = [...config.buckets].sort((a, b) => a - b);
  const series: Series[] = [];
  const find = seriesTree((values): Series => {
    const labels: Record<string, string> = {};
    config.labelNames.forEach((name, index) => (labels[name] = values[index]!));
    const entry = { labels, buckets: new Float64Array(bounds.length), sum: 0, count: 0 };
    series.push(entry);
    return entry;
  });
  const metric = {
    name: config.name,
    help: config.help,
    type: 'histogram' as const,
    aggregator: 'sum' as const,
    async get() {
      const values: Array<{ labels: Record<string, string | number>; value: number; metricName: string }> = [];
      for (const entry of series) {
        let cumulative = 0;
        bounds.forEach((bound, index) => {
          cumulative += entry.buckets[index]!;
          values.push({ labels: { ...entry.labels, le: bound }, value: cumulative, metricName: `${config.name}_bucket` });
        });
        values.push({ labels: { ...entry.labels, le: '+Inf' }, value: entry.count, metricName: `${config.name}_bucket` });
        values.push({ labels: entry.labels, value: entry.sum, metricName: `${config.name}_sum` });
        values.push({ labels: entry.labels, value: entry.count, metricName: `${config.name}_count` });
      }
      return { name: config.name, help: config.help, type: 'histogram' as const, values, aggregator: 'sum' as const };
    },
    reset() {
      for (const entry of series) {
        entry.buckets.fill(0);
        entry.sum = 0;
        entry.count = 0;
      }
    },
  };
  for (const registry of config.registers) registry.registerMetric(metric as unknown as Parameters<Registry['registerMetric']>[0]);
  return {
    observe(value, ...values) {
      const entry = find(values);
      let bucket = 0;
      while (bucket < bounds.length && value > bounds[bucket]!) bucket += 1;
      if (bucket < bounds.length) entry.buckets[bucket]! += 1;
      entry.sum += value;
      entry.count += 1;
    },
  };
}
