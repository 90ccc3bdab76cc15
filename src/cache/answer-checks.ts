import { RLP, type Input } from '@ethereumjs/rlp';
import { isDeepStrictEqual } from 'node:util';
import { orderedTrieRoot } from '../verification/ordered-trie.js';

/**
 * Checks of answers against a verified block before they are cached (with `verification: full`):
 * a block's receipts must rebuild its header's `receiptsRoot`, and a single transaction or receipt
 * must be the one the verified block holds at its index. An answer that fails is served as the
 * upstream gave it but never cached.
 */

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function hexBytes(value: unknown): Uint8Array {
  if (typeof value !== 'string' || !/^0x([0-9a-fA-F]{2})*$/.test(value)) throw new Error('not hex data');
  return Buffer.from(value.slice(2), 'hex');
}

/** A quantity as RLP wants it: minimal big-endian bytes, zero as the empty string. */
function quantity(value: unknown): Uint8Array {
  if (typeof value !== 'string' || !/^0x[0-9a-fA-F]+$/.test(value)) throw new Error('not a quantity');
  const digits = value.slice(2).replace(/^0+/, '');
  return Buffer.from(digits.length % 2 === 0 ? digits : `0${digits}`, 'hex');
}

/** A receipt's trie value: EIP-2718 type byte (typed receipts) then RLP([status|root, cumulativeGasUsed, logsBloom, logs]). */
function encodeReceipt(receipt: Json): Uint8Array {
  const logs = receipt.logs;
  if (!Array.isArray(logs)) throw new Error('logs missing');
  const encodedLogs: Input[] = logs.map((log: unknown) => {
    if (!isObject(log) || !Array.isArray(log.topics)) throw new Error('bad log');
    return [hexBytes(log.address), log.topics.map(hexBytes), hexBytes(log.data)];
  });
  const outcome = receipt.root !== undefined && receipt.root !== null ? hexBytes(receipt.root) : quantity(receipt.status);
  const body = RLP.encode([outcome, quantity(receipt.cumulativeGasUsed), hexBytes(receipt.logsBloom), encodedLogs]);
  const type = receipt.type === undefined ? 0 : Number.parseInt(String(receipt.type).slice(2), 16);
  if (type === 0) return body;
  const typed = new Uint8Array(body.length + 1);
  typed[0] = type;
  typed.set(body, 1);
  return typed;
}

/** Whether `receipts` (an `eth_getBlockReceipts` answer) rebuild `block.receiptsRoot` and belong to that block. */
export function receiptsMatchBlock(receipts: unknown, block: unknown): boolean {
  if (!Array.isArray(receipts) || !isObject(block) || typeof block.receiptsRoot !== 'string') return false;
  try {
    const encoded = receipts.map((receipt: unknown, index) => {
      if (!isObject(receipt) || receipt.blockHash !== block.hash || Number(receipt.transactionIndex) !== index) throw new Error('not this block');
      return encodeReceipt(receipt);
    });
    return Buffer.from(orderedTrieRoot(encoded)).equals(hexBytes(block.receiptsRoot));
  } catch {
    return false;
  }
}

/**
 * Whether a transaction (`eth_getTransactionByHash`) or receipt (`eth_getTransactionReceipt`) is
 * the one a verified hydrated block holds at its `transactionIndex`.
 */
export function matchesBlockAtIndex(method: string, answer: unknown, block: unknown): boolean {
  if (!isObject(answer) || !isObject(block) || !Array.isArray(block.transactions)) return false;
  const index = typeof answer.transactionIndex === 'string' ? Number.parseInt(answer.transactionIndex.slice(2), 16) : Number.NaN;
  const transaction: unknown = block.transactions[index];
  if (!isObject(transaction) || answer.blockHash !== block.hash || answer.blockNumber !== block.number) return false;
  if (method === 'eth_getTransactionReceipt') return answer.transactionHash === transaction.hash;
  return isDeepStrictEqual(answer, transaction);
}
