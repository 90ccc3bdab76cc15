import { verifyBlock } from '../verification/block-verifier.js';
import { headOf } from './health-prober.js';
import type { AttemptOutcome, RoutedUpstream } from './upstream.js';
import { contiguous, type ResultBytes } from '../jsonrpc/result-bytes.js';

/**
 * After each health probe that read an upstream's head, its finalized block: on EVM networks
 * `eth_getBlockByNumber("finalized")`, or where the upstream does not support the tag (an error or
 * `null` answer), the header at head − `finality.depth`; on asset networks `getSlot` at
 * `finalized` commitment. A header counts only once it verifies (keccak256 of its RLP is its
 * `hash`), and its number and hash go to the network's canonical chain, which notices reorgs.
 * The response cache keeps answers by number only at or below the finalized block of the
 * upstream that gave them.
 */

/** A verified header's identity. */
export interface BlockHeader {
  number: number;
  hash: string;
  parentHash: string;
}

/** Asks for the header at a number: verified, `null` when the upstream has no such block, undefined when it could not tell. */
export type HeaderFetcher = (number: number) => Promise<BlockHeader | null | undefined>;

export type ProbeSend = (upstream: RoutedUpstream, method: string, params: unknown[]) => Promise<AttemptOutcome>;

export interface FinalityProbeOptions {
  kind: 'evm' | 'asset';
  depth: number;
  send: ProbeSend;
  /** A verified finalized header of an upstream; `fetchHeader` asks the same upstream for another (reorg checks). */
  onFinalized?: (upstream: RoutedUpstream, header: BlockHeader, fetchHeader: HeaderFetcher) => Promise<void>;
}

/** A verified header from a block answer, `null` for a `null` answer, undefined for anything else. */
export async function headerOf(outcome: { kind: string; resultBytes?: ResultBytes }): Promise<BlockHeader | null | undefined> {
  if (outcome.kind !== 'result' || outcome.resultBytes === undefined) return undefined;
  const block: unknown = JSON.parse(contiguous(outcome.resultBytes).toString('utf8'));
  if (block === null) return null;
  if (typeof block !== 'object') return undefined;
  const { hash, number, parentHash } = block as { hash?: unknown; number?: unknown; parentHash?: unknown };
  if (typeof hash !== 'string' || typeof number !== 'string' || typeof parentHash !== 'string') return undefined;
  if ((await verifyBlock(block, hash.toLowerCase(), 'header')) !== undefined) return undefined;
  const value = Number.parseInt(number, 16);
  return Number.isSafeInteger(value) ? { number: value, hash: hash.toLowerCase(), parentHash: parentHash.toLowerCase() } : undefined;
}

export function createFinalityProbe(options: FinalityProbeOptions): (upstream: RoutedUpstream, head: number) => Promise<void> {
  /** Upstreams that answered the `finalized` tag with an error or `null`: head − depth from then on. */
  const withoutTag = new Set<string>();

  async function evm(upstream: RoutedUpstream, head: number): Promise<void> {
    const fetchHeader: HeaderFetcher = async (number) => headerOf(await options.send(upstream, 'eth_getBlockByNumber', [`0x${number.toString(16)}`, false]));
    let header: BlockHeader | null | undefined;
    if (!withoutTag.has(upstream.id)) {
      const outcome = await options.send(upstream, 'eth_getBlockByNumber', ['finalized', false]);
      header = await headerOf(outcome);
      if (outcome.kind === 'rpc-error' || header === null) withoutTag.add(upstream.id);
    }
    if (withoutTag.has(upstream.id)) {
      const number = head - options.depth;
      if (number < 0) return;
      header = await fetchHeader(number);
      // A header that names another number is no answer for this one.
      if (header?.number !== number) return;
    }
    if (header === undefined || header === null || header.number > head) return;
    upstream.health.finalized = header.number;
    await options.onFinalized?.(upstream, header, fetchHeader);
  }

  async function asset(upstream: RoutedUpstream): Promise<void> {
    const outcome = await options.send(upstream, 'getSlot', [{ commitment: 'finalized' }]);
    const slot = outcome.kind === 'result' ? headOf(outcome.resultBytes) : undefined;
    if (slot !== undefined) upstream.health.finalized = slot;
  }

  return async (upstream, head) => {
    try {
      if (options.kind === 'evm') await evm(upstream, head);
      else await asset(upstream);
    } catch {
      // An answer that does not parse tells nothing: the last known finality stays.
    }
  };
}
