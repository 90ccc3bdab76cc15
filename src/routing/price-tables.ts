/** Placeholder until the built-in tables land (replaced by the tables' own module). */
export const PROVIDER_NAMES = ['alchemy', 'infura', 'quicknode', 'helius'] as const;
export type ProviderName = (typeof PROVIDER_NAMES)[number];
export interface ProviderPriceTable {
  unit: string;
  source: string;
  retrieved: string;
  methods: Readonly<Record<string, number>>;
  otherwise: number;
}
export const PROVIDER_PRICE_TABLES: Readonly<Record<ProviderName, ProviderPriceTable>> = {
  alchemy: { unit: 'compute units', source: '', retrieved: '', methods: { eth_call: 26, eth_getLogs: 75, eth_blockNumber: 10, eth_getBlockByHash: 16 }, otherwise: 26 },
  infura: { unit: 'credits', source: '', retrieved: '', methods: { eth_call: 80, eth_getLogs: 255, eth_blockNumber: 80 }, otherwise: 80 },
  quicknode: { unit: 'API credits', source: '', retrieved: '', methods: {}, otherwise: 20 },
  helius: { unit: 'credits', source: '', retrieved: '', methods: { getAssetsByGroup: 10 }, otherwise: 1 },
};
export function unitsOf(table: ProviderPriceTable, method: string): number {
  return Object.hasOwn(table.methods, method) ? table.methods[method]! : table.otherwise;
}
