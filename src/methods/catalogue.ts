import { globsMatcher, globsOverlap } from './method-globs.js';

/**
 * The built-in method catalogue (DESIGN §1.3): per network kind, the methods the gateway serves
 * and their default prices in credits, the price of any other method, and the methods denied by
 * default. This table is the single source of truth: the method table of each network is built
 * from it and the network's config, and `test/methods-doc.test.ts` keeps docs/methods.md in step
 * with it.
 */

/** The kinds of network the gateway serves: EVM JSON-RPC, and Solana with the DAS (asset) API. */
export const NETWORK_KINDS = ['evm', 'asset'] as const;
export type NetworkKind = (typeof NETWORK_KINDS)[number];

export interface CatalogueGroup {
  credits: number;
  methods: readonly string[];
  /** Served over WebSocket only (DESIGN §8); over HTTP these are `-32601`. */
  webSocketOnly?: true;
  /** Why the group exists or costs what it costs, for docs/methods.md. */
  note?: string;
}

export interface DeniedGroup {
  /** Method names or globs (`*` matches any run of characters). */
  patterns: readonly string[];
  /** Why they are denied, for docs/methods.md. */
  reason: string;
}

export interface Catalogue {
  groups: readonly CatalogueGroup[];
  /** Price of a method not in the catalogue and not configured (a network's `methods["*"]` overrides it). */
  unlistedCredits: number;
  /** Denied unless the network's `allowMethods` lets them through. */
  denied: readonly DeniedGroup[];
}

/** Standard Solana JSON-RPC methods served over HTTP (subscriptions are WebSocket methods and are not listed). */
const SOLANA_RPC_METHODS = [
  'getAccountInfo',
  'getBalance',
  'getBlock',
  'getBlockCommitment',
  'getBlockHeight',
  'getBlockProduction',
  'getBlockTime',
  'getBlocks',
  'getBlocksWithLimit',
  'getClusterNodes',
  'getEpochInfo',
  'getEpochSchedule',
  'getFeeForMessage',
  'getFirstAvailableBlock',
  'getGenesisHash',
  'getHealth',
  'getHighestSnapshotSlot',
  'getIdentity',
  'getInflationGovernor',
  'getInflationRate',
  'getInflationReward',
  'getLargestAccounts',
  'getLatestBlockhash',
  'getLeaderSchedule',
  'getMaxRetransmitSlot',
  'getMaxShredInsertSlot',
  'getMinimumBalanceForRentExemption',
  'getMultipleAccounts',
  'getProgramAccounts',
  'getRecentPerformanceSamples',
  'getRecentPrioritizationFees',
  'getSignatureStatuses',
  'getSignaturesForAddress',
  'getSlot',
  'getSlotLeader',
  'getSlotLeaders',
  'getStakeMinimumDelegation',
  'getSupply',
  'getTokenAccountBalance',
  'getTokenAccountsByDelegate',
  'getTokenAccountsByOwner',
  'getTokenLargestAccounts',
  'getTokenSupply',
  'getTransaction',
  'getTransactionCount',
  'getVersion',
  'getVoteAccounts',
  'isBlockhashValid',
  'minimumLedgerSlot',
  'requestAirdrop',
  'sendTransaction',
  'simulateTransaction',
];

export const CATALOGUE: Readonly<Record<NetworkKind, Catalogue>> = {
  evm: {
    groups: [
      {
        credits: 5,
        methods: ['eth_chainId', 'net_version', 'net_listening', 'eth_syncing', 'eth_protocolVersion', 'eth_hashrate', 'eth_mining'],
        note: '`eth_chainId` and `net_version` are answered from the network\'s `chainId`, without an upstream call',
      },
      {
        credits: 80,
        methods: [
          'eth_blockNumber',
          'eth_call',
          'eth_getBalance',
          'eth_getCode',
          'eth_getStorageAt',
          'eth_getTransactionCount',
          'eth_getBlockByNumber',
          'eth_getBlockByHash',
          'eth_getTransactionByHash',
          'eth_getTransactionReceipt',
          'eth_feeHistory',
          'eth_gasPrice',
          'eth_maxPriorityFeePerGas',
          'eth_sendRawTransaction',
          'eth_createAccessList',
          'eth_newFilter',
          'eth_newBlockFilter',
          'eth_newPendingTransactionFilter',
          'eth_uninstallFilter',
          'net_peerCount',
          'web3_clientVersion',
        ],
        note: '`eth_getBlockByHash` is validated, verified and cached (DESIGN §1.1, §4); `eth_newPendingTransactionFilter` is not in Infura\'s table and costs what any other method costs',
      },
      {
        credits: 150,
        methods: [
          'eth_getBlockTransactionCountByHash',
          'eth_getBlockTransactionCountByNumber',
          'eth_getTransactionByBlockHashAndIndex',
          'eth_getTransactionByBlockNumberAndIndex',
          'eth_getUncleByBlockHashAndIndex',
          'eth_getUncleByBlockNumberAndIndex',
          'eth_getUncleCountByBlockHash',
          'eth_getUncleCountByBlockNumber',
          'eth_getProof',
        ],
      },
      { credits: 140, methods: ['eth_getFilterChanges'] },
      { credits: 255, methods: ['eth_getLogs', 'eth_getFilterLogs'] },
      {
        credits: 300,
        methods: ['eth_estimateGas', 'eth_blobBaseFee', 'trace_block', 'trace_call', 'trace_callMany', 'trace_filter', 'trace_transaction'],
      },
      {
        credits: 1000,
        methods: [
          'eth_getBlockReceipts',
          'debug_traceTransaction',
          'debug_traceCall',
          'debug_traceBlockByHash',
          'debug_traceBlockByNumber',
          'debug_storageRangeAt',
        ],
      },
      { credits: 5, methods: ['eth_subscribe'], webSocketOnly: true },
      { credits: 10, methods: ['eth_unsubscribe'], webSocketOnly: true },
    ],
    unlistedCredits: 80,
    denied: [
      {
        patterns: ['eth_sign', 'eth_signTransaction', 'eth_signTypedData*', 'eth_sendTransaction', 'eth_accounts', 'personal_*'],
        reason:
          'they use or unlock the node\'s own accounts: on a shared gateway one team could sign or send with keys that are not theirs (or learn which accounts a node holds); clients sign locally and send `eth_sendRawTransaction`',
      },
      {
        patterns: ['admin_*', 'miner_*', 'txpool_*', 'engine_*'],
        reason: 'they administer the node (peers, mining, the transaction pool, the consensus-layer API): nothing a dapp calls, and an operator\'s business',
      },
      {
        patterns: ['anvil_*', 'evm_*', 'hardhat_*'],
        reason: 'development-node controls (set balances, impersonate accounts, mine, revert snapshots): on a shared node one team would rewrite the chain under everyone else',
      },
    ],
  },
  asset: {
    groups: [
      {
        credits: 160,
        methods: [
          'getAsset',
          'getAssetBatch',
          'getAssetProof',
          'getAssetProofBatch',
          'getAssetsByOwner',
          'getAssetsByAuthority',
          'getAssetsByCreator',
          'getAssetsByGroup',
          'searchAssets',
          'getSignaturesForAsset',
          'getTokenAccounts',
          'getNftEditions',
        ],
        note: 'the DAS methods, one flat price as Helius and Infura price them; only `getAssetsByGroup` is validated by the gateway (DESIGN §1.2), the others pass through',
      },
      { credits: 80, methods: SOLANA_RPC_METHODS, note: 'standard Solana JSON-RPC methods' },
    ],
    unlistedCredits: 80,
    denied: [],
  },
};

/** Why a method is refused on a network: its `denyMethods`, or the default deny list (not allowed back). */
export type DenialSource = 'denyMethods' | 'default';

/** The deny decision of one network (built once per config load, not per request). */
export function createDenyRule(
  kind: NetworkKind,
  settings: { denyMethods: readonly string[]; allowMethods: readonly string[] },
): (method: string) => DenialSource | undefined {
  const configDenied = globsMatcher(settings.denyMethods);
  const defaultDenied = globsMatcher(CATALOGUE[kind].denied.flatMap((group) => group.patterns));
  const allowed = globsMatcher(settings.allowMethods);
  return (method) => {
    if (configDenied?.(method)) return 'denyMethods';
    if (defaultDenied?.(method) && !allowed?.(method)) return 'default';
    return undefined;
  };
}

/**
 * Contradictions in a network's method settings, each with the path (under the network) it
 * concerns: a price for a method that stays denied, or an `allowMethods` entry that allows nothing.
 */
export function methodSettingsIssues(network: {
  kind: NetworkKind;
  methods: Readonly<Record<string, number>>;
  denyMethods: readonly string[];
  allowMethods: readonly string[];
}): Array<{ path: Array<string | number>; message: string }> {
  const issues: Array<{ path: Array<string | number>; message: string }> = [];
  const deniedBy = createDenyRule(network.kind, network);
  for (const method of Object.keys(network.methods)) {
    if (method === '*') continue;
    const source = deniedBy(method);
    if (source === 'default') issues.push({ path: ['methods', method], message: `${method} is denied by default: list it in allowMethods to serve it` });
    if (source === 'denyMethods') issues.push({ path: ['methods', method], message: `${method} is priced here but denied by denyMethods` });
  }
  const patterns = CATALOGUE[network.kind].denied.flatMap((group) => group.patterns);
  network.allowMethods.forEach((glob, index) => {
    if (!patterns.some((pattern) => globsOverlap(glob, pattern))) {
      issues.push({ path: ['allowMethods', index], message: `${glob} matches no method denied by default (docs/methods.md lists them)` });
    }
  });
  return issues;
}
