import type { NetworkConfig } from '../config/schema.js';
import type { HeaderFetcher } from '../routing/finality-probe.js';
import { returnLent } from '../jsonrpc/answer-buffers.js';
import { contiguous, type ResultBytes } from '../jsonrpc/result-bytes.js';
import type { BlockCache } from './block-cache.js';
import { blockRefOf, cacheKey, canonicalParams, resolveFinalizedTag, sharedKey, type BlockRef } from './cache-key.js';
import { createCanonicalChain, type Anchor, type CanonicalChain } from './canonical-chain.js';
import { matchesBlockAtIndex, receiptsMatchBlock } from './answer-checks.js';
import type { CacheStats, MemoryTier, StoredAnswer } from './memory-tier.js';
import { methodCaching, neverCached, type CacheClass, type MethodCaching } from './method-classes.js';
import type { SharedTier } from './shared-tier.js';

/**
 * The response cache of every method but `eth_getBlockByHash` (which keeps its own layout in the
 * same tiers, block-cache.ts): which calls may be answered from it (plan), what an answer must
 * show before it is kept (admit: finality of the upstream that gave it, a canonical anchor,
 * verification), and the two tiers (in process, and shared in Redis). `through` is the whole
 * step for a caller that makes its own upstream calls, one call or one chunk of a range at a time.
 */

export type CacheTier = 'memory' | 'shared';

/** What the routing layer knows of the upstream that answered. */
export interface ServingFinality {
  head: number | undefined;
  finalized: number | undefined;
}

/** Reads the chain through the gateway's own verified paths (headers for anchors, blocks for checks). */
export interface ChainReader {
  header: HeaderFetcher;
  /** The verified hydrated block of a hash (through the block cache), or undefined. */
  block(hash: string): Promise<unknown>;
  /** The `eth_getTransactionByHash` answer of a transaction, or undefined. */
  transaction(hash: string): Promise<unknown>;
}

/** How one call relates to the cache, decided once per call from its method and params. */
export interface CachePlan {
  network: NetworkConfig;
  method: string;
  class: CacheClass;
  caching: MethodCaching | undefined;
  ref: BlockRef;
  key: string;
  /** False for calls at a tag: never looked up nor kept (realtime calls are still shared in flight). */
  storable: boolean;
  /** Identical concurrent calls share one upstream call. */
  coalesce: boolean;
  /** The params to send upstream: the client's, with a `finalized` tag resolved to its number. */
  params: unknown;
}

/** `bytes` as the forwarder returned them; the cache joins a large result's parts only to keep it. */
export type FetchedAnswer<A> = { answer: A; bytes: ResultBytes | undefined; finality: ServingFinality };

export interface ResponseCache {
  readonly blocks: BlockCache;
  chain(network: string): CanonicalChain;
  /** The plan of a call, or undefined when it is never cached (writes, filters, odd params, disabled). */
  plan(network: NetworkConfig, method: string, params: unknown, finalizedHint: number | undefined): CachePlan | undefined;
  /** An in-process hit, synchronously (the hot path). */
  hit(plan: CachePlan): Buffer | undefined;
  /** A shared-tier hit (after an in-process miss); never throws. */
  sharedHit(plan: CachePlan, reader: ChainReader): Promise<Buffer | undefined>;
  /** A block by hash from the shared tier (its forms are kept by the fetched `hydrated` flag). */
  sharedBlock(network: string, hash: string, hydrated: boolean): Promise<Buffer | undefined>;
  /** Shares a verified block by hash (the in-process block cache has it already). */
  shareBlock(network: string, hash: string, hydrated: boolean, bytes: Buffer): void;
  /** Keeps an answer if the rules allow; returns the bytes to answer with (a realtime head never goes backwards). */
  admit(plan: CachePlan, bytes: Buffer, finality: ServingFinality, reader: ChainReader): Promise<Buffer>;
  /**
   * The whole cache step for one call: in-process then shared lookup, else `fetch` (the upstream
   * call) and admit. A later `eth_getLogs` range splitter runs each aligned chunk through this.
   */
  through<A>(plan: CachePlan, reader: ChainReader, read: { memory: boolean; shared: boolean }, fetch: () => Promise<FetchedAnswer<A>>): Promise<{ hit: Buffer; tier: CacheTier } | { fetched: FetchedAnswer<A> }>;
  stats(): CacheStats;
  /** Start-up: waits (boundedly) for the shared tier's connection, so the first calls can use it. */
  connected(): Promise<void>;
  close(): Promise<void>;
}

/** A network's `cache.ttlSeconds` entry for a method (own keys only: method names come from clients). */
function ttlOf(network: NetworkConfig, method: string): number | undefined {
  const ttls = network.cache.ttlSeconds;
  return Object.hasOwn(ttls, method) ? ttls[method] : undefined;
}

export interface ResponseCacheObserver {
  lookup?(network: string, method: string, tier: CacheTier, hit: boolean): void;
  stored?(network: string, method: string, tier: CacheTier, bytes: number): void;
  reorg?(network: string): void;
}

const NULL = 'null';
const EMPTY_LIST = '[]';

function isNull(bytes: Buffer): boolean {
  return bytes.length === 4 && bytes.toString('latin1') === NULL;
}

function isEmptyList(bytes: Buffer): boolean {
  return bytes.length === 2 && bytes.toString('latin1') === EMPTY_LIST;
}

function parsed(bytes: Buffer): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    return undefined;
  }
}

function quantityOf(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isSafeInteger(value) ? value : undefined;
  if (typeof value !== 'string' || !/^0x[0-9a-fA-F]{1,13}$/.test(value)) return undefined;
  return Number.parseInt(value.slice(2), 16);
}

export function createResponseCache(deps: { memory: MemoryTier; shared?: SharedTier; now: () => number; observe?: ResponseCacheObserver }): ResponseCache {
  const { memory, shared, now, observe } = deps;
  const chains = new Map<string, CanonicalChain>();
  /** Highest head served per network for the `head` methods (kept only with a realtime TTL). */
  const heads = new Map<string, { value: number; bytes: Buffer }>();

  function chain(network: string): CanonicalChain {
    let found = chains.get(network);
    if (found === undefined) {
      found = createCanonicalChain(() => observe?.reorg?.(network));
      chains.set(network, found);
    }
    return found;
  }

  function disabled(network: NetworkConfig, method: string, cacheClass: CacheClass): boolean {
    return network.cache.disable.includes(method) || network.cache.disable.includes(cacheClass);
  }

  function plan(network: NetworkConfig, method: string, params: unknown, finalizedHint: number | undefined): CachePlan | undefined {
    if (neverCached(method)) return undefined;
    const caching = methodCaching(network.kind, method);
    const ttl = ttlOf(network, method);
    if (caching === undefined && ttl === undefined) return undefined;
    const sent = caching !== undefined && finalizedHint !== undefined ? (resolveFinalizedTag(caching, params, finalizedHint) ?? params) : params;
    const ref: BlockRef = caching === undefined ? { kind: 'answer' } : blockRefOf(caching, sent);
    if (ref.kind === 'unknown') return undefined;
    let cacheClass: CacheClass = caching?.class ?? 'ttl';
    if (ref.kind === 'hash') cacheClass = 'pinned';
    const atTag = ref.kind === 'tag';
    if (atTag && caching?.realtimeAtTag) cacheClass = 'realtime';
    if (disabled(network, method, cacheClass)) return undefined;
    const json = canonicalParams(sent);
    if (json === undefined) return undefined;
    const realtime = cacheClass === 'realtime';
    return {
      network,
      method,
      class: cacheClass,
      caching,
      ref,
      key: cacheKey(network.id, method, json),
      storable: realtime ? network.cache.realtimeTtlMs > 0 : !atTag,
      coalesce: realtime || !atTag,
      params: sent,
    };
  }

  /** Whether a stored answer may still be served: not expired, and its anchor still canonical. */
  function fresh(plan: CachePlan, answer: StoredAnswer): boolean | undefined {
    if (answer.expiresAt !== undefined && answer.expiresAt <= now()) return false;
    return answer.anchor === undefined ? true : chain(plan.network.id).holds(answer.anchor);
  }

  function hit(plan: CachePlan): Buffer | undefined {
    const answer = memory.get(plan.key);
    if (answer !== undefined && fresh(plan, answer) !== true) memory.delete(plan.key);
    const found = answer !== undefined && fresh(plan, answer) === true ? answer.bytes : undefined;
    observe?.lookup?.(plan.network.id, plan.method, 'memory', found !== undefined);
    return found;
  }

  async function sharedHit(plan: CachePlan, reader: ChainReader): Promise<Buffer | undefined> {
    if (shared === undefined) return undefined;
    const answer = await shared.get(sharedKey(plan.key));
    let valid = answer !== undefined && fresh(plan, answer);
    if (answer?.anchor !== undefined && valid === undefined) valid = await chain(plan.network.id).resolve(answer.anchor, reader.header).catch(() => false);
    observe?.lookup?.(plan.network.id, plan.method, 'shared', valid === true);
    if (answer === undefined || valid !== true) return undefined;
    memory.set(plan.key, answer);
    return answer.bytes;
  }

  /** The anchor an answer at `number` is kept under, or undefined when it may not be kept. */
  function anchorAt(plan: CachePlan, number: number, finality: ServingFinality): Anchor | undefined | false {
    if (finality.finalized === undefined || number > finality.finalized) return false;
    return chain(plan.network.id).anchorFor(number, finality.finalized) ?? false;
  }

  /** What to keep of an answer (undefined: nothing), per its class. */
  async function entryFor(plan: CachePlan, bytes: Buffer, finality: ServingFinality, reader: ChainReader): Promise<StoredAnswer | undefined> {
    if (isNull(bytes)) return undefined;
    const network = plan.network;
    const ttl = ttlOf(network, plan.method);
    const expiresAt = ttl === undefined ? undefined : now() + ttl * 1000;
    const full = network.verification === 'full';
    switch (plan.class) {
      case 'realtime':
        return { bytes, expiresAt: now() + network.cache.realtimeTtlMs };
      case 'ttl':
        return isEmptyList(bytes) ? undefined : { bytes, expiresAt };
      case 'pinned':
        // An empty answer by hash may come from an upstream that does not have the block yet.
        if (isEmptyList(bytes)) return undefined;
        if (full && plan.method === 'eth_getBlockReceipts' && plan.ref.kind === 'hash') {
          if (!receiptsMatchBlock(parsed(bytes), await reader.block(plan.ref.hash))) return undefined;
        }
        return { bytes, expiresAt };
      case 'slot': {
        const slot = plan.ref.kind === 'number' ? plan.ref.number : quantityOf((parsed(bytes) as { slot?: unknown } | null)?.slot);
        if (slot === undefined || finality.finalized === undefined || slot > finality.finalized) return undefined;
        return { bytes, expiresAt };
      }
      case 'finalized': {
        const ref = plan.ref;
        if (ref.kind === 'range') {
          // An empty range is believed only from an upstream whose head is past its end.
          if (isEmptyList(bytes) && (finality.head === undefined || finality.head <= ref.to)) return undefined;
          const anchor = anchorAt(plan, ref.to, finality);
          return anchor === false ? undefined : { bytes, anchor, expiresAt };
        }
        if (ref.kind !== 'number') return undefined;
        const anchor = anchorAt(plan, ref.number, finality);
        if (anchor === false) return undefined;
        if (full && plan.method === 'eth_getBlockReceipts') {
          const first = (parsed(bytes) as Array<{ blockHash?: unknown }> | undefined)?.[0]?.blockHash;
          if (typeof first !== 'string' || !receiptsMatchBlock(parsed(bytes), await reader.block(first))) return undefined;
        }
        return { bytes, anchor, expiresAt };
      }
      case 'transaction': {
        const locator = plan.caching?.block;
        const hash = locator?.in === 'transaction' && Array.isArray(plan.params) ? plan.params[locator.index] : undefined;
        // A trace names no block: the transaction's own answer does.
        const answer = (typeof hash === 'string' ? await reader.transaction(hash) : parsed(bytes)) as { blockNumber?: unknown; blockHash?: unknown } | null;
        const number = quantityOf(answer?.blockNumber);
        if (number === undefined || typeof answer?.blockHash !== 'string') return undefined;
        const anchor = anchorAt(plan, number, finality);
        if (anchor === false) return undefined;
        if (full && (plan.method === 'eth_getTransactionReceipt' || plan.method === 'eth_getTransactionByHash')) {
          if (!matchesBlockAtIndex(plan.method, answer, await reader.block(answer.blockHash))) return undefined;
        }
        return { bytes, anchor, expiresAt };
      }
    }
  }

  async function admit(plan: CachePlan, bytes: Buffer, finality: ServingFinality, reader: ChainReader): Promise<Buffer> {
    let answer = bytes;
    if (plan.caching?.head && plan.storable) {
      // A cached head never goes backwards: a lagging upstream's lower head is answered with the highest seen.
      const value = quantityOf(parsed(bytes));
      const highest = heads.get(plan.key);
      if (value !== undefined && highest !== undefined && value < highest.value) answer = highest.bytes;
      else if (value !== undefined) heads.set(plan.key, { value, bytes });
    }
    if (!plan.storable) return answer;
    let entry: StoredAnswer | undefined;
    try {
      entry = await entryFor(plan, answer, finality, reader);
    } catch {
      entry = undefined; // a check that could not be made keeps nothing
    }
    if (entry === undefined) return answer;
    // A copy: the bytes may be a view into a whole upstream response, which the cache must not keep.
    const kept: StoredAnswer = { ...entry, bytes: Buffer.from(entry.bytes) };
    memory.set(plan.key, kept);
    observe?.stored?.(plan.network.id, plan.method, 'memory', kept.bytes.length);
    if (shared !== undefined && plan.class !== 'realtime' && shared.set(sharedKey(plan.key), kept)) {
      observe?.stored?.(plan.network.id, plan.method, 'shared', kept.bytes.length);
    }
    return answer;
  }

  const blockKey = (network: string, hash: string, hydrated: boolean): string => sharedKey(cacheKey(network, 'eth_getBlockByHash', `["${hash}",${hydrated}]`));

  return {
    blocks: memory.blocks,
    async sharedBlock(network, hash, hydrated) {
      if (shared === undefined) return undefined;
      const answer = await shared.get(blockKey(network, hash, hydrated));
      observe?.lookup?.(network, 'eth_getBlockByHash', 'shared', answer !== undefined);
      return answer?.bytes;
    },
    shareBlock(network, hash, hydrated, bytes) {
      if (shared?.set(blockKey(network, hash, hydrated), { bytes })) observe?.stored?.(network, 'eth_getBlockByHash', 'shared', bytes.length);
    },
    chain,
    plan,
    hit,
    sharedHit,
    admit,
    async through(plan, reader, read, fetch) {
      if (plan.storable) {
        const inProcess = read.memory ? hit(plan) : undefined;
        if (inProcess !== undefined) return { hit: inProcess, tier: 'memory' };
        const fromShared = read.shared ? await sharedHit(plan, reader) : undefined;
        if (fromShared !== undefined) return { hit: fromShared, tier: 'shared' };
      }
      const fetched = await fetch();
      if (fetched.bytes === undefined || !plan.storable) return { fetched };
      const whole = contiguous(fetched.bytes);
      // Parts were copied: the pooled buffer a large answer's parts are lent with is no longer
      // needed by anyone, and goes back for the next large answer. Left alone, it was collected
      // with the parts and the next large answer mapped a new one (2 MiB or more, a page fault
      // for every 4 KiB: about 7 ms each on the bench's machine).
      if (whole !== fetched.bytes) returnLent(fetched.bytes);
      return { fetched: { ...fetched, bytes: await admit(plan, whole, fetched.finality, reader) } };
    },
    stats: memory.stats,
    connected: async () => {
      await shared?.connected();
    },
    close: async () => {
      await shared?.close();
    },
  };
}
