import { CATALOGUE, type NetworkKind } from '../methods/catalogue.js';

/**
 * What one call costs at the big providers, in the provider's own unit, as each publishes it.
 * An upstream's `price.units` names one of these tables (or gives its own map); the units of a
 * call are what `selection: cheapest` compares, what a team's provider spend is counted in, and
 * what an upstream's `quota` is measured in.
 *
 * The figures are copied from the providers' public pricing pages, read on the date in each
 * table; providers change them, and a contract can differ from the public list, so
 * docs/upstream-pricing.md (kept equal to these tables by `test/price-tables.test.ts`) tells the
 * operator to check theirs. Where a provider states a rule ("all methods cost N") rather than a
 * row per method, the rule is applied to the methods Tollgate's catalogue serves; a method whose
 * price the source does not settle is left out, so it costs `otherwise`, and the doc says so.
 */

export const PROVIDER_NAMES = ['alchemy', 'infura', 'quicknode', 'helius'] as const;
export type ProviderName = (typeof PROVIDER_NAMES)[number];

export interface ProviderPriceTable {
  /** What the provider calls its unit: "compute units", "credits", "API credits". */
  unit: string;
  /** Where the figures come from (the provider's public pricing/docs page URL) and when they were read (YYYY-MM-DD). */
  source: string;
  retrieved: string;
  /** Units per method, for the methods the provider lists. */
  methods: Readonly<Record<string, number>>;
  /** Units of a method the table does not list (the provider's stated default, or its most common price; say which in a comment). */
  otherwise: number;
}

/**
 * A frozen method table from groups of methods sharing a price. A method given twice is a
 * copying mistake (two rows of the source, or a rule and an exception that overlap), so it
 * throws at load rather than letting the later group win unnoticed.
 */
function priceList(groups: ReadonlyArray<readonly [units: number, methods: readonly string[]]>): Readonly<Record<string, number>> {
  const table: Record<string, number> = {};
  for (const [units, methods] of groups) {
    for (const method of methods) {
      if (Object.hasOwn(table, method)) throw new Error(`price table lists ${method} twice`);
      table[method] = units;
    }
  }
  return Object.freeze(table);
}

/** Every method the catalogue serves on a network kind (the scope of a provider's "all methods" rule). */
function catalogueMethods(kind: NetworkKind): string[] {
  return CATALOGUE[kind].groups.flatMap((group) => group.methods);
}

/**
 * Alchemy's compute-unit table: the EVM standard, debug and trace sections and the Solana
 * standard and DAS sections. The CU column is what is billed; the separate "throughput CU" of
 * a few methods (eth_sendRawTransaction 250, eth_getBlockReceipts 500, debug_* 1000) weighs
 * only against the app's per-second throughput, so it is not a price here.
 */
const ALCHEMY: ProviderPriceTable = {
  unit: 'compute units',
  source: 'https://www.alchemy.com/docs/reference/compute-unit-costs',
  retrieved: '2026-11-26',
  methods: priceList([
    // Alchemy lists these at 0 CU: they are free, not unpriced.
    [0, ['net_version', 'eth_chainId', 'eth_syncing', 'eth_protocolVersion', 'net_listening']],
    [10, ['eth_uninstallFilter', 'eth_accounts', 'eth_blockNumber', 'eth_subscribe', 'eth_unsubscribe', 'eth_feeHistory', 'eth_maxPriorityFeePerGas', 'eth_createAccessList']],
    [20, [
      'eth_getTransactionReceipt', 'eth_getUncleByBlockHashAndIndex', 'eth_getUncleByBlockNumberAndIndex',
      'eth_getTransactionByBlockHashAndIndex', 'eth_getTransactionByBlockNumberAndIndex', 'eth_getUncleCountByBlockHash',
      'eth_getUncleCountByBlockNumber', 'web3_clientVersion', 'web3_sha3', 'eth_getBlockByNumber', 'eth_getStorageAt',
      'eth_getTransactionByHash', 'eth_gasPrice', 'eth_getBalance', 'eth_getCode', 'eth_getFilterChanges', 'eth_newBlockFilter',
      'eth_newFilter', 'eth_newPendingTransactionFilter', 'eth_getBlockTransactionCountByHash', 'eth_getBlockTransactionCountByNumber',
      'eth_getProof', 'eth_getBlockByHash', 'erigon_forks', 'erigon_getHeaderByHash', 'erigon_getHeaderByNumber',
      'erigon_getLogsByHash', 'erigon_issuance', 'eth_getTransactionCount', 'eth_estimateGas', 'eth_getBlockReceipts',
      'trace_get', 'trace_block',
    ]],
    [26, ['eth_call']],
    [40, [
      'eth_simulateV1', 'eth_sendRawTransaction',
      'debug_traceTransaction', 'debug_traceCall', 'debug_traceBlockByHash', 'debug_traceBlockByNumber',
      'trace_transaction', 'trace_call', 'trace_rawTransaction', 'trace_filter',
    ]],
    [60, ['eth_getFilterLogs', 'eth_getLogs']],
    [80, ['trace_replayTransaction', 'trace_replayBlockTransactions']],
    // Solana standard JSON-RPC section (getTokenOwnersByDelegate is spelled as Alchemy's table spells it).
    [5, ['getVoteAccounts', 'getBlockCommitment']],
    [10, [
      'sendTransaction', 'getAccountInfo', 'getTokenOwnersByDelegate', 'getRecentBlockhash', 'getBlocks', 'getTokenAccountsByOwner',
      'getMinimumBalanceForRentExemption', 'getBalance', 'getGenesisHash', 'getBlockProduction',
    ]],
    [11, ['getMultipleAccounts', 'getFeeCalculatorForBlockhash']],
    [16, ['getTransactionCount']],
    [20, [
      'getLeaderSchedule', 'requestAirdrop', 'getBlocksWithLimit', 'getHealth', 'getIdentity', 'getLatestBlockhash', 'getSlot',
      'getInflationRate', 'getMaxRetransmitSlot', 'getRecentPerformanceSamples', 'getEpochInfo', 'getTokenAccountBalance',
      'getBlockTime', 'getHighestSnapshotSlot', 'getEpochSchedule', 'getStakeActivation', 'getMaxShredInsertSlot', 'getVersion',
      'isBlockhashValid', 'getFeeForMessage', 'getFees', 'getConfirmedBlocks', 'getTokenLargestAccounts', 'getInflationGovernor',
      'getSlotLeader', 'minimumLedgerSlot', 'getBlockHeight', 'simulateTransaction', 'getSignatureStatuses', 'getTokenSupply',
      'getSlotLeaders', 'getClusterNodes', 'getSignaturesForAddress', 'getProgramAccounts',
    ]],
    [40, [
      'getFirstAvailableBlock', 'getConfirmedSignaturesForAddress2', 'getConfirmedTransaction', 'getTransaction', 'getBlock',
      'getConfirmedBlock', 'getInflationReward',
    ]],
    [160, ['getSupply']],
    [3000, ['getLargestAccounts']],
    // Solana DAS section, under Alchemy's names (its batch methods are getAssets, getAssetProofs, getAssetSignatures).
    [80, ['getAsset']],
    [160, ['getAssetProof', 'getAssetSignatures', 'getNftEditions', 'getTokenAccounts']],
    [480, ['getAssets', 'getAssetProofs', 'getAssetsByAuthority', 'getAssetsByOwner', 'getAssetsByGroup', 'getAssetsByCreator', 'searchAssets']],
  ]),
  // Alchemy states no price for unlisted methods; 20 CU is the most common price of its EVM table.
  otherwise: 20,
};

/**
 * Infura's credit table: the Ethereum standard, trace, filter and debug sections (Infura's
 * baseline for every EVM network without its own row), and its Solana rule, "all Solana
 * methods are charged at 180 credits per request", applied to the catalogue's asset methods.
 */
const INFURA: ProviderPriceTable = {
  unit: 'credits',
  source: 'https://docs.metamask.io/services/get-started/pricing/credit-cost/',
  retrieved: '2026-11-26',
  methods: priceList([
    [5, ['eth_chainId', 'eth_hashrate', 'eth_mining', 'eth_protocolVersion', 'eth_subscribe', 'eth_syncing', 'net_listening', 'net_version']],
    [10, ['eth_unsubscribe']],
    [80, [
      'eth_accounts', 'eth_blockNumber', 'eth_call', 'eth_createAccessList', 'eth_feeHistory', 'eth_gasPrice', 'eth_getBalance',
      'eth_getBlockByHash', 'eth_getBlockByNumber', 'eth_getCode', 'eth_getStorageAt', 'eth_getTransactionByHash',
      'eth_getTransactionCount', 'eth_getTransactionReceipt', 'eth_getWork', 'eth_maxPriorityFeePerGas', 'eth_sendRawTransaction',
      'eth_sign', 'eth_submitWork', 'net_peerCount', 'web3_clientVersion',
      'eth_newBlockFilter', 'eth_newFilter', 'eth_uninstallFilter',
    ]],
    [140, ['eth_getFilterChanges']],
    [150, [
      'eth_getBlockTransactionCountByHash', 'eth_getBlockTransactionCountByNumber', 'eth_getProof',
      'eth_getTransactionByBlockHashAndIndex', 'eth_getTransactionByBlockNumberAndIndex', 'eth_getUncleByBlockHashAndIndex',
      'eth_getUncleByBlockNumberAndIndex', 'eth_getUncleCountByBlockHash', 'eth_getUncleCountByBlockNumber',
    ]],
    [255, ['eth_getLogs', 'eth_getFilterLogs']],
    [300, ['eth_blobBaseFee', 'eth_estimateGas', 'trace_block', 'trace_call', 'trace_callMany', 'trace_filter', 'trace_transaction']],
    [1000, [
      'eth_getBlockReceipts', 'debug_storageRangeAt', 'debug_traceBlock', 'debug_traceBlockByHash', 'debug_traceBlockByNumber',
      'debug_traceCall', 'debug_traceTransaction',
    ]],
    [180, catalogueMethods('asset')],
  ]),
  // Infura's stated default: a method in neither the network's nor the Ethereum table costs 80 credits.
  otherwise: 80,
};

/** QuickNode's "Trace & Debug" advanced APIs cost twice the chain's price per method. */
const isTraceOrDebug = (method: string): boolean => method.startsWith('trace_') || method.startsWith('debug_');
/** QuickNode's named "large calls", at four times the chain's price. */
const QUICKNODE_LARGE_EVM = ['txpool_content', 'trace_replayBlockTransactions', 'trace_replayTransaction'];
const QUICKNODE_LARGE_SOLANA = ['getLargestAccounts', 'getSupply'];
/** The catalogue's DAS group (the asset group with getAssetsByGroup) and its standard Solana RPC methods (the rest). */
const dasMethods = CATALOGUE.asset.groups.find((group) => group.methods.includes('getAssetsByGroup'))?.methods ?? [];
const solanaRpcMethods = catalogueMethods('asset').filter((method) => !dasMethods.includes(method));

/**
 * QuickNode publishes per-chain multipliers rather than a row per method: on Ethereum (and most
 * EVM chains) all methods cost 20 API credits, on Solana 30; trace/debug and Solana's "getasset
 * methods" cost 2x the chain's figure, the named large calls 4x. Applied here to the catalogue's
 * methods (its other advanced APIs, token and NFT, are not in the catalogue). Of the DAS methods
 * only those named getAsset* are listed: searchAssets, getSignaturesForAsset, getTokenAccounts and
 * getNftEditions could be 1x or 2x under the page's wording.
 */
const evmMethods = catalogueMethods('evm');
const QUICKNODE: ProviderPriceTable = {
  unit: 'API credits',
  source: 'https://www.quicknode.com/api-credits/eth',
  retrieved: '2026-11-26',
  methods: priceList([
    [20, evmMethods.filter((method) => !isTraceOrDebug(method))],
    [40, evmMethods.filter(isTraceOrDebug)],
    [80, QUICKNODE_LARGE_EVM],
    [30, solanaRpcMethods.filter((method) => !QUICKNODE_LARGE_SOLANA.includes(method))],
    [60, dasMethods.filter((method) => method.startsWith('getAsset'))],
    [120, QUICKNODE_LARGE_SOLANA],
  ]),
  // QuickNode's stated Ethereum figure ("all methods": 20); on Solana a method outside the catalogue costs 30.
  otherwise: 20,
};

/**
 * Helius's credit table: standard RPC calls cost 1, getProgramAccounts and historical
 * (archival) calls 10, every DAS method 10. getSignatureStatuses costs 10 only with
 * `searchTransactionHistory` set and 1 without (its default), which a per-method table cannot
 * tell apart, so it is not listed and costs the default 1.
 */
const HELIUS: ProviderPriceTable = {
  unit: 'credits',
  source: 'https://www.helius.dev/docs/billing/credits',
  retrieved: '2026-11-26',
  methods: priceList([
    [1, ['simulateBundle']],
    [10, [
      'getProgramAccounts', 'getBlock', 'getBlocks', 'getBlocksWithLimit', 'getSignaturesForAddress', 'getTransaction', 'getBlockTime',
      'getInflationReward',
      'getAsset', 'getAssetProof', 'getAssetProofBatch', 'getNftEditions', 'getAssetsByOwner', 'getAssetsByAuthority',
      'getAssetsByCreator', 'getAssetsByGroup', 'searchAssets', 'getAssetBatch', 'getSignaturesForAsset', 'getTokenAccounts',
    ]],
    [100, ['getTransactionsForAddress']],
  ]),
  // Helius's stated price of "all RPC calls except those listed separately".
  otherwise: 1,
};

export const PROVIDER_PRICE_TABLES: Readonly<Record<ProviderName, ProviderPriceTable>> = Object.freeze({
  alchemy: Object.freeze(ALCHEMY),
  infura: Object.freeze(INFURA),
  quicknode: Object.freeze(QUICKNODE),
  helius: Object.freeze(HELIUS),
});

/** Units one call of `method` costs under `table`. Own keys only (a method named `constructor` must not find the prototype). */
export function unitsOf(table: ProviderPriceTable, method: string): number {
  return Object.hasOwn(table.methods, method) ? table.methods[method]! : table.otherwise;
}
