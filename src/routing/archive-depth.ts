import { blockParam, type BlockRef } from '../cache/cache-key.js';
import type { Clock } from './clock.js';
import type { RoutedUpstream } from './upstream.js';

/**
 * How far back each upstream keeps state (docs/routing.md#archive-depth). A pruned node keeps the
 * state of its last N blocks only: `upstreams[].blockHistory: N` declares it, and a node that
 * answers "missing trie node" (or another client's wording of it) for an old block is learned as
 * pruned at that depth. A call that reads state or traces at a block older than the head − N is
 * not sent to such an upstream. The head is the best head the health probes have seen; without
 * one (probes off) nothing is skipped and nothing is learned, since no age can be told.
 */

/**
 * The EVM methods that read state (or re-execute transactions) at a block, and where that block
 * is: its params index, or `transaction` when the params name a transaction hash (the block is
 * not known without a lookup, so such a call is never skipped, but a pruned answer still fails
 * over). Indexes agree with the response cache's table (test/archive-depth.test.ts checks it).
 */
export const STATE_READS: Readonly<Record<string, number | 'transaction'>> = {
  eth_getBalance: 1,
  eth_getCode: 1,
  eth_getTransactionCount: 1,
  eth_getStorageAt: 2,
  eth_getProof: 2,
  eth_call: 1,
  eth_estimateGas: 1,
  eth_createAccessList: 1,
  eth_simulateV1: 1,
  debug_traceCall: 1,
  debug_traceBlockByNumber: 0,
  debug_traceBlockByHash: 0,
  debug_storageRangeAt: 0,
  trace_block: 0,
  trace_call: 2,
  trace_callMany: 1,
  trace_replayBlockTransactions: 0,
  debug_traceTransaction: 'transaction',
  trace_transaction: 'transaction',
  trace_replayTransaction: 'transaction',
};

/** True for a method of {@link STATE_READS} (own properties only: names come from clients). */
export function readsStateAtBlock(method: string): boolean {
  return Object.hasOwn(STATE_READS, method);
}

/**
 * The block a state read names, as the cache parses block params (a number, a tag, a hash, an
 * EIP-1898 `{blockNumber}` / `{blockHash}` object; a missing one is `latest`); undefined for a
 * method that reads no state at a block.
 */
export function stateBlockOf(method: string, params: unknown): BlockRef | undefined {
  if (!readsStateAtBlock(method)) return undefined;
  const where = STATE_READS[method]!;
  if (where === 'transaction') return { kind: 'unknown' };
  const list = Array.isArray(params) ? params : params === undefined ? [] : undefined;
  return list === undefined ? { kind: 'unknown' } : blockParam(list[where]);
}

/**
 * How long a learned depth holds. A node that answered "missing trie node" may be resynced or
 * turned into an archive; after this it is asked again (and learned again if it still lacks the
 * state). An hour costs at most one failed-over attempt per upstream per hour.
 */
export const LEARNED_DEPTH_TTL_MS = 60 * 60 * 1000;

export interface ArchiveDepthOptions {
  /** Declared `blockHistory` per upstream id (absent: an archive until learned otherwise). */
  declared: ReadonlyMap<string, number>;
  clock: Clock;
  /** The best head the probes have seen (the selector's), or undefined when none is fresh. */
  bestHead: () => number | undefined;
  learnedTtlMs?: number;
}

export interface ArchiveDepth {
  /**
   * The candidates that keep state at the call's block, best first. When none of them does, all
   * of them, in the same order: a declared or learned depth may be out of date and the nodes'
   * own answer is then the call's answer (docs/routing.md#archive-depth). `onSkip` is told each
   * upstream left out.
   */
  keeping<U extends RoutedUpstream>(candidates: readonly U[], method: string, params: unknown, onSkip?: (upstreamId: string) => void): readonly U[];
  /**
   * Learns from an upstream's "state not available" answer to a state read: pruned at one block
   * less than the call's block is behind the head. Keeps the smallest depth; a block given by
   * hash or tag, or one the node may not have reached yet, teaches nothing.
   */
  learnPruned(upstream: RoutedUpstream, method: string, params: unknown): void;
  /** Blocks of state an upstream keeps, declared or learned (the smaller); undefined: an archive. */
  depthOf(upstreamId: string): number | undefined;
}

export function createArchiveDepth(options: ArchiveDepthOptions): ArchiveDepth {
  const { declared, clock, bestHead } = options;
  const ttlMs = options.learnedTtlMs ?? LEARNED_DEPTH_TTL_MS;
  const learned = new Map<string, { depth: number; expiresAt: number }>();

  function depthOf(upstreamId: string): number | undefined {
    const own = declared.get(upstreamId);
    const entry = learned.get(upstreamId);
    if (entry === undefined) return own;
    if (clock.now() >= entry.expiresAt) {
      learned.delete(upstreamId);
      return own;
    }
    return own === undefined ? entry.depth : Math.min(own, entry.depth);
  }

  /** The block number of a state read and the head it is measured against, when both are known and the block is behind it. */
  function age(method: string, params: unknown): { block: number; head: number } | undefined {
    const ref = stateBlockOf(method, params);
    if (ref?.kind !== 'number') return undefined;
    const head = bestHead();
    if (head === undefined || ref.number >= head) return undefined;
    return { block: ref.number, head };
  }

  return {
    depthOf,
    keeping(candidates, method, params, onSkip) {
      const measured = age(method, params);
      if (measured === undefined) return candidates;
      const { block, head } = measured;
      const kept = candidates.filter((upstream) => {
        const depth = depthOf(upstream.id);
        return depth === undefined || block >= head - depth;
      });
      if (kept.length === candidates.length || kept.length === 0) return candidates;
      if (onSkip !== undefined) for (const upstream of candidates) if (!kept.includes(upstream)) onSkip(upstream.id);
      return kept;
    },
    learnPruned(upstream, method, params) {
      const measured = age(method, params);
      if (measured === undefined) return;
      const { block, head } = measured;
      // A node behind the best head may simply not have the block yet: that is lag, not pruning.
      const ownHead = upstream.health.head;
      if (ownHead !== undefined && block > ownHead) return;
      const depth = head - block - 1;
      const current = learned.get(upstream.id);
      const kept = current === undefined || clock.now() >= current.expiresAt ? depth : Math.min(current.depth, depth);
      learned.set(upstream.id, { depth: kept, expiresAt: clock.now() + ttlMs });
    },
  };
}
