import type { NetworkKind } from '../config/schema.js';

/**
 * Which answers the response cache may keep, per method: its class, and where the block (or
 * slot) its answer belongs to is found — in the params, or in the answer itself. This table is
 * the one source: docs/caching.md lists it and test/caching-doc.test.ts keeps the two equal.
 *
 * Classes:
 * - `pinned`: the call names a block by its hash; state at a block hash never changes.
 * - `finalized`: the call names a block number; cached once that number is at or below the
 *   finalized block of the upstream that answered (tags such as `latest` never are).
 * - `transaction`: the answer names its block; cached once that block is finalized.
 * - `slot`: asset networks; the slot (in the params or the answer) must be finalized.
 * - `realtime`: the chain's present (head, fees); identical concurrent calls share one upstream
 *   call, and with a network's `cache.realtimeTtlMs` the answer is kept that long.
 * Every other method is cached only when the network sets `cache.ttlSeconds` for it (class `ttl`).
 */

export type CacheClass = 'pinned' | 'finalized' | 'transaction' | 'slot' | 'realtime' | 'ttl';

export type BlockLocator =
  /** A block number, tag, hash or EIP-1898 object (`{blockHash}`, `{blockNumber}`) at this params index. */
  | { in: 'params'; index: number }
  /** A filter object at params[0]: `blockHash`, or `fromBlock`/`toBlock` (the range must end at a finalized number). */
  | { in: 'filter' }
  /** The answer's `blockNumber` and `blockHash` (a transaction, a receipt). */
  | { in: 'answer' }
  /** The block of the transaction whose hash is at this params index (traces name no block; it is looked up). */
  | { in: 'transaction'; index: number }
  /** A slot number at this params index (asset networks). */
  | { in: 'slot-params'; index: number }
  /** The answer's `slot` (asset networks). */
  | { in: 'slot-answer' }
  /** No block: the chain's present. */
  | { in: 'none' };

export interface MethodCaching {
  /** Class when the block is a number or the answer names it; a hash in the params makes any call `pinned`. */
  class: CacheClass;
  block: BlockLocator;
  /** At a tag (`latest`, `pending`, `safe`) the call is realtime rather than uncached (`eth_feeHistory`). */
  realtimeAtTag?: true;
  /** The head of the chain: a cached value never goes backwards for a network. */
  head?: true;
}

const params = (index: number): BlockLocator => ({ in: 'params', index });
const FINALIZED_AT = (index: number): MethodCaching => ({ class: 'finalized', block: params(index) });
const BY_TRANSACTION: MethodCaching = { class: 'transaction', block: { in: 'answer' } };
const REALTIME: MethodCaching = { class: 'realtime', block: { in: 'none' } };

export const METHOD_CACHING: Readonly<Record<NetworkKind, Readonly<Record<string, MethodCaching>>>> = {
  evm: {
    eth_getBlockByHash: { class: 'pinned', block: params(0) },
    eth_getBlockTransactionCountByHash: { class: 'pinned', block: params(0) },
    eth_getTransactionByBlockHashAndIndex: { class: 'pinned', block: params(0) },
    eth_getUncleByBlockHashAndIndex: { class: 'pinned', block: params(0) },
    eth_getUncleCountByBlockHash: { class: 'pinned', block: params(0) },
    debug_traceBlockByHash: { class: 'pinned', block: params(0) },
    debug_storageRangeAt: { class: 'pinned', block: params(0) },
    eth_getBlockByNumber: FINALIZED_AT(0),
    eth_getBlockReceipts: FINALIZED_AT(0),
    eth_getBlockTransactionCountByNumber: FINALIZED_AT(0),
    eth_getTransactionByBlockNumberAndIndex: FINALIZED_AT(0),
    eth_getUncleByBlockNumberAndIndex: FINALIZED_AT(0),
    eth_getUncleCountByBlockNumber: FINALIZED_AT(0),
    eth_call: FINALIZED_AT(1),
    eth_getBalance: FINALIZED_AT(1),
    eth_getCode: FINALIZED_AT(1),
    eth_getTransactionCount: FINALIZED_AT(1),
    eth_getStorageAt: FINALIZED_AT(2),
    eth_getProof: FINALIZED_AT(2),
    eth_createAccessList: FINALIZED_AT(1),
    eth_estimateGas: FINALIZED_AT(1),
    eth_getLogs: { class: 'finalized', block: { in: 'filter' } },
    trace_block: FINALIZED_AT(0),
    trace_call: FINALIZED_AT(2),
    trace_callMany: FINALIZED_AT(1),
    debug_traceBlockByNumber: FINALIZED_AT(0),
    debug_traceCall: FINALIZED_AT(1),
    eth_feeHistory: { class: 'finalized', block: params(1), realtimeAtTag: true },
    eth_getTransactionByHash: BY_TRANSACTION,
    eth_getTransactionReceipt: BY_TRANSACTION,
    debug_traceTransaction: { class: 'transaction', block: { in: 'transaction', index: 0 } },
    trace_transaction: { class: 'transaction', block: { in: 'transaction', index: 0 } },
    eth_blockNumber: { ...REALTIME, head: true },
    eth_gasPrice: REALTIME,
    eth_maxPriorityFeePerGas: REALTIME,
    eth_blobBaseFee: REALTIME,
  },
  asset: {
    getBlock: { class: 'slot', block: { in: 'slot-params', index: 0 } },
    getBlockTime: { class: 'slot', block: { in: 'slot-params', index: 0 } },
    getTransaction: { class: 'slot', block: { in: 'slot-answer' } },
    getSlot: { ...REALTIME, head: true },
  },
};

/**
 * The table entry of a method, if it has one. Method names come from clients, so the lookup reads
 * own properties only: `constructor` or `toString` must not find the object prototype's members.
 */
export function methodCaching(kind: NetworkKind, method: string): MethodCaching | undefined {
  const table = METHOD_CACHING[kind];
  return Object.hasOwn(table, method) ? table[method] : undefined;
}

/** How a table entry's block is found, in words (docs/caching.md prints it). */
export function describeLocator(caching: MethodCaching): string {
  const { block } = caching;
  switch (block.in) {
    case 'params':
      return `params[${block.index}]${caching.realtimeAtTag ? ' (realtime at a tag)' : ''}`;
    case 'filter':
      return 'params[0] filter: `blockHash`, or `fromBlock`..`toBlock`';
    case 'answer':
      return 'answer: `blockNumber`, `blockHash`';
    case 'transaction':
      return `the block of the transaction at params[${block.index}] (\`eth_getTransactionByHash\`)`;
    case 'slot-params':
      return `params[${block.index}] (slot)`;
    case 'slot-answer':
      return 'answer: `slot`';
    case 'none':
      return '—';
  }
}

/**
 * Never cached, whatever a network's `ttlSeconds` says: writes, filters and subscriptions change
 * or follow state, and signing methods are the node's accounts.
 */
const NEVER_CACHED = /^(eth_send|eth_sign|sendTransaction|requestAirdrop|simulateTransaction|eth_newFilter|eth_newBlockFilter|eth_newPendingTransactionFilter|eth_getFilter|eth_uninstallFilter|eth_subscribe|eth_unsubscribe|personal_|admin_|miner_|txpool_|engine_|anvil_|evm_|hardhat_)/;

export function neverCached(method: string): boolean {
  return NEVER_CACHED.test(method);
}
