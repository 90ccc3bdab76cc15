import { createHash } from 'node:crypto';
import type { BlockLocator, MethodCaching } from './method-classes.js';

/**
 * A call's cache key, from its canonical params: object members sorted, hex strings in lower
 * case (an address or a hash spelt in either case names the same thing), so equal calls share an
 * entry. Params that cannot be canonicalised safely (fractions, integers beyond 2^53 that JSON
 * parsing already rounded, nesting beyond a bound) give no key: the call is simply not cached.
 * Long params are hashed, so no key grows with its params.
 */

/** Deepest nesting canonicalised; deeper params are forwarded, never cached. */
const MAX_DEPTH = 16;
/** Canonical params longer than this are replaced in the key by their SHA-256. */
const MAX_INLINE_PARAMS = 256;
const HEX = /^0x[0-9a-fA-F]*$/;

/** The canonical JSON of params, or undefined when they cannot be canonicalised. */
export function canonicalParams(params: unknown): string | undefined {
  if (params === undefined) return '[]';
  try {
    return canonical(params, 0);
  } catch {
    return undefined;
  }
}

class NotCanonical extends Error {}

function canonical(value: unknown, depth: number): string {
  if (depth > MAX_DEPTH) throw new NotCanonical();
  switch (typeof value) {
    case 'string':
      return JSON.stringify(HEX.test(value) ? value.toLowerCase() : value);
    case 'number':
      if (!Number.isSafeInteger(value)) throw new NotCanonical();
      return String(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object': {
      if (value === null) return 'null';
      if (Array.isArray(value)) return `[${value.map((item) => canonical(item, depth + 1)).join(',')}]`;
      const keys = Object.keys(value).sort();
      return `{${keys.map((key) => `${JSON.stringify(key)}:${canonical((value as Record<string, unknown>)[key], depth + 1)}`).join(',')}}`;
    }
    default:
      throw new NotCanonical();
  }
}

/** The in-process key of a call: network, method and canonical params (hashed when long). */
export function cacheKey(network: string, method: string, canonicalJson: string): string {
  const params = canonicalJson.length <= MAX_INLINE_PARAMS ? canonicalJson : `#${createHash('sha256').update(canonicalJson).digest('base64url')}`;
  return `${network}\u0001${method}\u0001${params}`;
}

/** The shared tier's key of an in-process key: always hashed, so Redis keys stay short. */
export function sharedKey(key: string): string {
  return createHash('sha256').update(key).digest('base64url');
}

/** What a call's params say about its block. */
export type BlockRef =
  | { kind: 'hash'; hash: string }
  | { kind: 'number'; number: number }
  /** `latest`, `pending`, `safe`, `finalized` (resolved to a number by the caller when it can). */
  | { kind: 'tag'; tag: string }
  /** An `eth_getLogs` range of numbers. */
  | { kind: 'range'; from: number; to: number }
  /** The block is in the answer, or there is none (realtime). */
  | { kind: 'answer' }
  /** The params do not name a block the cache understands: not cached. */
  | { kind: 'unknown' };

const BLOCK_HASH = /^0x[0-9a-fA-F]{64}$/;
const QUANTITY = /^0x(0|[1-9a-fA-F][0-9a-fA-F]{0,12})$/;
const TAGS = new Set(['latest', 'pending', 'safe', 'finalized']);
const UNKNOWN: BlockRef = { kind: 'unknown' };

/** A block parameter: a number, a tag, a hash, or an EIP-1898 object. A missing one means `latest`. */
export function blockParam(value: unknown): BlockRef {
  if (value === undefined) return { kind: 'tag', tag: 'latest' };
  if (typeof value === 'string') {
    if (value === 'earliest') return { kind: 'number', number: 0 };
    if (TAGS.has(value)) return { kind: 'tag', tag: value };
    if (BLOCK_HASH.test(value)) return { kind: 'hash', hash: value.toLowerCase() };
    if (QUANTITY.test(value)) return { kind: 'number', number: Number.parseInt(value.slice(2), 16) };
    return UNKNOWN;
  }
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const { blockHash, blockNumber } = value as { blockHash?: unknown; blockNumber?: unknown };
    if (blockHash !== undefined && blockNumber === undefined) return typeof blockHash === 'string' && BLOCK_HASH.test(blockHash) ? { kind: 'hash', hash: blockHash.toLowerCase() } : UNKNOWN;
    if (blockNumber !== undefined && blockHash === undefined) return blockParam(blockNumber);
  }
  return UNKNOWN;
}

function filterRef(filter: unknown): BlockRef {
  if (filter === null || typeof filter !== 'object' || Array.isArray(filter)) return UNKNOWN;
  const { blockHash, fromBlock, toBlock } = filter as { blockHash?: unknown; fromBlock?: unknown; toBlock?: unknown };
  if (blockHash !== undefined) {
    if (fromBlock !== undefined || toBlock !== undefined || typeof blockHash !== 'string' || !BLOCK_HASH.test(blockHash)) return UNKNOWN;
    return { kind: 'hash', hash: blockHash.toLowerCase() };
  }
  const from = blockParam(fromBlock);
  const to = blockParam(toBlock);
  if (to.kind === 'tag') return to;
  if (from.kind === 'tag') return from;
  if (from.kind !== 'number' || to.kind !== 'number' || from.number > to.number) return UNKNOWN;
  return { kind: 'range', from: from.number, to: to.number };
}

/** The block a call's params name, per the method's table entry. */
export function blockRefOf(caching: MethodCaching, params: unknown): BlockRef {
  const locator: BlockLocator = caching.block;
  const list = Array.isArray(params) ? params : params === undefined ? [] : undefined;
  switch (locator.in) {
    case 'params':
      return list === undefined ? UNKNOWN : blockParam(list[locator.index]);
    case 'filter':
      return list === undefined || list.length !== 1 ? UNKNOWN : filterRef(list[0]);
    case 'slot-params': {
      const slot = list?.[locator.index];
      return typeof slot === 'number' && Number.isSafeInteger(slot) && slot >= 0 ? { kind: 'number', number: slot } : UNKNOWN;
    }
    case 'answer':
    case 'transaction':
    case 'slot-answer':
    case 'none':
      return { kind: 'answer' };
  }
}

/**
 * The params with the `finalized` tag replaced by that block's number (as the cache keys and the
 * upstream see it), or undefined when they name no `finalized` tag where the table looks.
 */
export function resolveFinalizedTag(caching: MethodCaching, params: unknown, finalized: number): unknown[] | undefined {
  if (!Array.isArray(params)) return undefined;
  const hex = `0x${finalized.toString(16)}`;
  const locator = caching.block;
  if (locator.in === 'params' && params[locator.index] === 'finalized') {
    const copy = [...params];
    copy[locator.index] = hex;
    return copy;
  }
  if (locator.in === 'filter' && params.length === 1 && params[0] !== null && typeof params[0] === 'object') {
    const filter = params[0] as Record<string, unknown>;
    if (filter.toBlock !== 'finalized' && filter.fromBlock !== 'finalized') return undefined;
    const rewritten = { ...filter };
    if (filter.toBlock === 'finalized') rewritten.toBlock = hex;
    if (filter.fromBlock === 'finalized') rewritten.fromBlock = hex;
    return [rewritten];
  }
  return undefined;
}
