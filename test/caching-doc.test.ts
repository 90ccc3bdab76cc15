// docs/caching.md lists the response cache's method table exactly as src/cache/method-classes.ts
// has it: every method with its class and where its block is found, per network kind.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { describeLocator, METHOD_CACHING } from '../src/cache/method-classes.js';

const DOC = readFileSync(join(process.cwd(), 'docs', 'caching.md'), 'utf8');

/** The rows of the table under a heading, as [method, class, block]. */
function rowsUnder(heading: string): string[][] {
  const start = DOC.indexOf(`\n${heading}\n`);
  expect(start, heading).toBeGreaterThanOrEqual(0);
  const lines = DOC.slice(start).split('\n').slice(2);
  const first = lines.findIndex((line) => line.startsWith('|'));
  const rows: string[][] = [];
  for (const line of lines.slice(first + 2)) {
    if (!line.startsWith('|')) break;
    rows.push(line.replace(/^\||\|$/g, '').split('|').map((cell) => cell.trim()));
  }
  return rows;
}

describe('docs/caching.md', () => {
  for (const [kind, heading] of [['evm', '### EVM networks'], ['asset', '### Asset networks']] as const) {
    it(`lists every ${kind} method of the table with its class and block, and no other`, () => {
      const expected = Object.entries(METHOD_CACHING[kind]).map(([method, caching]) => [`\`${method}\``, caching.class, describeLocator(caching)]);
      expect(rowsUnder(heading)).toEqual(expected);
    });
  }
});
