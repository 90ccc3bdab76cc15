// A seeder for the local anvil node (anvil.ts): mines blocks carrying transactions so that
// `eth_getBlockByHash` has something real to return. Separate from anvil.ts, which starts and
// stops the node: seeding is a client of any running node, through plain JSON-RPC.

import { rpcCall } from './anvil.js';

export interface SeedOptions {
  /** Minimum number of blocks that carry transactions; default 24. */
  blocks?: number;
  /** Value transfers per block; default 3. */
  txPerBlock?: number;
}

export interface SeedResult {
  /** Every block mined while seeding, oldest first (lower-case `0x` hashes). */
  blockHashes: string[];
  /** The blocks among `blockHashes` that carry at least one transaction. */
  blocksWithTransactions: string[];
  /** Every transaction sent while seeding. */
  transactionHashes: string[];
}

interface BlockSummary {
  hash: string;
  number: string;
  transactions: string[];
}

/**
 * Mines blocks that each carry value transfers between anvil's unlocked dev accounts:
 * automine off, send `txPerBlock` transfers, `evm_mine`, repeat; the previous mining
 * mode is restored at the end. The returned block lists are read back from the chain,
 * so every hash in `blocksWithTransactions` really has transactions.
 */
export async function seedAnvil(url: string, options: SeedOptions = {}): Promise<SeedResult> {
  const wanted = options.blocks ?? 24;
  const txPerBlock = Math.max(1, options.txPerBlock ?? 3);

  const accounts = (await rpcCall(url, 'eth_accounts', [])) as string[];
  if (!Array.isArray(accounts) || accounts.length < 2) {
    throw new Error(`seedAnvil: need at least 2 unlocked dev accounts, got ${JSON.stringify(accounts)}`);
  }
  const wasAutomine = (await rpcCall(url, 'anvil_getAutomine', [])) === true;
  const startNumber = Number.parseInt((await rpcCall(url, 'eth_blockNumber', [])) as string, 16);

  const transactionHashes: string[] = [];
  await rpcCall(url, 'evm_setAutomine', [false]);
  try {
    let sent = 0;
    // Each round's transfers are pending when evm_mine runs, so every round adds at least
    // one block with transactions (with --block-time an interval block may take them first;
    // that block is found by the read-back below).
    for (let round = 0; round < wanted; round++) {
      for (let i = 0; i < txPerBlock; i++, sent++) {
        // Rotate senders so a block's transfers come from different accounts (when there
        // are enough of them) and never wait on each other's nonces.
        const from = accounts[sent % accounts.length]!;
        const to = accounts[(sent + 1) % accounts.length]!;
        const hash = (await rpcCall(url, 'eth_sendTransaction', [
          { from, to, value: `0x${(1_000_000_000_000 + sent).toString(16)}` },
        ])) as string;
        transactionHashes.push(hash.toLowerCase());
      }
      await rpcCall(url, 'evm_mine', []);
    }
  } finally {
    if (wasAutomine) await rpcCall(url, 'evm_setAutomine', [true]);
  }

  const endNumber = Number.parseInt((await rpcCall(url, 'eth_blockNumber', [])) as string, 16);
  const blockHashes: string[] = [];
  const blocksWithTransactions: string[] = [];
  for (let n = startNumber + 1; n <= endNumber; n++) {
    const block = (await rpcCall(url, 'eth_getBlockByNumber', [`0x${n.toString(16)}`, false])) as BlockSummary;
    const hash = block.hash.toLowerCase();
    blockHashes.push(hash);
    if (block.transactions.length > 0) blocksWithTransactions.push(hash);
  }
  if (blocksWithTransactions.length < wanted) {
    throw new Error(
      `seedAnvil: only ${blocksWithTransactions.length} of ${wanted} blocks carry transactions (blocks ${startNumber + 1}..${endNumber})`,
    );
  }
  return { blockHashes, blocksWithTransactions, transactionHashes };
}
