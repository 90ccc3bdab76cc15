/**
 * The root of an "ordered" Merkle-Patricia trie: the trie whose keys are RLP(0), RLP(1), …,
 * RLP(n-1) and whose values are the given byte strings, in order. That is how a block commits
 * to its transactions (`transactionsRoot`, values the EIP-2718 encodings), its withdrawals
 * (`withdrawalsRoot`, values RLP([index, validatorIndex, address, amount])) and its receipts.
 *
 * Why not @ethereumjs/mpt: a general trie is built by inserting one key at a time, and each
 * insertion re-encodes and re-hashes every node on the path from the root, through an async
 * database interface. Here all the keys are known up front, so the trie is built bottom-up in
 * one synchronous pass over the sorted keys and each node is encoded and hashed exactly once.
 *
 * Measured on the 2-core dev machine (shared with other work, so medians of several hundred
 * runs, old and new interleaved in one process; ranges are across runs), anvil blocks of plain
 * transfers (~116 B per encoded transaction):
 *   - the root alone, 20 transactions:    @ethereumjs/mpt 1.7-2.0 ms -> this 0.25-0.4 ms
 *   - the root alone, 200 transactions:   @ethereumjs/mpt 25-50 ms   -> this 3.3-5.6 ms
 *   - verifyBlock 'full', 20-tx block:    1.7-4.7 ms -> 0.64-1.0 ms
 *   - verifyBlock 'full', 200-tx block:   28-57 ms   -> 6-11 ms  ('header' alone: ~0.05 ms, unchanged)
 * What is left is mostly keccak256 itself (~40% of a full check: one hash per transaction and
 * one per trie node, ~415 for 200 transactions, at ~10-15 us each here), then RLP encoding
 * (~20%) and hex decoding of the JSON fields (~15%).
 *
 * @ethereumjs/mpt stays the oracle of the differential test (test/ordered-trie.test.ts).
 *
 * The rules followed (Ethereum Yellow Paper, appendix D "Modified Merkle Patricia Tree", with
 * appendix C "Hex-Prefix Encoding" and appendix B "RLP"):
 *   - a key is read as its sequence of 4-bit nibbles, high nibble first;
 *   - a leaf is RLP([HP(rest of key, leaf=true), value]);
 *   - an extension is RLP([HP(shared nibbles, leaf=false), child]), used when all the keys
 *     below a node share one or more further nibbles; its child is always a branch;
 *   - a branch is RLP([child_0 … child_15, value]): one slot per next nibble (the empty string
 *     when no key continues with it) and a value slot, non-empty only when a key ends there
 *     (never, for keys RLP(i): none is a prefix of another, but it is handled);
 *   - HP(nibbles, t) is one flag nibble (2 when t marks a leaf, +1 when the count is odd), a
 *     zero pad nibble when the count is even, then the nibbles, packed two per byte;
 *   - a child whose RLP encoding is shorter than 32 bytes is embedded in its parent as that
 *     structure itself; otherwise the parent holds keccak256 of its encoding;
 *   - the root is always keccak256 of the root node's encoding, however short; the empty trie's
 *     root is keccak256(RLP('')) = 0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421.
 *
 * A key whose value is empty is left out of the trie, as @ethereumjs/mpt and geth treat an
 * empty value (a delete); no transaction or withdrawal encoding is empty.
 *
 * Keys RLP(i) sort (as bytes, and so as nibbles) as 0x01 … 0x7f (i = 1 … 127), then 0x80
 * (i = 0, encoded as the empty string), then 0x81 0x80 … 0x81 0xff (i = 128 … 255), then
 * 0x82 0x01 0x00 … (i = 256 … 65535), and so on: within one length prefix the big-endian
 * bytes follow i. So the sorted order is known without sorting: 1 … 127, 0, 128 … n-1.
 */

import { RLP, type Input } from '@ethereumjs/rlp';
import { keccak_256 } from '@noble/hashes/sha3.js';

const EMPTY = new Uint8Array(0);

/** keccak256(RLP('')): the root of a trie without keys. */
const EMPTY_TRIE_ROOT = keccak_256(RLP.encode(EMPTY));

/** A node as its parent holds it: embedded (the node's RLP structure) or keccak256 of its encoding. */
type Reference = Input[] | Uint8Array;

/** Sorted keys (as nibbles) and their values; the keys below one node are a contiguous range. */
interface Entries {
  keys: Uint8Array[];
  values: Uint8Array[];
}

/** The trie root of keys RLP(0 … n-1) mapped to `values` (an empty value leaves its key out). */
export function orderedTrieRoot(values: readonly Uint8Array[]): Uint8Array {
  const entries: Entries = { keys: [], values: [] };
  const add = (i: number): void => {
    const value = values[i]!;
    if (value.length === 0) return;
    entries.keys.push(nibbles(RLP.encode(i)));
    entries.values.push(value);
  };
  const n = values.length;
  for (let i = 1; i < Math.min(n, 128); i++) add(i);
  if (n > 0) add(0);
  for (let i = 128; i < n; i++) add(i);

  if (entries.keys.length === 0) return EMPTY_TRIE_ROOT.slice();
  return keccak_256(RLP.encode(node(entries, 0, entries.keys.length, 0)));
}

/** The node over entries [lo, hi), whose keys agree on their first `depth` nibbles. */
function node(entries: Entries, lo: number, hi: number, depth: number): Input[] {
  const { keys, values } = entries;
  const first = keys[lo]!;
  if (hi - lo === 1) return [hexPrefix(first, depth, first.length, true), values[lo]!];
  // Sorted, so the nibbles all keys share are those the first and last share.
  const last = keys[hi - 1]!;
  let shared = depth;
  while (shared < first.length && shared < last.length && first[shared] === last[shared]) shared++;
  if (shared === depth) return branch(entries, lo, hi, depth);
  return [hexPrefix(first, depth, shared, false), reference(branch(entries, lo, hi, shared))];
}

/** The branch over entries [lo, hi), whose keys agree on their first `depth` nibbles and no more. */
function branch(entries: Entries, lo: number, hi: number, depth: number): Input[] {
  const { keys, values } = entries;
  const slots: Input[] = new Array<Input>(17).fill(EMPTY);
  // Sorted, so a key that ends here (a prefix of the others) comes first.
  if (keys[lo]!.length === depth) slots[16] = values[lo++]!;
  while (lo < hi) {
    const nibble = keys[lo]![depth]!;
    let end = lo + 1;
    while (end < hi && keys[end]![depth] === nibble) end++;
    slots[nibble] = reference(node(entries, lo, end, depth + 1));
    lo = end;
  }
  return slots;
}

function reference(structure: Input[]): Reference {
  const encoded = RLP.encode(structure);
  return encoded.length < 32 ? structure : keccak_256(encoded);
}

/** Hex-prefix encoding of nibbles [from, to) of `key`, flagged as a leaf's path or an extension's. */
function hexPrefix(key: Uint8Array, from: number, to: number, leaf: boolean): Uint8Array {
  const count = to - from;
  const odd = count % 2;
  const out = new Uint8Array((count >> 1) + 1);
  const flag = (leaf ? 2 : 0) + odd;
  out[0] = flag << 4;
  let at = from;
  if (odd === 1) out[0] |= key[at++]!;
  for (let i = 1; at < to; i++, at += 2) out[i] = (key[at]! << 4) | key[at + 1]!;
  return out;
}

function nibbles(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(bytes.length * 2);
  for (let i = 0; i < bytes.length; i++) {
    out[2 * i] = bytes[i]! >> 4;
    out[2 * i + 1] = bytes[i]! & 15;
  }
  return out;
}
