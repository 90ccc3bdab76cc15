// The response cache's parts alone: canonical params and bounded keys, the block a call names,
// the canonical chain's reorg walk (with a scripted header source), the receipts-root and index
// checks against real anvil data (and tampered copies), and the Cache-Control reading.

import { describe, expect, it } from 'vitest';
import { asksNoCache } from '../src/cache/cache-control.js';
import { blockRefOf, cacheKey, canonicalParams } from '../src/cache/cache-key.js';
import { createCanonicalChain } from '../src/cache/canonical-chain.js';
import { matchesBlockAtIndex, receiptsMatchBlock } from '../src/cache/answer-checks.js';
import { METHOD_CACHING } from '../src/cache/method-classes.js';
import type { BlockHeader } from '../src/routing/finality-probe.js';
import { directRpc, useSeededAnvil } from './helpers/anvil.js';

const anvil = useSeededAnvil({}, { blocks: 2, txPerBlock: 3 });

describe('canonical params and keys', () => {
  it('sorts members and lower-cases hex, so equal calls share a key', () => {
    expect(canonicalParams([{ to: '0xABCdef', data: '0x01' }, '0x1A'])).toBe(canonicalParams([{ data: '0x01', to: '0xabcdef' }, '0x1a']));
    expect(canonicalParams(['Hello'])).toBe('["Hello"]');
    expect(canonicalParams(undefined)).toBe('[]');
  });

  it('refuses what it cannot reproduce: fractions, unsafe integers, deep nesting', () => {
    let deep: unknown = 1;
    for (let depth = 0; depth < 17; depth += 1) deep = [deep];
    for (const params of [[1.5], [2 ** 60], [deep]]) expect(canonicalParams(params)).toBeUndefined();
    expect(canonicalParams([[[[1]]]])).toBe('[[[[1]]]]');
  });

  it('bounds the key whatever the params: long params are hashed', () => {
    const huge = canonicalParams([{ data: `0x${'ab'.repeat(200_000)}` }])!;
    const key = cacheKey('eth', 'eth_call', huge);
    expect(key.length).toBeLessThan(100);
    expect(cacheKey('eth', 'eth_call', huge)).toBe(key);
    expect(cacheKey('eth', 'eth_call', huge.replace(/ab"}]$/, 'ac"}]'))).not.toBe(key);
    expect(cacheKey('eth', 'eth_call', '["0x1"]')).toContain('["0x1"]');
  });

  it('finds the block a call names: numbers, tags, hashes, EIP-1898, ranges', () => {
    const evm = METHOD_CACHING.evm;
    const hash = `0x${'ab'.repeat(32)}`;
    expect(blockRefOf(evm.eth_call!, [{}, '0x10'])).toEqual({ kind: 'number', number: 16 });
    expect(blockRefOf(evm.eth_call!, [{}])).toEqual({ kind: 'tag', tag: 'latest' });
    expect(blockRefOf(evm.eth_call!, [{}, { blockHash: hash }])).toEqual({ kind: 'hash', hash });
    expect(blockRefOf(evm.eth_call!, [{}, { blockNumber: '0x2' }])).toEqual({ kind: 'number', number: 2 });
    expect(blockRefOf(evm.eth_getBlockByNumber!, ['earliest', false])).toEqual({ kind: 'number', number: 0 });
    expect(blockRefOf(evm.eth_getLogs!, [{ fromBlock: '0x1', toBlock: '0x5' }])).toEqual({ kind: 'range', from: 1, to: 5 });
    expect(blockRefOf(evm.eth_getLogs!, [{ fromBlock: '0x5', toBlock: '0x1' }])).toEqual({ kind: 'unknown' });
    expect(blockRefOf(evm.eth_getLogs!, [{ fromBlock: '0x1' }])).toEqual({ kind: 'tag', tag: 'latest' });
    expect(blockRefOf(evm.eth_getBalance!, ['0xabc', '0x0010'])).toEqual({ kind: 'unknown' });
    expect(blockRefOf(evm.eth_getBalance!, ['0xabc', 17])).toEqual({ kind: 'unknown' });
  });
});

describe('the canonical chain', () => {
  const header = (number: number, branch: string): BlockHeader => ({
    number,
    hash: `0x${branch.repeat(2)}${number.toString(16).padStart(62, '0')}`,
    parentHash: `0x${branch.repeat(2)}${(number - 1).toString(16).padStart(62, '0')}`,
  });

  it('anchors answers on the lowest known block above them, and drops those above a reorg', async () => {
    let branch = 'a';
    /** Blocks from 20 on were replaced by branch b. */
    const fetched: number[] = [];
    const fetchHeader = async (number: number) => {
      fetched.push(number);
      return header(number, number >= 20 ? branch : 'a');
    };
    const chain = createCanonicalChain();
    for (const number of [10, 15, 25, 30]) await chain.observe(header(number, 'a'), fetchHeader);
    expect(chain.anchorFor(12, 30)).toMatchObject({ number: 15 });
    expect(chain.anchorFor(26, 25)).toBeUndefined(); // above the serving upstream's finality
    const low = chain.anchorFor(12, 30)!;
    const high = chain.anchorFor(22, 30)!;
    expect(high.number).toBe(25);
    expect(chain.holds(low)).toBe(true);
    expect(chain.holds(high)).toBe(true);

    branch = 'b';
    fetched.length = 0;
    await chain.observe(header(30, 'b'), fetchHeader);
    expect(chain.reorgs).toBe(1);
    // Walked down from 30 until a block agreed (15), and no further.
    expect(fetched).toEqual([30, 25, 15]);
    expect(chain.holds(low)).toBe(true);
    expect(chain.holds(high)).toBe(false);
  });

  it('forgets everything when the branches do not meet within the walk', async () => {
    const chain = createCanonicalChain();
    const fetchA = async (number: number) => header(number, 'a');
    for (let number = 1; number <= 40; number += 1) await chain.observe(header(number, 'a'), fetchA);
    const anchor = chain.anchorFor(1, 40)!;
    await chain.observe(header(40, 'c'), async (number) => header(number, 'c'));
    expect(chain.holds(anchor)).toBe(false);
    expect(chain.anchorFor(1, 40)).toMatchObject({ number: 40 });
  });
});

describe('answer checks against verified blocks (real anvil data)', () => {
  it('receipts rebuild the receiptsRoot; a changed receipt does not', async () => {
    const hash = anvil.seed.blocksWithTransactions[0]!;
    const block = await directRpc(anvil.node.url, 'eth_getBlockByHash', [hash, true]);
    const receipts = (await directRpc(anvil.node.url, 'eth_getBlockReceipts', [hash])) as Array<Record<string, unknown>>;
    expect(receipts.length).toBeGreaterThan(1);
    expect(receiptsMatchBlock(receipts, block)).toBe(true);
    expect(receiptsMatchBlock([...receipts].reverse(), block)).toBe(false);
    expect(receiptsMatchBlock(receipts.slice(1), block)).toBe(false);
    expect(receiptsMatchBlock([{ ...receipts[0], cumulativeGasUsed: '0x1' }, ...receipts.slice(1)], block)).toBe(false);
    expect(receiptsMatchBlock([{ ...receipts[0], status: '0x0' }, ...receipts.slice(1)], block)).toBe(false);
  });

  it('a transaction or receipt must be the one the block holds at its index', async () => {
    const hash = anvil.seed.blocksWithTransactions[1]!;
    const block = (await directRpc(anvil.node.url, 'eth_getBlockByHash', [hash, true])) as { transactions: Array<{ hash: string }> };
    const txHash = block.transactions[1]!.hash;
    const transaction = (await directRpc(anvil.node.url, 'eth_getTransactionByHash', [txHash])) as Record<string, unknown>;
    const receipt = (await directRpc(anvil.node.url, 'eth_getTransactionReceipt', [txHash])) as Record<string, unknown>;
    expect(matchesBlockAtIndex('eth_getTransactionByHash', transaction, block)).toBe(true);
    expect(matchesBlockAtIndex('eth_getTransactionReceipt', receipt, block)).toBe(true);
    expect(matchesBlockAtIndex('eth_getTransactionByHash', { ...transaction, value: '0x1' }, block)).toBe(false);
    expect(matchesBlockAtIndex('eth_getTransactionByHash', { ...transaction, transactionIndex: '0x0' }, block)).toBe(false);
    expect(matchesBlockAtIndex('eth_getTransactionReceipt', { ...receipt, transactionIndex: '0x0' }, block)).toBe(false);
  });
});

describe('Cache-Control', () => {
  it('reads no-cache among directives, in any case; ignores everything else', () => {
    for (const value of ['no-cache', 'No-Cache', 'max-age=0, no-cache', ' no-cache ,x', ['a', 'no-cache']]) expect(asksNoCache(value), String(value)).toBe(true);
    for (const value of [undefined, '', 'no-store', 'no-cache=', '"no-cache"', 'nocache', ',,,', `no-cache,${' '.repeat(2000)}`]) expect(asksNoCache(value), String(value)).toBe(false);
  });
});
