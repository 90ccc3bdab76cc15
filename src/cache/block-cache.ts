import type { LRUCache } from 'lru-cache';

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

/** Per-form bookkeeping (the form record, lru-cache's slot, the key), counted against the byte bound. */
export const ENTRY_OVERHEAD_BYTES = 160;

/** One cached answer: the result bytes for a network and hydrated flag. */
export interface BlockForm {
  network: string;
  hydrated: boolean;
  bytes: Buffer;
}

function findForm(forms: readonly BlockForm[], network: string, hydrated: boolean): BlockForm | undefined {
  for (const form of forms) if (form.hydrated === hydrated && form.network === network) return form;
  return undefined;
}

function formsSize(forms: readonly BlockForm[], hash: string): number {
  let size = hash.length;
  for (const form of forms) size += form.bytes.length + ENTRY_OVERHEAD_BYTES;
  return size;
}

/**
 * A parsed hydrated block as the non-hydrated form's bytes: its transactions replaced by their
 * hashes, every other member unchanged and in its order. Undefined if it is not such a block.
 */
export function dehydrateBlock(block: unknown): Buffer | undefined {
  if (block === null || typeof block !== 'object') return undefined;
  const { transactions } = block as { transactions?: unknown };
  if (!Array.isArray(transactions)) return undefined;
  const hashes: string[] = [];
  for (const transaction of transactions) {
    const hash = (transaction as { hash?: unknown } | null)?.hash;
    if (typeof hash !== 'string') return undefined;
    hashes.push(hash);
  }
  return Buffer.from(JSON.stringify({ ...block, transactions: hashes }));
}

function dehydrate(hydratedBytes: Buffer): Buffer | undefined {
  return dehydrateBlock(JSON.parse(hydratedBytes.toString('utf8')));
}

/** What one key of the in-process LRU holds: a block hash's forms, or one answer of another method. */
export type BlockForms = readonly BlockForm[];

/**
 * The block cache over the in-process tier's LRU (memory-tier.ts): keyed by the lower-case hash
 * alone (no other key starts with `0x`), holding that hash's forms.
 */
export function blockCacheOver(lru: LRUCache<string, BlockForms | object>, counters: { forms: number }, stats: () => BlockCacheStats): BlockCache {
  // Keyed by the (lower-case) block hash alone, holding that hash's forms: usually one or two.
  // A key joining network, hash and flag cost a concatenation, its flattening and the hashing of
  // the longer string on every lookup, cache hits included.
  const formsAt = (hash: string): BlockForms | undefined => lru.get(hash) as BlockForms | undefined;

  function store(network: string, hash: string, hydrated: boolean, bytes: Buffer): void {
    const form: BlockForm = { network, hydrated, bytes };
    const current = formsAt(hash) ?? [];
    // A new array every time: lru-cache recomputes an entry's size only when its value changes.
    const forms = [...current.filter((other) => other.network !== network || other.hydrated !== hydrated), form];
    // An entry larger than the whole cache is refused by lru-cache; that is the right outcome.
    lru.set(hash, forms);
    if (lru.has(hash)) counters.forms += forms.length;
  }

  return {
    get(network, hash, hydrated) {
      const forms = formsAt(hash);
      if (forms === undefined) return undefined;
      const exact = findForm(forms, network, hydrated);
      if (exact !== undefined || hydrated) return exact?.bytes;
      const full = findForm(forms, network, true);
      if (full === undefined) return undefined;
      const derived = dehydrate(full.bytes);
      if (derived !== undefined) store(network, hash, false, derived);
      return derived;
    },
    set: store,
    stats,
  };
}

/** The size of a block hash's forms as counted against the byte bound. */
export function blockFormsSize(forms: BlockForms, hash: string): number {
  return formsSize(forms, hash);
}

/** The cache when `cache.maxBytes` is 0: every lookup misses, nothing is kept. */
export function createDisabledBlockCache(): BlockCache {
  return {
    get: () => undefined,
    set: () => undefined,
    stats: () => ({ entries: 0, bytes: 0, maxBytes: 0, evictions: 0 }),
  };
}
