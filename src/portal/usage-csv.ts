import type { UsageRow } from '../store/index.js';

/**
 * Usage as CSV (RFC 4180, CRLF line ends): one row per UTC day, key, network and method, the
 * rows of the usage report, with what the calls cost at the providers beside the credits. Fields that could be read as formulas by a spreadsheet are quoted
 * with a leading apostrophe (ids and names here never start with =, +, - or @, but labels could).
 */

export const USAGE_CSV_HEADER = ['day', 'team_id', 'key_id', 'network', 'method', 'credits', 'requests', 'upstream_units', 'upstream_usd', 'saved_units'] as const;

function field(value: string | number): string {
  let text = String(value);
  if (typeof value === 'string' && /^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export function usageCsv(rows: readonly UsageRow[]): string {
  const lines = [USAGE_CSV_HEADER.join(',')];
  for (const row of rows) {
    // Provider spend is 0 where the network has no priced upstream (docs/budgets.md).
    const spend = [row.upstreamUnits ?? 0, row.upstreamUsd ?? 0, row.savedUnits ?? 0];
    lines.push([row.day, row.teamId, row.keyId, row.network, row.method, row.credits, row.requests, ...spend].map(field).join(','));
  }
  return `${lines.join('\r\n')}\r\n`;
}
