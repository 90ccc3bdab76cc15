// What the response cache tests share: a tiny contract on anvil whose calls read a counter and
// whose transactions bump it (emitting a log), a gateway over a recording proxy in front of anvil
// with health probes on (they tell finality), and the calls that reached the node, probes aside.

import { keccak_256 } from '@noble/hashes/sha3.js';
import { expect } from 'vitest';
import { directRpc } from './anvil.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './gateway.js';
import type { ReceivedCall, ScriptedUpstream } from './scripted-upstream.js';

/** keccak256("Bumped(uint256)"): the topic of the counter's only event. */
export const BUMPED_TOPIC = `0x${Buffer.from(keccak_256(new TextEncoder().encode('Bumped(uint256)'))).toString('hex')}`;

/**
 * Runtime: with calldata, return the counter (slot 0); without, add one to it and emit
 * `Bumped(uint256 value)` with the new value. Init code copies the runtime and returns it.
 */
const RUNTIME = `361560105760005460005260206000f35b600054600101806000556000527f${BUMPED_TOPIC.slice(2)}60206000a100`;
const INIT = `604580600b6000396000f3`;

/** The counter's ABI as viem reads it. */
export const COUNTER_ABI = [
  { type: 'function', name: 'value', stateMutability: 'view', inputs: [], outputs: [{ type: 'uint256' }] },
  { type: 'event', name: 'Bumped', inputs: [{ type: 'uint256', name: 'value', indexed: false }] },
] as const;

/** The selector of `value()`: any calldata reads the counter. */
export const READ_COUNTER = '0x3fa4f245';

async function sendAndMine(url: string, tx: Record<string, unknown>): Promise<{ hash: string; receipt: Record<string, string> }> {
  const hash = (await directRpc(url, 'eth_sendTransaction', [tx])) as string;
  let receipt = (await directRpc(url, 'eth_getTransactionReceipt', [hash])) as Record<string, string> | null;
  // Without automine (a seeded node may have it off) the transaction waits for a block: mine one.
  if (receipt === null) {
    await directRpc(url, 'evm_mine', []);
    receipt = (await directRpc(url, 'eth_getTransactionReceipt', [hash])) as Record<string, string>;
  }
  return { hash, receipt };
}

export interface Counter {
  address: string;
  from: string;
  /** Sends one bump (anvil mines it at once); its hash and receipt. */
  bump(): Promise<{ hash: string; receipt: Record<string, string> }>;
}

export async function deployCounter(url: string): Promise<Counter> {
  const [from] = (await directRpc(url, 'eth_accounts', [])) as string[];
  // The runtime's PUSH32 sits between fixed opcodes: check its length (69 bytes) matches the init code's 0x45.
  if (RUNTIME.length / 2 !== 0x45) throw new Error(`counter runtime is ${RUNTIME.length / 2} bytes`);
  const { receipt } = await sendAndMine(url, { from, data: `0x${INIT}${RUNTIME}`, gas: '0x100000' });
  const address = receipt.contractAddress!;
  return { address, from: from!, bump: () => sendAndMine(url, { from, to: address, gas: '0x20000' }) };
}

export async function blockNumber(url: string): Promise<number> {
  return Number.parseInt((await directRpc(url, 'eth_blockNumber', [])) as string, 16);
}

export async function mine(url: string, blocks: number): Promise<void> {
  await directRpc(url, 'anvil_mine', [`0x${blocks.toString(16)}`]);
}

export const hex = (value: number): string => `0x${value.toString(16)}`;

/**
 * Whether a call is a health or finality probe (or a header the cache read for itself): the
 * gateway's own `eth_blockNumber` and header-only `eth_getBlockByNumber`. The tests ask for
 * blocks by number with transactions, so theirs never look like these.
 */
export function isProbe(call: ReceivedCall): boolean {
  const body = call.body as { method?: string; params?: unknown[] } | undefined;
  return body?.method === 'eth_blockNumber' || (body?.method === 'eth_getBlockByNumber' && body.params?.[1] === false) || body?.method === 'getSlot';
}

/** The calls that reached the upstream other than probes. */
export function clientCalls(upstream: ScriptedUpstream): ReceivedCall[] {
  return upstream.calls.filter((call) => !isProbe(call));
}

export async function metricsText(tg: TestGateway): Promise<string> {
  const response = await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
  return response.text();
}

/** The value of one sample of the exposition (labels in the exposition's order), or undefined. */
export function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** Waits until the gateway's probes report this upstream's finalized block at `number` or above. */
export async function untilFinalized(tg: TestGateway, network: string, upstream: string, number: number): Promise<void> {
  await expect
    .poll(async () => sample(await metricsText(tg), `tollgate_upstream_finalized_block{network="${network}",upstream="${upstream}"}`) ?? -1, { timeout: 15_000, interval: 50 })
    .toBeGreaterThanOrEqual(number);
}

/** A gateway with one EVM network `eth` over the given upstreams, probing every 100 ms. */
export async function cachingGateway(
  upstreams: Array<{ id: string; url: string }>,
  network: Record<string, unknown> = {},
  config: Record<string, unknown> = {},
  now?: () => number,
): Promise<TestGateway> {
  return startTestGateway({
    networks: [{ id: 'eth', kind: 'evm', chainId: 31337, upstreams, healthCheck: { intervalMs: 100, timeoutMs: 2_000 }, hedge: { enabled: false }, ...network }],
    config,
    now,
  });
}

/** One JSON-RPC call through the gateway. */
export function call(tg: TestGateway, method: string, params: unknown[], id: number | string = 1, headers?: Record<string, string>) {
  return rpc(tg.url('eth'), { jsonrpc: '2.0', id, method, params }, { headers });
}
