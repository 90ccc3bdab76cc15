import type { BlockHeader, HeaderFetcher } from '../routing/finality-probe.js';

/**
 * What one network's chain is known to be, from verified headers only: the hash of each block
 * number the gateway has verified (the finalized headers its probes read, and headers fetched to
 * check an entry). A cached answer by number is stored with an anchor — a known block at or above
 * its number and at or below the serving upstream's finalized block — and is served only while
 * that anchor is still canonical: a reorg that replaced the answer's block replaced every block
 * above it, the anchor included.
 *
 * Reorgs are noticed when a probe's finalized header disagrees with what is known: the same
 * number with another hash, a parent that is not the known block below it, or (when finality
 * jumped) the last known block no longer being what an upstream now says. The known numbers are
 * then walked downwards, each re-read, until one still agrees; every anchor above it is replaced,
 * so no entry from the old branch is reachable again. A walk longer than {@link MAX_REORG_WALK}
 * forgets the whole chain (its generation changes), which also drops every entry by number.
 */

/** Known numbers kept per network; the oldest go first (their entries then need one header fetch). */
const MAX_KNOWN = 50_000;
/** Headers re-read after a reorg before the whole chain is forgotten instead. */
const MAX_REORG_WALK = 32;

export interface Anchor {
  number: number;
  hash: string;
  generation: number;
}

export interface CanonicalChain {
  /** An anchor for an answer at `number` from an upstream finalized at `finalized`, if a known block fits. */
  anchorFor(number: number, finalized: number): Anchor | undefined;
  /** True or false when known now; undefined when the anchor's number is not known here (see {@link resolve}). */
  holds(anchor: Anchor): boolean | undefined;
  /** Whether the anchor holds, reading its header if its number is not known here. */
  resolve(anchor: Anchor, fetchHeader: HeaderFetcher): Promise<boolean>;
  /** A verified finalized header from a probe; `fetchHeader` asks the same upstream for others. */
  observe(header: BlockHeader, fetchHeader: HeaderFetcher): Promise<void>;
  /** Reorgs noticed so far (for the metric and tests). */
  readonly reorgs: number;
}

export function createCanonicalChain(onReorg?: (depth: number) => void): CanonicalChain {
  const hashes = new Map<number, string>();
  /** The known numbers in ascending order (probes append; checks may insert). */
  const numbers: number[] = [];
  let generation = 0;
  let reorgs = 0;

  function remember(number: number, hash: string): void {
    if (!hashes.has(number)) {
      const at = upperIndex(number);
      numbers.splice(at, 0, number);
      if (numbers.length > MAX_KNOWN) hashes.delete(numbers.shift()!);
    }
    hashes.set(number, hash);
  }

  /** Index of the first known number greater than `number`. */
  function upperIndex(number: number): number {
    let low = 0;
    let high = numbers.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (numbers[middle]! <= number) low = middle + 1;
      else high = middle;
    }
    return low;
  }

  function forget(): void {
    hashes.clear();
    numbers.length = 0;
    generation += 1;
  }

  /** Re-reads known numbers from `from` downwards until one agrees; those that do not are replaced. */
  async function walk(from: number, fetchHeader: HeaderFetcher): Promise<void> {
    reorgs += 1;
    let index = upperIndex(from) - 1;
    for (let steps = 0; index >= 0; index -= 1, steps += 1) {
      const number = numbers[index]!;
      if (steps >= MAX_REORG_WALK) return forget();
      const header = await fetchHeader(number);
      if (header === undefined) return forget(); // cannot tell where the branches meet
      if (header !== null && header.hash === hashes.get(number)) break;
      if (header === null) {
        hashes.delete(number);
        numbers.splice(index, 1);
      } else hashes.set(number, header.hash);
    }
    onReorg?.(from - (numbers[index] ?? -1));
  }

  return {
    get reorgs() {
      return reorgs;
    },
    anchorFor(number, finalized) {
      if (number > finalized) return undefined;
      const at = upperIndex(number - 1);
      const anchorNumber = numbers[at];
      if (anchorNumber === undefined || anchorNumber > finalized) return undefined;
      return { number: anchorNumber, hash: hashes.get(anchorNumber)!, generation };
    },
    holds(anchor) {
      if (anchor.generation !== generation && anchor.generation >= 0) return false;
      const known = hashes.get(anchor.number);
      return known === undefined ? undefined : known === anchor.hash;
    },
    async resolve(anchor, fetchHeader) {
      const known = this.holds(anchor);
      if (known !== undefined) return known;
      const header = await fetchHeader(anchor.number);
      if (header === undefined || header === null) return false;
      remember(header.number, header.hash);
      return header.hash === anchor.hash;
    },
    async observe(header, fetchHeader) {
      const known = hashes.get(header.number);
      if (known !== undefined && known !== header.hash) {
        await walk(header.number, fetchHeader);
      } else if (known === undefined) {
        const below = numbers[upperIndex(header.number) - 1];
        if (below !== undefined) {
          const belowHash = below === header.number - 1 ? header.parentHash : (await fetchHeader(below))?.hash;
          if (belowHash !== hashes.get(below)) await walk(below, fetchHeader);
        }
      }
      remember(header.number, header.hash);
    },
  };
}
