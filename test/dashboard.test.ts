// dashboards/tollgate.json stays in step with the metrics registry: every metric a panel
// queries exists (a renamed metric would leave an empty panel nobody notices), and the
// dashboard covers the topics docs/dashboards.md promises.

import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../src/metrics/metrics.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

interface Target {
  expr?: string;
  datasource?: { type?: string; uid?: string };
}
interface Panel {
  type: string;
  title: string;
  datasource?: { type?: string; uid?: string };
  targets?: Target[];
  panels?: Panel[];
}
interface Dashboard {
  schemaVersion: number;
  title: string;
  uid: string;
  __inputs?: Array<{ name: string; type: string; pluginId: string }>;
  templating: { list: Array<{ name: string; type: string; query?: unknown; definition?: string }> };
  panels: Panel[];
}

const dashboard = JSON.parse(readFileSync(join(ROOT, 'dashboards', 'tollgate.json'), 'utf8')) as Dashboard;

/** Every panel, rows' nested (collapsed) panels included; rows themselves are not returned. */
function allPanels(panels: Panel[]): Panel[] {
  return panels.flatMap((panel) => (panel.type === 'row' ? allPanels(panel.panels ?? []) : [panel]));
}

const PROMQL_WORDS = new Set([
  // aggregation operators and their modifiers
  'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values', 'bottomk', 'topk', 'quantile',
  'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'bool', 'offset', 'and', 'or', 'unless', 'atan2',
  // functions
  'abs', 'absent', 'absent_over_time', 'ceil', 'changes', 'clamp', 'clamp_max', 'clamp_min', 'day_of_month', 'day_of_week',
  'days_in_month', 'delta', 'deriv', 'exp', 'floor', 'histogram_quantile', 'holt_winters', 'hour', 'idelta', 'increase',
  'irate', 'label_join', 'label_replace', 'ln', 'log2', 'log10', 'minute', 'month', 'predict_linear', 'rate', 'resets',
  'round', 'scalar', 'sgn', 'sort', 'sort_desc', 'sqrt', 'time', 'timestamp', 'vector', 'year', 'avg_over_time',
  'min_over_time', 'max_over_time', 'sum_over_time', 'count_over_time', 'quantile_over_time', 'stddev_over_time',
  'stdvar_over_time', 'last_over_time', 'present_over_time',
]);

/**
 * The metric names an expression selects. Label matchers (`{...}`), range selectors (`[5m]`),
 * grouping clauses (`by (le, network)`) and strings are removed first; what remains besides
 * PromQL's own words and numbers are metric names.
 */
function metricNamesOf(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, ' ')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ')
    .replace(/(^|[^A-Za-z0-9_:])\d+(\.\d+)?(e[+-]?\d+)?/gi, '$1 ');
  const names = new Set<string>();
  for (const match of stripped.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const word = match[0];
    if (!PROMQL_WORDS.has(word)) names.add(word);
  }
  return [...names];
}

describe('metricNamesOf', () => {
  it('finds metric names and ignores functions, matchers, ranges and grouping', () => {
    expect(
      metricNamesOf(
        'histogram_quantile(0.99, sum by (le, network) (rate(tollgate_request_duration_seconds_bucket{network=~"$network", method!="x"}[$__rate_interval])))',
      ),
    ).toEqual(['tollgate_request_duration_seconds_bucket']);
    expect(metricNamesOf('sum(rate(a_total[5m])) / sum(rate(b_total{x="a_total"}[5m])) or vector(0)')).toEqual(['a_total', 'b_total']);
    expect(metricNamesOf('count(tollgate_upstream_healthy == 0)')).toEqual(['tollgate_upstream_healthy']);
    expect(metricNamesOf('tollgate_cache_bytes > 1e9 and x_bytes')).toEqual(['tollgate_cache_bytes', 'x_bytes']);
  });
});

describe('dashboards/tollgate.json', () => {
  let registered: Map<string, string>;
  const panels = allPanels(dashboard.panels);
  const targets = panels.flatMap((panel) => (panel.targets ?? []).map((target) => ({ panel, expr: target.expr ?? '' })));

  beforeAll(async () => {
    const metrics = createMetrics();
    registered = new Map((await metrics.registry.getMetricsAsJSON()).map((metric) => [metric.name, String(metric.type)]));
  });

  /** The registry name a sample name belongs to: histogram/summary series names lose their suffix. */
  function registryName(sample: string): string | undefined {
    if (registered.has(sample)) return sample;
    const match = /^(.*)_(bucket|sum|count)$/.exec(sample);
    if (match === null) return undefined;
    const base = match[1]!;
    const type = registered.get(base);
    if (type === 'histogram' || (type === 'summary' && match[2] !== 'bucket')) return base;
    return undefined;
  }

  it('is a Grafana dashboard of schema ~39 with a Prometheus data source variable and a network variable', () => {
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(36);
    expect(dashboard.schemaVersion).toBeLessThanOrEqual(41);
    expect(dashboard.title).toBe('Tollgate');
    expect(dashboard.uid).toMatch(/^[A-Za-z0-9_-]{1,40}$/);
    expect(dashboard.__inputs).toContainEqual(expect.objectContaining({ name: 'DS_PROMETHEUS', type: 'datasource', pluginId: 'prometheus' }));
    const variables = new Map(dashboard.templating.list.map((variable) => [variable.name, variable]));
    expect(variables.get('DS_PROMETHEUS')).toMatchObject({ type: 'datasource', query: 'prometheus' });
    const network = variables.get('network');
    expect(network).toMatchObject({ type: 'query', definition: 'label_values(tollgate_requests_total, network)' });
    expect(JSON.stringify(network!.query)).toContain('label_values(tollgate_requests_total, network)');
  });

  it('queries the ${DS_PROMETHEUS} data source in every panel and target', () => {
    expect(panels.length).toBeGreaterThan(10);
    for (const panel of panels) {
      expect(panel.datasource, panel.title).toEqual({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });
      expect(panel.targets?.length ?? 0, `${panel.title} has targets`).toBeGreaterThan(0);
      for (const target of panel.targets ?? []) expect(target.datasource, panel.title).toEqual({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });
    }
  });

  it('uses only metrics that exist in the registry', () => {
    const used = new Set<string>();
    for (const { panel, expr } of targets) {
      expect(expr, `${panel.title}: expr`).not.toBe('');
      const names = metricNamesOf(expr);
      expect(names.length, `${panel.title}: ${expr} selects a metric`).toBeGreaterThan(0);
      for (const name of names) {
        expect(name, `${panel.title}: ${expr}`).toMatch(/^tollgate_/);
        expect(registryName(name), `${panel.title}: ${name} is not a registered metric`).toBeDefined();
        used.add(registryName(name)!);
      }
    }
    // The gateway's own metrics are all on the dashboard (process metrics are a choice).
    const own = [...registered.keys()].filter((name) => !/^tollgate_(process|nodejs)_/.test(name));
    expect(own.filter((name) => !used.has(name))).toEqual([]);
  });

  it('filters by the network variable wherever a metric has a network label', () => {
    const withNetworkLabel = /tollgate_(requests_total|request_duration_seconds|upstream_requests_total|upstream_request_duration_seconds|upstream_healthy|cache_lookups_total|credits_charged_total|credit_rejections_total)/;
    for (const { panel, expr } of targets) {
      for (const selector of expr.matchAll(/(tollgate_[a-z_]+)(\{[^}]*\})?/g)) {
        if (!withNetworkLabel.test(selector[1]!)) continue;
        expect(selector[2] ?? '', `${panel.title}: ${selector[0]}`).toContain('network=~"$network"');
      }
    }
  });

  const topics: Array<{ topic: string; matches: (panel: Panel, exprs: string) => boolean }> = [
    { topic: 'traffic by network', matches: (_p, e) => /sum by \(network\) \(rate\(tollgate_requests_total/.test(e) },
    { topic: 'traffic by method', matches: (_p, e) => /by \([^)]*method[^)]*\) \(rate\(tollgate_requests_total/.test(e) },
    { topic: 'errors by network and method', matches: (_p, e) => /by \(network, method, outcome\) \(rate\(tollgate_requests_total\{[^}]*outcome!~"ok\|upstream_error/.test(e) },
    {
      topic: 'latency quantiles',
      matches: (_p, e) => ['0.5', '0.9', '0.99'].every((q) => e.includes(`histogram_quantile(${q}`)) && e.includes('tollgate_request_duration_seconds_bucket'),
    },
    { topic: 'credits burned per team', matches: (_p, e) => /sum by \(team\) \((rate|increase)\(tollgate_credits_charged_total/.test(e) },
    { topic: '402/429 rates', matches: (_p, e) => e.includes('status=~"402|429"') && e.includes('tollgate_credit_rejections_total') },
    { topic: 'cache hit ratio', matches: (_p, e) => /tollgate_cache_lookups_total\{[^}]*result="hit"[^}]*\}.*\/.*tollgate_cache_lookups_total/.test(e) },
    { topic: 'cache bytes', matches: (_p, e) => e.includes('tollgate_cache_bytes') },
    { topic: 'upstream latency', matches: (_p, e) => e.includes('histogram_quantile') && e.includes('tollgate_upstream_request_duration_seconds_bucket') },
    { topic: 'upstream failures', matches: (_p, e) => /tollgate_upstream_requests_total\{[^}]*outcome!~"result\|rpc_error"/.test(e) },
    { topic: 'upstream health', matches: (_p, e) => e.includes('tollgate_upstream_healthy') },
    { topic: 'in-flight', matches: (_p, e) => e.includes('tollgate_requests_in_flight') },
  ];

  it.each(topics)('has a panel for $topic', ({ topic, matches }) => {
    const found = panels.filter((panel) => matches(panel, (panel.targets ?? []).map((target) => target.expr ?? '').join('\n')));
    expect(found.map((panel) => panel.title), topic).not.toEqual([]);
  });

  it('lays panels out on the 24-column grid without overlaps', () => {
    const cells = new Set<string>();
    for (const panel of dashboard.panels as Array<Panel & { gridPos: { x: number; y: number; w: number; h: number } }>) {
      const { x, y, w, h } = panel.gridPos;
      expect(x + w, panel.title).toBeLessThanOrEqual(24);
      for (let row = y; row < y + h; row++) {
        for (let column = x; column < x + w; column++) {
          const cell = `${row}:${column}`;
          expect(cells.has(cell), `${panel.title} overlaps at ${cell}`).toBe(false);
          cells.add(cell);
        }
      }
    }
  });
});
