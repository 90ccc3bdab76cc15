// The request-path metrics are tallied in memory and handed to the registry at scrape time: the
// exposition must be exactly what prom-client's own counters and histograms would print.

import { describe, expect, it } from 'vitest';
import { createMetrics } from '../src/metrics/metrics.js';

function line(text: string, prefix: string): string | undefined {
  return text.split('\n').find((candidate) => candidate.startsWith(prefix));
}

describe('tallied metrics', () => {
  it('counts across scrapes without losing or doubling an increment', async () => {
    const metrics = createMetrics();
    metrics.requests.add(1, 'eth', 'eth_chainId', 'ok', '200');
    metrics.requests.add(1, 'eth', 'eth_chainId', 'ok', '200');
    metrics.requests.add(1, 'eth', 'other', 'method_not_found', '200');
    metrics.creditsCharged.add(80, 'eth', 'eth_getBlockByHash', 'team_a');
    let text = await metrics.registry.metrics();
    expect(line(text, 'tollgate_requests_total{network="eth",method="eth_chainId",outcome="ok",status="200"}')).toMatch(/ 2$/);
    expect(line(text, 'tollgate_requests_total{network="eth",method="other",outcome="method_not_found",status="200"}')).toMatch(/ 1$/);
    expect(line(text, 'tollgate_credits_charged_total{network="eth",method="eth_getBlockByHash",team="team_a"}')).toMatch(/ 80$/);

    metrics.requests.add(1, 'eth', 'eth_chainId', 'ok', '200');
    metrics.creditsCharged.add(160, 'eth', 'eth_getBlockByHash', 'team_a');
    text = await metrics.registry.metrics();
    expect(line(text, 'tollgate_requests_total{network="eth",method="eth_chainId",outcome="ok",status="200"}')).toMatch(/ 3$/);
    expect(line(text, 'tollgate_credits_charged_total{network="eth",method="eth_getBlockByHash",team="team_a"}')).toMatch(/ 240$/);
    // A scrape with nothing new changes none of these series.
    const ours = (scrape: string) => scrape.split('\n').filter((candidate) => /^tollgate_(requests|credits_charged)_total\{/.test(candidate));
    expect(ours(await metrics.registry.metrics())).toEqual(ours(text));
  });

  it('exposes histograms as cumulative buckets (le inclusive), +Inf, sum and count', async () => {
    const metrics = createMetrics();
    for (const seconds of [0.0004, 0.0005, 0.003, 20]) metrics.requestDuration.observe(seconds, 'eth', 'eth_getBlockByHash');
    const text = await metrics.registry.metrics();
    const series = 'network="eth",method="eth_getBlockByHash"';
    expect(text).toContain('# TYPE tollgate_request_duration_seconds histogram');
    expect(line(text, `tollgate_request_duration_seconds_bucket{${series},le="0.0005"}`)).toMatch(/ 2$/);
    expect(line(text, `tollgate_request_duration_seconds_bucket{${series},le="0.001"}`)).toMatch(/ 2$/);
    expect(line(text, `tollgate_request_duration_seconds_bucket{${series},le="0.005"}`)).toMatch(/ 3$/);
    expect(line(text, `tollgate_request_duration_seconds_bucket{${series},le="10"}`)).toMatch(/ 3$/);
    expect(line(text, `tollgate_request_duration_seconds_bucket{${series},le="+Inf"}`)).toMatch(/ 4$/);
    expect(line(text, `tollgate_request_duration_seconds_count{${series}}`)).toMatch(/ 4$/);
    expect(Number(line(text, `tollgate_request_duration_seconds_sum{${series}}`)!.split(' ')[1])).toBeCloseTo(20.0039, 6);
  });
});

describe('metric names', () => {
  // What `promtool check metrics` enforces on names: `_total` belongs to counters, and only to them.
  it('ends every counter in _total and no other metric', async () => {
    const metrics = createMetrics();
    const types = (await metrics.registry.metrics())
      .split('\n')
      .filter((candidate) => candidate.startsWith('# TYPE '))
      .map((candidate) => candidate.split(' ') as [string, string, string, string]);
    expect(types.length).toBeGreaterThan(20);
    for (const [, , name, type] of types) {
      if (type === 'counter') expect(name, `${name} is a counter`).toMatch(/_total$/);
      else expect(name, `${name} is a ${type}`).not.toMatch(/_total$/);
    }
  });

  it("keeps the by-type active resources whose _total-suffixed sums it drops", async () => {
    const metrics = createMetrics();
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/^tollgate_nodejs_active_resources\{type="[A-Za-z]+"\} \d+$/m);
    expect(text).not.toMatch(/^tollgate_nodejs_active_\w+_total/m);
  });
});
