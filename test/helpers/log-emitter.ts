// A contract that emits logs, deployed from hand-written EVM bytecode (no compiler), and a chain
// of blocks with and without its logs on anvil, for eth_getLogs tests and the bench.
//
// Runtime (84 bytes), on every call:
//   60 00 35 60 00 52      mstore(0, calldataload(0))                 the call's first word is the data
//   43                     number                                     topic1: the block number
//   7f <PING>              push32 keccak256("Ping(uint256,uint256)")  topic0
//   60 20 60 00 a2         log2(0, 32, PING, number)                  Ping(uint256 indexed blockNumber, uint256 value)
//   7f <PONG>              push32 keccak256("Pong(uint256)")
//   60 20 60 00 a1         log1(0, 32, PONG)                          Pong(uint256 value)
//   00                     stop
// Init code (11 bytes) copies the runtime that follows it into memory and returns it:
//   60 54 80 60 0b 60 00 39 60 00 f3                                  codecopy(0, 11, 84); return(0, 84)
// So every call leaves two logs in its block, which viem and ethers decode with LOG_EMITTER_ABI.

import { keccak256, parseAbi, toHex, type Address } from 'viem';
import { directRpc } from './anvil.js';

export const LOG_EMITTER_ABI = parseAbi(['event Ping(uint256 indexed blockNumber, uint256 value)', 'event Pong(uint256 value)']);
export const PING_TOPIC = keccak256(toHex('Ping(uint256,uint256)'));
export const PONG_TOPIC = keccak256(toHex('Pong(uint256)'));
export const LOG_EMITTER_RUNTIME = `600035600052437f${PING_TOPIC.slice(2)}60206000a27f${PONG_TOPIC.slice(2)}60206000a100`;
const INIT_CODE = '0x605480600b6000396000f3';

export interface EmittingChain {
  contract: Address;
  /** The block of the first emitting call. */
  firstLogBlock: number;
  /** First block of the dense part (several calls per block). */
  denseFrom: number;
  head: number;
}

export interface EmittingChainOptions {
  /** Blocks with one emitting call each. */
  sparseCalls: number;
  /** Empty blocks mined after each of them. */
  gap: number;
  /** Blocks with `densePerBlock` calls each, after the sparse part. */
  denseBlocks: number;
  densePerBlock: number;
  /** Empty blocks mined at the end. */
  tail: number;
}

const hex = (n: number) => `0x${n.toString(16)}`;

/**
 * Deploys the emitter on a fresh anvil and mines the chain. Automine is turned off: blocks are
 * mined explicitly (`anvil_mine`'s first block takes the pending transactions).
 */
export async function buildEmittingChain(url: string, options: EmittingChainOptions): Promise<EmittingChain> {
  const account = ((await directRpc(url, 'eth_accounts', [])) as Address[])[0]!;
  const send = async (data: string, to?: Address) =>
    (await directRpc(url, 'eth_sendTransaction', [{ from: account, ...(to === undefined ? {} : { to }), data, gas: '0x30000' }])) as string;
  const mine = (blocks: number) => directRpc(url, 'anvil_mine', [hex(blocks)]);
  await directRpc(url, 'evm_setAutomine', [false]);
  const deployed = await send(`${INIT_CODE}${LOG_EMITTER_RUNTIME}`);
  await mine(1);
  const contract = ((await directRpc(url, 'eth_getTransactionReceipt', [deployed])) as { contractAddress: Address }).contractAddress;
  const code = (await directRpc(url, 'eth_getCode', [contract, 'latest'])) as string;
  if (code.slice(2) !== LOG_EMITTER_RUNTIME) throw new Error(`the log emitter was not deployed as written: ${code}`);
  const firstLogBlock = Number.parseInt((await directRpc(url, 'eth_blockNumber', [])) as string, 16) + 1;
  for (let index = 0; index < options.sparseCalls; index += 1) {
    await send(toHex(index, { size: 32 }), contract);
    await mine(1 + options.gap);
  }
  const denseFrom = Number.parseInt((await directRpc(url, 'eth_blockNumber', [])) as string, 16) + 1;
  for (let block = 0; block < options.denseBlocks; block += 1) {
    for (let index = 0; index < options.densePerBlock; index += 1) await send(toHex(1_000_000 + block * 10 + index, { size: 32 }), contract);
    await mine(1);
  }
  if (options.tail > 0) await mine(options.tail);
  const head = Number.parseInt((await directRpc(url, 'eth_blockNumber', [])) as string, 16);
  return { contract, firstLogBlock, denseFrom, head };
}
