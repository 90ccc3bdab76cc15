// orderedTrieRoot (src/verification/ordered-trie.ts) against @ethereumjs/mpt, a general
// Merkle-Patricia trie built by inserting RLP(i) -> value one key at a time: the same root for
// item counts on each side of the nibble and key-length boundaries (16, 128: RLP(127) = 0x7f,
// RLP(128) = 0x8180; 256: RLP(256) = 0x820100) and for generated lists whose values are empty
// (left out of the trie), one byte (below 0x80 a byte is its own RLP), short (embedded nodes),
// longer than 32 bytes (hashed nodes), or repeated. Plus vectors derived by hand from the
// Yellow Paper's rules, independent of both implementations.

import { createMPT } from '@ethereumjs/mpt';
import { RLP, type Input } from '@ethereumjs/rlp';
import { keccak_256 } from '@noble/hashes/sha3.js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { orderedTrieRoot } from '../src/verification/ordered-trie.js';

const hex = (bytes: Uint8Array): string => `0x${Buffer.from(bytes).toString('hex')}`;

/** The oracle: one `put` per item, as a general trie is built. */
async function mptRoot(values: readonly Uint8Array[]): Promise<string> {
  const trie = await createMPT();
  for (let i = 0; i < values.length; i++) await trie.put(RLP.encode(i), values[i]!);
  return hex(trie.root());
}

const EMPTY_ROOT = '0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421';
const SEED = 20_261_123;

/** Values whose lengths range up to `maxLength`; with a small pool, many are equal. */
function valueLists(count: fc.Arbitrary<number>): fc.Arbitrary<Uint8Array[]> {
  return fc
    .record({
      count,
      // 1: empty or one byte; 3, 8, 20: every leaf embeddable; 31/33: either side of 32; 120: hashed.
      maxLength: fc.constantFrom(1, 3, 8, 20, 31, 33, 120),
      // 0: every value drawn on its own; otherwise drawn from that many values.
      pool: fc.constantFrom(0, 1, 2, 5),
    })
    .chain(({ count, maxLength, pool }) => {
      const value = fc.uint8Array({ minLength: 0, maxLength });
      if (pool === 0) return fc.array(value, { minLength: count, maxLength: count });
      return fc
        .tuple(fc.array(value, { minLength: pool, maxLength: pool }), fc.array(fc.nat(pool - 1), { minLength: count, maxLength: count }))
        .map(([values, picks]) => picks.map((i) => values[i]!));
    });
}

describe('orderedTrieRoot', () => {
  it('gives the empty trie root for no items, or only empty values', () => {
    expect(hex(orderedTrieRoot([]))).toBe(EMPTY_ROOT);
    expect(hex(keccak_256(RLP.encode(new Uint8Array(0))))).toBe(EMPTY_ROOT);
    expect(hex(orderedTrieRoot([new Uint8Array(0), new Uint8Array(0)]))).toBe(EMPTY_ROOT);
  });

  it('matches vectors derived by hand from the Yellow Paper (appendix D)', () => {
    const long = new Uint8Array(40).fill(0xab);
    // One item: the root is a leaf, key RLP(0) = 0x80, nibbles [8, 0], hex-prefix 0x20 0x80 (leaf,
    // even); hashed even though its encoding is shorter than 32 bytes.
    expect(hex(orderedTrieRoot([Uint8Array.of(7)]))).toBe(hex(keccak_256(RLP.encode([Uint8Array.of(0x20, 0x80), Uint8Array.of(7)]))));
    expect(hex(orderedTrieRoot([long]))).toBe(hex(keccak_256(RLP.encode([Uint8Array.of(0x20, 0x80), long]))));

    // Two items: keys 0x80 (nibbles 8 0) and 0x01 (0 1) part at the first nibble, so the root is a
    // branch with leaves at slots 0 (rest [1]: 0x31, leaf odd) and 8 (rest [0]: 0x30); both
    // leaves are short, so they are embedded as lists.
    const branch = (slots: Record<number, Input>): Input[] => Array.from({ length: 17 }, (_, i) => slots[i] ?? new Uint8Array(0));
    const a = Uint8Array.of(0xaa);
    const b = Uint8Array.of(0xbb, 0xcc);
    expect(hex(orderedTrieRoot([a, b]))).toBe(
      hex(keccak_256(RLP.encode(branch({ 0: [Uint8Array.of(0x31), b], 8: [Uint8Array.of(0x30), a] })))),
    );
    // The same with a long second value: that leaf is referenced by its hash instead.
    const hashedLeaf = keccak_256(RLP.encode([Uint8Array.of(0x31), long]));
    expect(hex(orderedTrieRoot([a, long]))).toBe(
      hex(keccak_256(RLP.encode(branch({ 0: hashedLeaf, 8: [Uint8Array.of(0x30), a] })))),
    );
  });

  it('matches @ethereumjs/mpt at the boundary item counts', async () => {
    for (const count of [0, 1, 2, 15, 16, 17, 127, 128, 129, 256, 257, 300]) {
      for (const length of [0, 1, 5, 33, 100]) {
        // Distinct values (the index in the first bytes), except that length 0 and 1 repeat.
        const values = Array.from({ length: count }, (_, i) => {
          const value = new Uint8Array(length).fill(0x5a);
          if (length > 1) value.set([i >> 8, i & 255]);
          else if (length === 1) value[0] = i & 255;
          return value;
        });
        expect(hex(orderedTrieRoot(values)), `${count} x ${length} B`).toBe(await mptRoot(values));
      }
    }
  });

  it('matches @ethereumjs/mpt at the boundary item counts (generated values)', async () => {
    await fc.assert(
      fc.asyncProperty(valueLists(fc.constantFrom(0, 1, 2, 15, 16, 17, 127, 128, 129, 300)), async (values) => {
        expect(hex(orderedTrieRoot(values))).toBe(await mptRoot(values));
      }),
      { seed: SEED, numRuns: 40 },
    );
  });

  it('matches @ethereumjs/mpt for generated lists of up to 400 items', async () => {
    await fc.assert(
      fc.asyncProperty(valueLists(fc.oneof(fc.nat(40), fc.nat(400))), async (values) => {
        expect(hex(orderedTrieRoot(values))).toBe(await mptRoot(values));
      }),
      { seed: SEED + 1, numRuns: 60 },
    );
  });

  it('does not keep or alter its input', () => {
    const values = [Uint8Array.of(1, 2, 3), new Uint8Array(40).fill(9)];
    const copy = values.map((v) => v.slice());
    const root = orderedTrieRoot(values);
    expect(values).toEqual(copy);
    expect(orderedTrieRoot(values)).toEqual(root);
    // The empty root is a fresh array each time, so a caller may change the one it got.
    orderedTrieRoot([]).fill(0);
    expect(hex(orderedTrieRoot([]))).toBe(EMPTY_ROOT);
  });
});
