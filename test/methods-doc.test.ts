// docs/methods.md and the catalogue stay in step (as docs/errors.md and the error registry do):
// every method of src/methods/catalogue.ts is in the doc's table of its network kind with its
// price, the doc lists no method the catalogue lacks, the deny list is the catalogue's, and the
// doc's example configuration is a valid config.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { CATALOGUE } from '../src/methods/catalogue.js';

const DOC = readFileSync(join(process.cwd(), 'docs', 'methods.md'), 'utf8');

/** The text from a heading to the next heading of the same or a higher level. */
function section(heading: string): string {
  const start = DOC.indexOf(`\n${heading}\n`);
  expect(start, heading).toBeGreaterThanOrEqual(0);
  const level = heading.indexOf(' ');
  const rest = DOC.slice(start + heading.length + 2);
  const next = rest.search(new RegExp(`\\n#{1,${level}} `));
  return next < 0 ? rest : rest.slice(0, next);
}

/** The rows of the first table in `text`, as cells. */
function tableRows(text: string): string[][] {
  const lines = text.split('\n');
  const first = lines.findIndex((line) => line.startsWith('|'));
  const rows: string[][] = [];
  for (const line of lines.slice(first)) {
    if (!line.startsWith('|')) break;
    rows.push(line.replace(/^\||\|$/g, '').split('|').map((cell) => cell.trim()));
  }
  return rows.slice(2); // header and separator
}

const names = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((match) => match[1]!);

/** `method credits [ws]` for every method of a price table. */
function priced(text: string): string[] {
  return tableRows(text).flatMap(([credits, methods, notes]) =>
    names(methods!).map((method) => `${method} ${credits}${/WebSocket only/.test(notes ?? '') ? ' ws' : ''}`),
  );
}

function catalogued(kind: 'evm' | 'asset'): string[] {
  return CATALOGUE[kind].groups.flatMap((group) => group.methods.map((method) => `${method} ${group.credits}${group.webSocketOnly ? ' ws' : ''}`));
}

describe('docs/methods.md', () => {
  it('lists every EVM catalogue method with its price, and nothing else', () => {
    const doc = priced(section('## EVM networks'));
    expect(new Set(doc).size).toBe(doc.length);
    expect([...doc].sort()).toEqual([...catalogued('evm')].sort());
  });

  it('lists every asset catalogue method with its price, and nothing else', () => {
    const doc = priced(section('## Asset networks (Solana DAS)'));
    expect([...doc].sort()).toEqual([...catalogued('asset')].sort());
    expect(doc.filter((entry) => entry.endsWith(' 160'))).toHaveLength(12);
  });

  it('lists the default deny list with a reason for each group', () => {
    const rows = tableRows(section('### Denied by default'));
    expect(rows.map(([patterns]) => names(patterns!))).toEqual(CATALOGUE.evm.denied.map((group) => [...group.patterns]));
    for (const [, why] of rows) expect(why!.length).toBeGreaterThan(40);
    expect(CATALOGUE.asset.denied).toEqual([]);
  });

  it('states the unlisted price the catalogue uses', () => {
    expect(CATALOGUE.evm.unlistedCredits).toBe(80);
    expect(CATALOGUE.asset.unlistedCredits).toBe(80);
    expect(section('## EVM networks')).toContain('Any other method that is not\ndenied costs **80**');
  });

  it('its example configuration is valid', () => {
    const yaml = /```yaml\n([\s\S]*?)```/.exec(section('## Configuration'))?.[1];
    expect(yaml).toBeDefined();
    const config = parseConfig(parseYaml(yaml!) as unknown, { ALCHEMY_API_KEY: 'k' }, 'docs/methods.md');
    const network = config.networks[0]!;
    expect(network.methods['*']).toBe(120);
    expect(network.denyMethods).toEqual(['debug_*', 'eth_getProof']);
    expect(network.upstreams[1]!.methods.deny).toEqual(['trace_*', 'debug_*']);
  });
});
