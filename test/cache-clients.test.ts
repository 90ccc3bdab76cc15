// viem and ethers through the caching gateway: receipts, waiting for a receipt, contract events
// over old ranges and contract reads at a block number answer exactly as the node does, and the
// second time without reaching it (the recording proxy in front of anvil counts by method).

import { Contract, JsonRpcProvider } from 'ethers';
import { createPublicClient, http, type Hash } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useSeededAnvil } from './helpers/anvil.js';
import { blockNumber, cachingGateway, clientCalls, COUNTER_ABI, deployCounter, mine, untilFinalized, type Counter } from './helpers/cache-chain.js';
import type { TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const anvil = useSeededAnvil({}, { blocks: 1, txPerBlock: 1 });

let counter: Counter;
let bumps: Array<{ hash: string; block: bigint }>;
let proxy: ScriptedUpstream;
let tg: TestGateway;

beforeAll(async () => {
  counter = await deployCounter(anvil.node.url);
  bumps = [];
  for (let n = 0; n < 3; n += 1) {
    const { hash, receipt } = await counter.bump();
    bumps.push({ hash, block: BigInt(receipt.blockNumber!) });
  }
  await mine(anvil.node.url, 70);
  proxy = await startScriptedUpstream({ kind: 'proxy', url: anvil.node.url });
  tg = await cachingGateway([{ id: 'anvil', url: proxy.url }]);
}, 30_000);

/** The gateway's probes have seen the bumps finalized. */
const finalized = async (): Promise<void> => untilFinalized(tg, 'eth', 'anvil', (await blockNumber(anvil.node.url)) - 64);

afterAll(async () => {
  await tg?.close();
  await proxy?.close();
});

/** Calls of `method` that reached the node. */
const reached = (method: string): number => clientCalls(proxy).reduce((sum, received) => sum + received.methods.filter((name) => name === method).length, 0);

/** Runs `flow` twice; the second run makes no call of `method` to the node and gives the same answer. */
async function twice<T>(method: string, flow: () => Promise<T>): Promise<T> {
  const first = await flow();
  const before = reached(method);
  expect(before, `${method} reached the node the first time`).toBeGreaterThan(0);
  const second = await flow();
  expect(second).toEqual(first);
  expect(reached(method), `${method} reached the node the second time`).toBe(before);
  return second;
}

describe('viem', () => {
  it('getTransactionReceipt, waitForTransactionReceipt, getContractEvents over an old range, readContract at a block number', async () => {
    await finalized();
    const viaGateway = createPublicClient({ transport: http(tg.url('eth')) });
    const direct = createPublicClient({ transport: http(anvil.node.url) });
    const hash = bumps[0]!.hash as Hash;
    const address = counter.address as `0x${string}`;

    expect(await twice('eth_getTransactionReceipt', () => viaGateway.getTransactionReceipt({ hash }))).toEqual(await direct.getTransactionReceipt({ hash }));
    expect(await twice('eth_getTransactionReceipt', () => viaGateway.waitForTransactionReceipt({ hash: bumps[1]!.hash as Hash, pollingInterval: 50 }))).toEqual(
      await direct.getTransactionReceipt({ hash: bumps[1]!.hash as Hash }),
    );
    const range = { address, abi: COUNTER_ABI, eventName: 'Bumped' as const, fromBlock: bumps[0]!.block, toBlock: bumps[2]!.block };
    const events = await twice('eth_getLogs', () => viaGateway.getContractEvents(range));
    expect(events.map((event) => event.args.value)).toEqual([1n, 2n, 3n]);
    expect(events).toEqual(await direct.getContractEvents(range));
    const read = { address, abi: COUNTER_ABI, functionName: 'value' as const, blockNumber: bumps[1]!.block };
    expect(await twice('eth_call', () => viaGateway.readContract(read))).toBe(2n);
    expect(await direct.readContract(read)).toBe(2n);
  });
});

describe('ethers v6', () => {
  it('getTransactionReceipt, waitForTransaction, queryFilter over an old range, a call at a block tag', async () => {
    await finalized();
    const provider = new JsonRpcProvider(tg.url('eth'), 31337, { staticNetwork: true });
    const direct = new JsonRpcProvider(anvil.node.url, 31337, { staticNetwork: true });
    try {
      const hash = bumps[2]!.hash;
      const receipt = await twice('eth_getTransactionReceipt', async () => (await provider.getTransactionReceipt(hash))?.toJSON());
      expect(receipt).toEqual((await direct.getTransactionReceipt(hash))?.toJSON());
      const waited = await twice('eth_getTransactionReceipt', async () => (await provider.waitForTransaction(bumps[0]!.hash, 1))?.toJSON());
      expect(waited).toEqual((await direct.getTransactionReceipt(bumps[0]!.hash))?.toJSON());

      const abi = ['function value() view returns (uint256)', 'event Bumped(uint256 value)'];
      const viaGateway = new Contract(counter.address, abi, provider);
      const logs = await twice('eth_getLogs', async () =>
        (await viaGateway.queryFilter('Bumped', Number(bumps[0]!.block), Number(bumps[2]!.block))).map((log) => ({ block: log.blockNumber, data: log.data, tx: log.transactionHash })),
      );
      expect(logs.map((log) => BigInt(log.data))).toEqual([1n, 2n, 3n]);
      const value = await twice('eth_call', async () => (await viaGateway.getFunction('value').staticCall({ blockTag: Number(bumps[0]!.block) })) as bigint);
      expect(value).toBe(1n);
    } finally {
      provider.destroy();
      direct.destroy();
    }
  });
});
