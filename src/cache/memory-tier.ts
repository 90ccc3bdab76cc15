import { LRUCache } from 'lru-cache';
import { blockCacheOver, blockFormsSize, createDisabledBlockCache, ENTRY_OVERHEAD_BYTES, type BlockCache, type BlockCacheStats, type BlockForms } from './block-cache.js';
import type { Anchor } from './canonical-chain.js';

/**
 * The in-process tier: one LRU bounded in bytes (`cache.maxBytes`) for every method and network
 * together. Blocks by hash keep their own layout (keyed by hash, forms per network and hydrated
 * flag, see block-cache.ts); every other answer is one entry under its call's key. Answers are
 * kept as the exact result bytes an upstream sent, so a hit is spliced into the envelope.
 */

/** One cached answer of any method but `eth_getBlockByHash`. */
export interface StoredAnswer {
  bytes: Buffer;
  /** For answers by number: the known block the answer is valid under (canonical-chain.ts). */
  anchor?: Anchor;
  /** Clock ms after which the entry is stale (TTL and realtime classes). */
  expiresAt?: number;
}

export type CacheStats = BlockCacheStats;

export interface MemoryTier {
  readonly blocks: BlockCache;
  get(key: string): StoredAnswer | undefined;
  set(key: string, answer: StoredAnswer): void;
  delete(key: string): void;
  stats(): CacheStats;
}

/** Bookkeeping of an answer entry beyond its bytes and key (the record, its anchor, lru-cache's slot). */
const ANSWER_OVERHEAD_BYTES = ENTRY_OVERHEAD_BYTES + 64;

function isForms(value: BlockForms | StoredAnswer): value is BlockForms {
  return Array.isArray(value);
}

export function createMemoryTier(options: { maxBytes: number; onEvict?: () => void }): MemoryTier {
  // `cache.maxBytes: 0`: nothing is kept in process (lru-cache wants a positive bound).
  if (options.maxBytes === 0) {
    const blocks = createDisabledBlockCache();
    return { blocks, get: () => undefined, set: () => undefined, delete: () => undefined, stats: blocks.stats };
  }
  let evictions = 0;
  const counters = { forms: 0, answers: 0 };
  const lru = new LRUCache<string, BlockForms | StoredAnswer>({
    maxSize: options.maxBytes,
    // Keys count twice: a JS string of one-byte characters still takes about a byte per character plus its header.
    sizeCalculation: (value, key) => (isForms(value) ? blockFormsSize(value, key) : value.bytes.length + key.length + ANSWER_OVERHEAD_BYTES),
    // Also called with 'set' when an entry is replaced (a block hash's forms grow by a new array).
    dispose: (value, _key, reason) => {
      const count = isForms(value) ? value.length : 1;
      if (isForms(value)) counters.forms -= count;
      else counters.answers -= 1;
      if (reason === 'evict') {
        evictions += count;
        for (let index = 0; index < count; index += 1) options.onEvict?.();
      }
    },
  });
  const stats = (): CacheStats => ({ entries: counters.forms + counters.answers, bytes: lru.calculatedSize, maxBytes: options.maxBytes, evictions });
  const blocks = blockCacheOver(lru as LRUCache<string, BlockForms | object>, counters, stats);
  return {
    blocks,
    get(key) {
      const value = lru.get(key);
      return value === undefined || isForms(value) ? undefined : value;
    },
    set(key, answer) {
      lru.set(key, answer);
      if (lru.has(key)) counters.answers += 1;
    },
    delete(key) {
      lru.delete(key);
    },
    stats,
  };
}

/** The block cache alone, over a tier of its own (the block cache's unit tests). */
export function createBlockCache(options: { maxBytes: number; onEvict?: () => void }): BlockCache {
  return createMemoryTier(options).blocks;
}
