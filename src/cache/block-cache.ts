import { LRUCache } from 'lru-cache';

/**
 * Blocks by hash are immutable, so `eth_getBlockByHash` results are cached as the exact JSON
 * bytes of the result: a hit is spliced into the response envelope without parsing or
 * re-serialising. The LRU is bounded in bytes. Only verified answers are stored (the caller
 * checked the block's hash against the key); `null` and errors never are.
 */

export interface BlockCacheStats {
  entries: number;
  bytes: number;
  maxBytes: number;
  evictions: number;
}

export interface BlockCache {
  /** The cached result bytes, or undefined. A hydrated entry also answers the non-hydrated call. */
  get(network: string, hash: string, hydrated: boolean): Buffer | undefined;
  set(network: string, hash: string, hydrated: boolean, resultBytes: Buffer): void;
  stats(): BlockCacheStats;
}

/** Per-entry bookkeeping of lru-cache and the key string, counted against the byte bound. */
const ENTRY_OVERHEAD_BYTES = 160;

function cacheKey(network: string, hash: string, hydrated: boolean): string {
  return `${network}|${hash}|${hydrated ? 'full' : 'hashes'}`;
}

/** A hydrated block with its transactions replaced by their hashes: the non-hydrated form. */
function dehydrate(hydratedBytes: Buffer): Buffer | undefined {
  const block = JSON.parse(hydratedBytes.toString('utf8')) as { transactions?: unknown };
  if (!Array.isArray(block.transactions)) return undefined;
  const hashes: string[] = [];
  for (const transaction of block.transactions) {
    const hash = (transaction as { hash?: unknown } | null)?.hash;
    if (typeof hash !== 'string') return undefined;
    hashes.push(hash);
  }
  block.transactions = hashes;
  return Buffer.from(JSON.stringify(block));
}

export function createBlockCache(options: { maxBytes: number; onEvict?: () => void }): BlockCache {
  let evictions = 0;
  const lru = new LRUCache<string, Buffer>({
    maxSize: options.maxBytes,
    sizeCalculation: (value, key) => value.length + key.length + ENTRY_OVERHEAD_BYTES,
    dispose: (_value, _key, reason) => {
      if (reason === 'evict') {
        evictions += 1;
        options.onEvict?.();
      }
    },
  });

  return {
    get(network, hash, hydrated) {
      const exact = lru.get(cacheKey(network, hash, hydrated));
      if (exact !== undefined || hydrated) return exact;
      const full = lru.get(cacheKey(network, hash, true));
      if (full === undefined) return undefined;
      const derived = dehydrate(full);
      if (derived !== undefined) lru.set(cacheKey(network, hash, false), derived);
      return derived;
    },
    set(network, hash, hydrated, resultBytes) {
      // An entry larger than the whole cache is refused by lru-cache; that is the right outcome.
      lru.set(cacheKey(network, hash, hydrated), resultBytes);
    },
    stats: () => ({ entries: lru.size, bytes: lru.calculatedSize, maxBytes: options.maxBytes, evictions }),
  };
}

/** The cache when `cache.maxBytes` is 0: every lookup misses, nothing is kept. */
export function createDisabledBlockCache(): BlockCache {
  return {
    get: () => undefined,
    set: () => undefined,
    stats: () => ({ entries: 0, bytes: 0, maxBytes: 0, evictions: 0 }),
  };
}
