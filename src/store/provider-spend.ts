import type { ProviderSpendRow, UsageRow } from './types.js';

/**
 * Usage rows with the provider spend of the same day, team, key, network and method added
 * (`upstreamUnits`, `upstreamUsd`, `savedUnits`); spend without any charged call (calls that
 * failed everywhere) becomes a row of its own with no credits. Ordered by day, team, key,
 * network and method, field by field in code-unit order, as SQLite's ORDER BY (localeCompare
 * would fold case and ignore separators: 'eth-sepolia' would sort before 'eth').
 */
export function withProviderSpend(rows: readonly UsageRow[], spend: readonly ProviderSpendRow[]): UsageRow[] {
  const keyOf = (row: { day: string; teamId: string; keyId: string; network: string; method: string }) => `${row.day}\t${row.teamId}\t${row.keyId}\t${row.network}\t${row.method}`;
  const merged = new Map<string, UsageRow>(rows.map((row) => [keyOf(row), { ...row }]));
  for (const entry of spend) {
    const id = keyOf(entry);
    let row = merged.get(id);
    if (row === undefined) {
      row = { day: entry.day, teamId: entry.teamId, keyId: entry.keyId, network: entry.network, method: entry.method, credits: 0, requests: 0 };
      merged.set(id, row);
    }
    row.upstreamUnits = (row.upstreamUnits ?? 0) + entry.units;
    row.upstreamUsd = (row.upstreamUsd ?? 0) + entry.usd;
    row.savedUnits = (row.savedUnits ?? 0) + entry.savedUnits;
  }
  const fields = ['day', 'teamId', 'keyId', 'network', 'method'] as const;
  return [...merged.values()].sort((a, b) => {
    for (const field of fields) if (a[field] !== b[field]) return a[field] < b[field] ? -1 : 1;
    return 0;
  });
}
