import { defineConfig } from 'vitest/config';

/**
 * The fast project: tests that start no process (no anvil, redis-server, gateway process or
 * browser), in-process code and real HTTP servers on port 0 only. About half a minute: the first
 * check of a change (`npx vitest run --project fast`). The slow project is everything else but
 * the few that run alone (below); `npm test` runs all three.
 */
const FAST = [
  'test/caching-doc.test.ts',
  'test/dashboard.test.ts',
  'test/envelope-scanner.test.ts',
  'test/envelope.test.ts',
  'test/errors-doc.test.ts',
  'test/gateway-parts.test.ts',
  'test/json-differential.test.ts',
  'test/json-validator.test.ts',
  'test/ledger-rule.test.ts',
  'test/line-writer.test.ts',
  'test/logs-splitter.test.ts',
  'test/methods-doc.test.ts',
  'test/metrics-registry.test.ts',
  'test/network-resolver.test.ts',
  'test/ordered-trie.test.ts',
  'test/price-tables.test.ts',
  'test/quota-alerts.test.ts',
  'test/quota-forecast.test.ts',
  'test/request-line.test.ts',
  'test/request-scanner.test.ts',
  'test/routing-policies.test.ts',
  'test/sample-das.test.ts',
  'test/sqlite-checkpoints.test.ts',
  'test/sqlite-lock-wait.test.ts',
  'test/upstream-budget.test.ts',
  'test/upstream-quotas.test.ts',
];

/**
 * Tests that measure what a provider sees per second (arrival times at real upstream processes):
 * on 2 cores, other test files' processes delay some of their sends and bunch others, which is the
 * machine and not the gateway. They run after everything else, one file at a time.
 */
const ALONE = ['test/upstream-rate-limits.test.ts', 'test/upstream-budgets.test.ts'];

export default defineConfig({
  test: {
    // Tests start real processes (anvil, redis-server, gateways); give them room on a 2-core machine.
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
    projects: [
      { extends: true, test: { name: 'fast', include: FAST, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'slow', include: ['test/**/*.test.ts'], exclude: [...FAST, ...ALONE], sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'alone', include: ALONE, maxWorkers: 1, sequence: { groupOrder: 1 } } },
    ],
  },
});
