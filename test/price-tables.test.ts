// The built-in provider price tables (src/routing/price-tables.ts): docs/upstream-pricing.md lists
// each table exactly as the code has it (unit, source, date read, default, every method with its
// price), every price is a whole number of units, `unitsOf` finds only a table's own methods, and
// each table prices the catalogue's methods the provider publishes a price for.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CATALOGUE, type NetworkKind } from '../src/methods/catalogue.js';
import { PROVIDER_NAMES, PROVIDER_PRICE_TABLES, unitsOf, type ProviderName, type ProviderPriceTable } from '../src/routing/price-tables.js';

const DOC = readFileSync(join(process.cwd(), 'docs', 'upstream-pricing.md'), 'utf8');

const HEADINGS: Record<ProviderName, string> = { alchemy: '## Alchemy', infura: '## Infura', quicknode: '## QuickNode', helius: '## Helius' };

/** The text from a `## ` heading to the next `## ` heading. */
function section(heading: string): string {
  const start = DOC.indexOf(`\n${heading}\n`);
  expect(start, heading).toBeGreaterThanOrEqual(0);
  const rest = DOC.slice(start + heading.length + 2);
  const next = rest.search(/\n## /);
  return next < 0 ? rest : rest.slice(0, next);
}

/** The first table of a section as [method, units] pairs, in the doc's order. */
function tableRows(text: string): Array<[string, number]> {
  const lines = text.split('\n');
  const first = lines.findIndex((line) => line.startsWith('|'));
  expect(first).toBeGreaterThanOrEqual(0);
  const rows: Array<[string, number]> = [];
  for (const line of lines.slice(first + 2)) {
    if (!line.startsWith('|')) break;
    const [method, units] = line.replace(/^\||\|$/g, '').split('|').map((cell) => cell.trim());
    expect(method, line).toMatch(/^`[^`]+`$/);
    expect(units, line).toMatch(/^\d+$/);
    rows.push([method!.slice(1, -1), Number(units)]);
  }
  return rows;
}

/** The value of a `- Name: value` line of a section. */
function field(text: string, name: string): string {
  const match = new RegExp(`^- ${name}: (.+)$`, 'm').exec(text);
  expect(match, `${name} line`).not.toBeNull();
  return match![1]!;
}

const catalogueMethods = (kind: NetworkKind): string[] => CATALOGUE[kind].groups.flatMap((group) => group.methods);
const unlisted = (table: ProviderPriceTable, methods: string[]): string[] => methods.filter((method) => !Object.hasOwn(table.methods, method));

describe('docs/upstream-pricing.md', () => {
  it('has one section per built-in provider and no other provider section', () => {
    const providerSections = [...DOC.matchAll(/^## (.+)$/gm)].map((match) => `## ${match[1]}`).filter((heading) => Object.values(HEADINGS).includes(heading));
    expect(providerSections).toEqual(PROVIDER_NAMES.map((name) => HEADINGS[name]));
  });

  for (const name of PROVIDER_NAMES) {
    it(`lists the ${name} table exactly as the code has it`, () => {
      const table = PROVIDER_PRICE_TABLES[name];
      const text = section(HEADINGS[name]);
      expect(field(text, 'Unit')).toBe(table.unit);
      expect(field(text, 'Source')).toBe(`<${table.source}>`);
      expect(field(text, 'Read')).toMatch(new RegExp(`^${table.retrieved}\\b`));
      expect(field(text, 'Any other method')).toMatch(new RegExp(`^\\*\\*${table.otherwise}\\*\\* ${table.unit.replace(/s$/, '')}`));
      expect(tableRows(text)).toEqual(Object.entries(table.methods));
    });
  }
});

describe('built-in price tables', () => {
  for (const name of PROVIDER_NAMES) {
    it(`${name}: whole units for every method and a positive default, a source and a date`, () => {
      const table = PROVIDER_PRICE_TABLES[name];
      expect(Object.keys(table.methods).length).toBeGreaterThan(0);
      for (const [method, units] of Object.entries(table.methods)) {
        // 0 is a real price (Alchemy bills eth_chainId and a few others at 0 CU), never a gap.
        expect(Number.isSafeInteger(units) && units >= 0, `${method}: ${units}`).toBe(true);
      }
      expect(Number.isSafeInteger(table.otherwise) && table.otherwise > 0, `otherwise: ${table.otherwise}`).toBe(true);
      expect(table.source).toMatch(/^https:\/\/[^\s]+$/);
      expect(table.retrieved).toMatch(/^\d{4}-\d{2}-\d{2}$/);
      expect(new Date(`${table.retrieved}T00:00:00Z`).toISOString().slice(0, 10)).toBe(table.retrieved);
    });

    it(`${name}: the table cannot be changed at run time`, () => {
      const table = PROVIDER_PRICE_TABLES[name];
      expect(() => {
        (table.methods as Record<string, number>)['eth_call'] = 1;
      }).toThrow(TypeError);
      expect(() => {
        (table as { otherwise: number }).otherwise = 1;
      }).toThrow(TypeError);
    });
  }

  it('only zeros are the methods Alchemy lists as free', () => {
    const zeros = PROVIDER_NAMES.flatMap((name) => Object.entries(PROVIDER_PRICE_TABLES[name].methods).filter(([, units]) => units === 0).map(([method]) => `${name}:${method}`));
    expect(zeros.sort()).toEqual(['alchemy:eth_chainId', 'alchemy:eth_protocolVersion', 'alchemy:eth_syncing', 'alchemy:net_listening', 'alchemy:net_version']);
  });
});

describe('unitsOf', () => {
  for (const name of PROVIDER_NAMES) {
    it(`${name}: the listed price for every listed method, the default for any other`, () => {
      const table = PROVIDER_PRICE_TABLES[name];
      for (const [method, units] of Object.entries(table.methods)) expect(unitsOf(table, method), method).toBe(units);
      for (const method of ['eth_notAMethod', '', '*', 'ETH_CALL', 'eth_call ']) expect(unitsOf(table, method), method).toBe(table.otherwise);
    });

    it(`${name}: names of Object.prototype members cost the default, not a prototype property`, () => {
      const table = PROVIDER_PRICE_TABLES[name];
      for (const method of ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf', '__defineGetter__']) {
        expect(unitsOf(table, method), method).toBe(table.otherwise);
      }
    });
  }

  it('finds a method whose name is a prototype member when the table does list it', () => {
    // Object.fromEntries makes "__proto__" an own key (a literal would set the prototype instead).
    const table: ProviderPriceTable = {
      unit: 'credits',
      source: 'https://example.com/prices',
      retrieved: '2026-01-01',
      methods: Object.fromEntries([['__proto__', 7], ['constructor', 9]]),
      otherwise: 3,
    };
    expect(unitsOf(table, '__proto__')).toBe(7);
    expect(unitsOf(table, 'constructor')).toBe(9);
    expect(unitsOf(table, 'toString')).toBe(3);
  });
});

describe('catalogue coverage', () => {
  const KEY_EVM_METHODS = ['eth_call', 'eth_getLogs', 'eth_getBlockByHash', 'eth_blockNumber', 'eth_sendRawTransaction'];

  for (const name of ['alchemy', 'infura', 'quicknode'] as const) {
    it(`${name} lists the key EVM methods`, () => {
      expect(unlisted(PROVIDER_PRICE_TABLES[name], KEY_EVM_METHODS)).toEqual([]);
    });
  }

  // The catalogue's EVM methods a provider's published list does not price (docs/upstream-pricing.md
  // names them). A method added to the catalogue fails here until its price at each provider is looked up.
  it('the EVM tables price every catalogue method their provider publishes a price for', () => {
    const evm = catalogueMethods('evm');
    expect(unlisted(PROVIDER_PRICE_TABLES.alchemy, evm)).toEqual(['eth_hashrate', 'eth_mining', 'net_peerCount', 'eth_blobBaseFee', 'trace_callMany', 'debug_storageRangeAt']);
    expect(unlisted(PROVIDER_PRICE_TABLES.infura, evm)).toEqual(['eth_newPendingTransactionFilter']);
    expect(unlisted(PROVIDER_PRICE_TABLES.quicknode, evm)).toEqual([]);
  });

  it('the asset-network tables price every catalogue method their provider publishes a price for', () => {
    const asset = catalogueMethods('asset');
    expect(unlisted(PROVIDER_PRICE_TABLES.infura, asset)).toEqual([]);
    expect(unlisted(PROVIDER_PRICE_TABLES.quicknode, asset)).toEqual(['searchAssets', 'getSignaturesForAsset', 'getTokenAccounts', 'getNftEditions']);
    expect(unlisted(PROVIDER_PRICE_TABLES.alchemy, asset)).toEqual([
      'getAssetBatch', 'getAssetProofBatch', 'getSignaturesForAsset', 'getRecentPrioritizationFees', 'getStakeMinimumDelegation', 'getTokenAccountsByDelegate',
    ]);
    // Helius prices every DAS method at 10 and standard RPC calls at its default of 1.
    const das = CATALOGUE.asset.groups.find((group) => group.methods.includes('getAssetsByGroup'))!.methods;
    for (const method of das) expect(unitsOf(PROVIDER_PRICE_TABLES.helius, method), method).toBe(10);
    expect(unitsOf(PROVIDER_PRICE_TABLES.helius, 'getBalance')).toBe(1);
  });

  it('key figures match the providers\' published lists', () => {
    const { alchemy, infura, quicknode, helius } = PROVIDER_PRICE_TABLES;
    expect([unitsOf(alchemy, 'eth_call'), unitsOf(alchemy, 'eth_getLogs'), unitsOf(alchemy, 'eth_blockNumber'), unitsOf(alchemy, 'eth_sendRawTransaction')]).toEqual([26, 60, 10, 40]);
    expect([unitsOf(infura, 'eth_call'), unitsOf(infura, 'eth_getLogs'), unitsOf(infura, 'eth_getBlockReceipts'), unitsOf(infura, 'getAccountInfo')]).toEqual([80, 255, 1000, 180]);
    expect([unitsOf(quicknode, 'eth_call'), unitsOf(quicknode, 'debug_traceTransaction'), unitsOf(quicknode, 'getAssetsByGroup'), unitsOf(quicknode, 'getSupply')]).toEqual([20, 40, 60, 120]);
    expect([unitsOf(helius, 'getAssetsByGroup'), unitsOf(helius, 'getProgramAccounts'), unitsOf(helius, 'getSignatureStatuses')]).toEqual([10, 10, 1]);
  });
});
