/**
 * Verification of an `eth_getBlockByHash` result against the hash it was requested by
 * (docs/verification.md): a block is answered or cached only if it is the block that hash names.
 *
 * What is checked, by mode:
 * - `off`: `block.hash` equals the requested hash.
 * - `header`: also keccak256(RLP(header)) equals it, for every header form from Frontier to
 *   Prague (the fork fields are appended in order, and a later one implies the earlier ones).
 * - `full`: also, for a hydrated body: each transaction's `hash` is keccak256 of its canonical
 *   (EIP-2718) encoding, the transactions trie root built from those encodings equals
 *   `transactionsRoot`, the withdrawals trie root equals `withdrawalsRoot`, each transaction's
 *   `blockHash`, `blockNumber`, `transactionIndex` (and `blockTimestamp` when given) agree with
 *   the block, a typed transaction's `v` agrees with its `yParity`, an EIP-155 legacy
 *   transaction's `chainId` agrees with its `v`, and `sha3Uncles` agrees with an empty or
 *   non-empty `uncles` list.
 *
 * Not covered (so an upstream could alter these without being caught):
 * - `from`: recovering the sender needs one secp256k1 public-key recovery per transaction,
 *   far more than the rest of the check put together; the signature (`v`/`yParity`, `r`, `s`)
 *   itself is covered by the transaction hash.
 * - `size`, `totalDifficulty`: not committed to by the header.
 * - the uncle headers when `uncles` is non-empty (`sha3Uncles` hashes the full uncle headers,
 *   which the block does not carry), and so the uncle hashes listed in `uncles`.
 * - fields a node adds that the canonical encoding does not contain: the effective `gasPrice`
 *   of a dynamic-fee transaction, a legacy transaction's `chainId` when `v` is 27/28, anvil's
 *   blob sidecars (`blobs`, `commitments`, `proofs`), chain-specific extras.
 * - receipts and state: `receiptsRoot`, `stateRoot` and `logsBloom` are covered by the header
 *   hash but not checked against anything (that needs the receipts or the state).
 * Transaction types other than 0-4 (e.g. an L2's deposit type 0x7e) are refused in `full`
 * mode, because their encoding is not known here; such networks need `header`.
 */

import { RLP, type Input } from '@ethereumjs/rlp';
import { keccak_256 } from '@noble/hashes/sha3.js';
import { orderedTrieRoot } from './ordered-trie.js';

/** How much of a block is checked before it is answered or cached. */
export type BlockVerification = 'full' | 'header' | 'off';

type Json = Record<string, unknown>;

/** Thrown by the field readers below; its message is the reason returned to the caller. */
class Rejection extends Error {}

function reject(reason: string): never {
  throw new Rejection(reason);
}

/** keccak256(RLP([])): the `sha3Uncles` of a block without uncles. */
const EMPTY_UNCLES_HASH = Buffer.from(keccak_256(RLP.encode([])));
const EMPTY = new Uint8Array(0);
const ONE = Uint8Array.of(1);

/** A fixed number of bytes, any number of bytes (`data`), or a big-endian number (`quantity`). */
type Kind = number | 'data' | 'quantity';

/** The fields every header has, in RLP order. */
const BASE_HEADER: readonly (readonly [string, Kind])[] = [
  ['parentHash', 32],
  ['sha3Uncles', 32],
  ['miner', 20],
  ['stateRoot', 32],
  ['transactionsRoot', 32],
  ['receiptsRoot', 32],
  ['logsBloom', 256],
  ['difficulty', 'quantity'],
  ['number', 'quantity'],
  ['gasLimit', 'quantity'],
  ['gasUsed', 'quantity'],
  ['timestamp', 'quantity'],
  ['extraData', 'data'],
  ['mixHash', 32],
  ['nonce', 8],
];

/** Fields appended by later forks, in order: London, Shanghai, Cancun (three), Prague. */
const FORK_HEADER: readonly (readonly [string, Kind])[] = [
  ['baseFeePerGas', 'quantity'],
  ['withdrawalsRoot', 32],
  ['blobGasUsed', 'quantity'],
  ['excessBlobGas', 'quantity'],
  ['parentBeaconBlockRoot', 32],
  ['requestsHash', 32],
];

/**
 * Why `block` cannot be the answer for `expectedHash` (lower-case 0x hash), or undefined when it verifies.
 * 'off': only `block.hash === expectedHash`. 'header': keccak256(RLP(header)) === expectedHash.
 * 'full': header, plus for a hydrated body every transaction hash = keccak256(canonical encoding), transactionsRoot = trie root,
 * withdrawalsRoot = trie root of withdrawals, tx.blockHash/blockNumber/transactionIndex consistent, empty uncles => sha3Uncles is the empty-list hash.
 * In 'full' mode a non-hydrated body (transaction hashes only) returns a reason ('transactions not hydrated').
 * `null` is not passed here (the caller handles null).
 * The check itself is synchronous (it runs to completion on the caller's tick); the Promise is
 * kept so that callers need not change should part of it move off the event loop.
 */
export async function verifyBlock(
  block: unknown,
  expectedHash: string,
  verification: BlockVerification,
): Promise<string | undefined> {
  try {
    return check(block, expectedHash, verification);
  } catch (err) {
    if (err instanceof Rejection) return err.message;
    // Nothing below is expected to throw otherwise; if a library does, the block is still not verified.
    return `verification failed: ${err instanceof Error ? err.message : String(err)}`;
  }
}

function check(block: unknown, expectedHash: string, verification: BlockVerification): string | undefined {
  if (!isObject(block)) return 'block is not an object';
  if (block.hash !== expectedHash) return 'hash field mismatch';
  if (verification === 'off') return undefined;
  if (verification !== 'header' && verification !== 'full') return `unknown verification mode ${String(verification)}`;

  const expected = hexBytes(expectedHash);
  if (expected === undefined || expected.length !== 32) return 'malformed expected hash';
  const header = readHeader(block);
  if (!expected.equals(keccak_256(RLP.encode(header.fields)))) return 'header hash mismatch';
  if (verification === 'header') return undefined;
  return verifyBody(block, header, expectedHash);
}

interface Header {
  /** The header's RLP list items, in order. */
  fields: Uint8Array[];
  /** Decoded values by name, for the body checks. */
  values: Map<string, Uint8Array>;
}

function readHeader(block: Json): Header {
  const fields: Uint8Array[] = [];
  const values = new Map<string, Uint8Array>();
  for (const [key, kind] of BASE_HEADER) {
    const value = field(block, key, kind, 'header');
    fields.push(value);
    values.set(key, value);
  }
  // The header grows by appending, so its length is set by the last fork field present. An
  // earlier one missing is an error, not a skip: RLP is positional, so skipping would let a value
  // be shown under a later field's name with the same hash (a London base fee as `blobGasUsed`).
  let last = FORK_HEADER.length - 1;
  while (last >= 0 && isAbsent(block[FORK_HEADER[last]![0]])) last--;
  for (let i = 0; i <= last; i++) {
    const [key, kind] = FORK_HEADER[i]!;
    if (isAbsent(block[key])) reject(`missing header field ${key}`);
    const value = field(block, key, kind, 'header');
    fields.push(value);
    values.set(key, value);
  }
  return { fields, values };
}

function verifyBody(block: Json, header: Header, expectedHash: string): string | undefined {
  const { transactions, uncles, withdrawals } = block;
  if (!Array.isArray(transactions)) return 'malformed field transactions';
  if (!Array.isArray(uncles)) return 'malformed field uncles';

  // An empty uncle list must come with the empty-list hash; a non-empty one cannot (its
  // uncle headers are not in the answer, so that is as far as it can be checked).
  const sha3Uncles = header.values.get('sha3Uncles')!;
  if (uncles.length === 0 ? !EMPTY_UNCLES_HASH.equals(sha3Uncles) : EMPTY_UNCLES_HASH.equals(sha3Uncles)) {
    return 'sha3Uncles mismatch';
  }
  for (const uncle of uncles) if (decode(uncle, 32) === undefined) return 'malformed field uncles';

  const number = header.values.get('number')!;
  const timestamp = header.values.get('timestamp')!;
  const encoded: Uint8Array[] = new Array(transactions.length);
  for (let i = 0; i < transactions.length; i++) {
    const tx: unknown = transactions[i];
    if (!isObject(tx)) return typeof tx === 'string' ? 'transactions not hydrated' : `malformed transaction ${i}`;
    const where = `transaction ${i}`;
    const bytes = encodeTransaction(tx, where);
    if (tx.hash !== `0x${hex(keccak_256(bytes))}`) return `${where} hash mismatch`;
    // These are not in the encoding, so the hash does not cover them; a client reads them all the same.
    if (tx.blockHash !== expectedHash) return `${where} blockHash mismatch`;
    if (!sameBytes(decode(tx.blockNumber, 'quantity'), number)) return `${where} blockNumber mismatch`;
    if (decodeSmall(tx.transactionIndex) !== i) return `${where} transactionIndex mismatch`;
    if (tx.blockTimestamp !== undefined && !sameBytes(decode(tx.blockTimestamp, 'quantity'), timestamp)) {
      return `${where} blockTimestamp mismatch`;
    }
    encoded[i] = bytes;
  }
  if (!sameBytes(orderedTrieRoot(encoded), header.values.get('transactionsRoot'))) return 'transactions root mismatch';

  const withdrawalsRoot = header.values.get('withdrawalsRoot');
  if (withdrawalsRoot === undefined) {
    // Pre-Shanghai: nothing commits to withdrawals, so any listed would be unverified.
    if (withdrawals !== undefined && (!Array.isArray(withdrawals) || withdrawals.length > 0)) {
      return 'withdrawals without withdrawalsRoot';
    }
    return undefined;
  }
  if (!Array.isArray(withdrawals)) return 'malformed field withdrawals';
  const encodedWithdrawals: Uint8Array[] = new Array(withdrawals.length);
  for (let i = 0; i < withdrawals.length; i++) {
    const w: unknown = withdrawals[i];
    const where = `withdrawal ${i}`;
    if (!isObject(w)) return `malformed ${where}`;
    encodedWithdrawals[i] = RLP.encode([
      field(w, 'index', 'quantity', where),
      field(w, 'validatorIndex', 'quantity', where),
      field(w, 'address', 20, where),
      field(w, 'amount', 'quantity', where),
    ]);
  }
  if (!sameBytes(orderedTrieRoot(encodedWithdrawals), withdrawalsRoot)) return 'withdrawals root mismatch';
  return undefined;
}

/** The canonical encoding of a transaction: its trie value, and keccak256 of it is its hash. */
function encodeTransaction(tx: Json, where: string): Uint8Array {
  // Nodes from before Berlin (no typed transactions yet) may omit `type`.
  const type = tx.type === undefined ? 0 : decodeSmall(tx.type);
  if (type === undefined) reject(`malformed ${where} field type`);
  const q = (key: string): Uint8Array => field(tx, key, 'quantity', where);
  switch (type) {
    case 0:
      checkLegacyChainId(tx, where);
      return RLP.encode([
        q('nonce'), q('gasPrice'), q('gas'), to(tx, where), q('value'), field(tx, 'input', 'data', where),
        q('v'), q('r'), q('s'),
      ]);
    case 1:
      return typed(1, [
        q('chainId'), q('nonce'), q('gasPrice'), q('gas'), to(tx, where), q('value'), field(tx, 'input', 'data', where),
        accessList(tx, where), yParity(tx, where), q('r'), q('s'),
      ]);
    case 2:
      return typed(2, [
        q('chainId'), q('nonce'), q('maxPriorityFeePerGas'), q('maxFeePerGas'), q('gas'), to(tx, where), q('value'),
        field(tx, 'input', 'data', where), accessList(tx, where), yParity(tx, where), q('r'), q('s'),
      ]);
    case 3:
      return typed(3, [
        q('chainId'), q('nonce'), q('maxPriorityFeePerGas'), q('maxFeePerGas'), q('gas'), to(tx, where), q('value'),
        field(tx, 'input', 'data', where), accessList(tx, where), q('maxFeePerBlobGas'),
        list(tx, 'blobVersionedHashes', where, (h) => decode(h, 32)), yParity(tx, where), q('r'), q('s'),
      ]);
    case 4:
      return typed(4, [
        q('chainId'), q('nonce'), q('maxPriorityFeePerGas'), q('maxFeePerGas'), q('gas'), to(tx, where), q('value'),
        field(tx, 'input', 'data', where), accessList(tx, where), authorizationList(tx, where), yParity(tx, where),
        q('r'), q('s'),
      ]);
    default:
      reject(`unsupported transaction type 0x${type.toString(16)}`);
  }
}

/** EIP-2718: the type byte followed by the RLP payload. */
function typed(type: number, payload: Input[]): Uint8Array {
  const body = RLP.encode(payload);
  const out = new Uint8Array(body.length + 1);
  out[0] = type;
  out.set(body, 1);
  return out;
}

/** `to`: an address, or null (contract creation), encoded as the empty string. */
function to(tx: Json, where: string): Uint8Array {
  return isAbsent(tx.to) ? EMPTY : field(tx, 'to', 20, where);
}

function accessList(tx: Json, where: string): Input[] {
  return list(tx, 'accessList', where, (entry) => {
    if (!isObject(entry) || !Array.isArray(entry.storageKeys)) return undefined;
    const address = decode(entry.address, 20);
    const keys: Uint8Array[] = new Array(entry.storageKeys.length);
    for (let i = 0; i < keys.length; i++) {
      const key = decode(entry.storageKeys[i], 32);
      if (key === undefined) return undefined;
      keys[i] = key;
    }
    return address === undefined ? undefined : [address, keys];
  });
}

function authorizationList(tx: Json, where: string): Input[] {
  const inner = `${where} authorization`;
  return list(tx, 'authorizationList', where, (auth) => {
    if (!isObject(auth)) return undefined;
    const q = (key: string): Uint8Array => field(auth, key, 'quantity', inner);
    return [q('chainId'), field(auth, 'address', 20, inner), q('nonce'), yParity(auth, inner), q('r'), q('s')];
  });
}

/**
 * The signature's y-parity. The spec gives `yParity`; some nodes give only `v` for typed
 * transactions (as the parity itself, or 27/28 by the legacy convention), so it is derived
 * from `v` then. When both are given they must agree: `v` is not in the encoding, and a client
 * that recovers the sender from `v` would otherwise trust an unverified value.
 */
function yParity(obj: Json, where: string): Uint8Array {
  const v = obj.v === undefined ? undefined : decodeSmall(obj.v);
  if (obj.v !== undefined && v === undefined) reject(`malformed ${where} field v`);
  if (obj.yParity === undefined) {
    if (v === 0 || v === 27) return EMPTY;
    if (v === 1 || v === 28) return ONE;
    reject(`malformed ${where} field ${v === undefined ? 'yParity' : 'v'}`);
  }
  const y = decodeSmall(obj.yParity);
  if (y !== 0 && y !== 1) reject(`malformed ${where} field yParity`);
  if (v !== undefined && v !== y && v !== y + 27) reject(`${where} v does not match yParity`);
  return y === 0 ? EMPTY : ONE;
}

/**
 * EIP-155: a legacy transaction signed for a chain has v = chainId * 2 + 35 + parity. Nodes
 * add `chainId` beside `v`; since the hash only covers `v`, the two must agree. (With v 27/28
 * the transaction names no chain and a `chainId` there means nothing, so it is not checked.)
 */
function checkLegacyChainId(tx: Json, where: string): void {
  if (tx.chainId === undefined) return;
  const v = field(tx, 'v', 'quantity', where);
  const chainId = field(tx, 'chainId', 'quantity', where);
  const vn = toBigInt(v);
  if (vn >= 35n && (vn - 35n) >> 1n !== toBigInt(chainId)) reject(`${where} chainId does not match v`);
}

/** Reads an array field whose items `item` encodes (undefined for a malformed item). */
function list(obj: Json, key: string, where: string, item: (value: unknown) => Input | undefined): Input[] {
  const value = obj[key];
  if (!Array.isArray(value)) reject(`malformed ${where} field ${key}`);
  const out: Input[] = new Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const encoded = item(value[i]);
    if (encoded === undefined) reject(`malformed ${where} field ${key}`);
    out[i] = encoded;
  }
  return out;
}

function field(obj: Json, key: string, kind: Kind, where: string): Uint8Array {
  const bytes = decode(obj[key], kind);
  if (bytes === undefined) reject(`malformed ${where} field ${key}`);
  return bytes;
}

/** The bytes a JSON-RPC value stands for in RLP, or undefined when it is not of that kind. */
function decode(value: unknown, kind: Kind): Buffer | undefined {
  if (typeof value !== 'string') return undefined;
  if (kind !== 'quantity') {
    const bytes = hexBytes(value);
    return bytes !== undefined && (kind === 'data' || bytes.length === kind) ? bytes : undefined;
  }
  // A quantity is RLP-encoded as its minimal big-endian bytes (zero as the empty string), so
  // leading zero digits are dropped; an odd digit count gets its implied leading zero back.
  if (value.length < 3 || !hasPrefix(value)) return undefined;
  let start = 2;
  while (start < value.length && value.charCodeAt(start) === 48 /* '0' */) start++;
  const digits = value.length - start;
  const bytes = Buffer.from(digits % 2 === 0 ? value.slice(start) : `0${value.slice(start)}`, 'hex');
  return bytes.length === (digits + 1) >> 1 ? bytes : undefined;
}

/**
 * `0x`-prefixed hex with an even digit count as bytes, or undefined. Buffer.from stops at the
 * first pair that is not hex, so a short result is the validation: one pass, no regex.
 */
function hexBytes(value: string): Buffer | undefined {
  if (value.length % 2 !== 0 || !hasPrefix(value)) return undefined;
  const bytes = Buffer.from(value.slice(2), 'hex');
  return bytes.length === (value.length - 2) / 2 ? bytes : undefined;
}

/** A quantity small enough to be a JS number (type, index, v), or undefined. */
function decodeSmall(value: unknown): number | undefined {
  const bytes = decode(value, 'quantity');
  if (bytes === undefined || bytes.length > 6) return undefined;
  let n = 0;
  for (const b of bytes) n = n * 256 + b;
  return n;
}

function toBigInt(bytes: Uint8Array): bigint {
  return bytes.length === 0 ? 0n : BigInt(`0x${hex(bytes)}`);
}

function hasPrefix(value: string): boolean {
  return value.charCodeAt(0) === 48 /* '0' */ && value.charCodeAt(1) === 120 /* 'x' */;
}

function hex(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('hex');
}

function sameBytes(a: Uint8Array | undefined, b: Uint8Array | undefined): boolean {
  return a !== undefined && b !== undefined && Buffer.compare(a, b) === 0;
}

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** JSON null is treated like a missing field (as nodes print an absent `to`). */
function isAbsent(value: unknown): boolean {
  return value === undefined || value === null;
}
