// Real dapp flows through the gateway (issue 12, "Show"): viem and ethers v6 against a real anvil
// behind the gateway with the default catalogue and no method configured — blocks, balances, a
// contract the test deploys with a locally signed transaction, gas estimates, transfers and their
// receipts, logs, block and event watchers (filters), multicall and ethers' JSON-RPC batches. A
// proxy between the clients and the gateway records every call they made; the ledger must hold
// exactly the catalogue price of each call answered, per method. The same flows run against a
// gateway in this process and against `tollgate serve` with two workers on one SQLite file.

import { Contract, JsonRpcProvider, Wallet, type Log as EthersLog } from 'ethers';
import { createPublicClient, createWalletClient, http, parseAbi, toEventSelector, type Address, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { foundry } from 'viem/chains';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CATALOGUE } from '../src/methods/catalogue.js';
import { directRpc, useSeededAnvil } from './helpers/anvil.js';
import { startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { ensureBuilt } from './helpers/build.js';
import { setUpGroup, startGroup, type RunningGroup } from './helpers/worker-group.js';
import { openStore, type UsageQuery, type UsageRow } from '../src/store/index.js';
import { until } from './helpers/until.js';

const anvil = useSeededAnvil({}, { blocks: 2, txPerBlock: 1 });

/** Anvil's dev accounts 8 and 9 (the seeding uses the unlocked accounts through the node, not these keys here). */
const VIEM_KEY: Hex = '0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97';
const ETHERS_KEY: Hex = '0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6';
const RECIPIENT: Address = '0x000000000000000000000000000000000000dEaD';

const ABI = parseAbi(['function value() view returns (uint256)', 'event Pinged(uint256 value)']);
const ETHERS_ABI = ['function value() view returns (uint256)', 'event Pinged(uint256 value)'];
const TOPIC = toEventSelector('Pinged(uint256)');

/**
 * A contract written by hand, no compiler: whatever it is called with, it emits
 * `Pinged(42)` and returns 42 as one 32-byte word — so `value()` reads 42 and any transaction
 * to it logs one event.
 *
 *   runtime (48 bytes):
 *     60 2a        PUSH1 42
 *     60 00        PUSH1 0
 *     52           MSTORE             memory[0..32] = 42
 *     7f <topic>   PUSH32 keccak256("Pinged(uint256)")
 *     60 20        PUSH1 32           size
 *     60 00        PUSH1 0            offset
 *     a1           LOG1               log memory[0..32] with topic0
 *     60 20        PUSH1 32
 *     60 00        PUSH1 0
 *     f3           RETURN             return memory[0..32]
 *   init (11 bytes): copies the runtime (at offset 11 of the init code) to memory and returns it:
 *     60 30  PUSH1 48 (runtime size) · 80 DUP1 · 60 0b PUSH1 11 (its offset) · 60 00 PUSH1 0 ·
 *     39 CODECOPY · 60 00 PUSH1 0 · f3 RETURN
 */
const RUNTIME = `602a6000527f${TOPIC.slice(2)}60206000a160206000f3`;
const INIT_CODE: Hex = `0x603080600b6000396000f3${RUNTIME}`;

const PRICES = new Map(CATALOGUE.evm.groups.flatMap((group) => group.methods.map((method) => [method, group.credits] as const)));
const priceOf = (method: string): number => PRICES.get(method) ?? CATALOGUE.evm.unlistedCredits;

/**
 * A gateway the flows run against, behind a proxy that records every request and answer. Each
 * target has its own record: a poll a stopped watcher still had in flight against one target
 * must not be counted against the next test's target.
 */
interface Target {
  name: string;
  proxy: ScriptedUpstream;
  exchanges: Exchange[];
  url(networkId: string): string;
  usage(query: UsageQuery): Promise<UsageRow[]>;
  teamId: string;
  close(): Promise<void>;
}
type Exchange = { request: unknown; response: unknown };
const targets: Target[] = [];
let group: RunningGroup | undefined;

function recordingProxy(url: string, exchanges: Exchange[]): Promise<ScriptedUpstream> {
  return startScriptedUpstream({
    kind: 'proxy',
    url,
    transform: (response, request) => {
      exchanges.push({ request, response });
      return response;
    },
  });
}

beforeAll(async () => {
  const NETWORKS = [{ id: 'eth', kind: 'evm', chainId: 31337, upstreams: [{ id: 'anvil', url: anvil.node.url }] }];
  const tg: TestGateway = await startTestGateway({ networks: NETWORKS });
  const oneProcess: Exchange[] = [];
  targets.push({ name: 'one process', proxy: await recordingProxy(tg.url('eth'), oneProcess), exchanges: oneProcess, url: tg.url, usage: (query) => tg.store.usage(query), teamId: tg.team.id, close: () => tg.close() });

  await ensureBuilt();
  const setup = await setUpGroup({ workers: 2, dailyCredits: 1_000_000_000 });
  setup.writeConfig(NETWORKS.map((network) => ({ ...network, baseUrls: ['*/eth'] })));
  const running = await startGroup(setup);
  group = running;
  // The test reads the usage the workers wrote through a store of its own on the same file.
  const store = await openStore({ driver: 'sqlite', path: setup.db });
  const url = (networkId: string) => `${running.rpcOrigin}/${networkId}/v3/${setup.secret}`;
  const twoWorkers: Exchange[] = [];
  targets.push({
    name: 'two workers',
    proxy: await recordingProxy(url('eth'), twoWorkers),
    exchanges: twoWorkers,
    url,
    usage: (query) => store.usage(query),
    teamId: setup.teamId,
    async close() {
      await store.close();
      await running.stop('SIGTERM');
      setup.cleanUp();
    },
  });
}, 120_000);

afterAll(async () => {
  for (const target of targets) {
    await target.proxy.close();
    await target.close();
  }
});

type Item = { id?: unknown; method?: string; result?: unknown; error?: { code: number; message: string } };

/**
 * The only error these flows may meet, a race of the clients' own: a poll of a filter that its
 * stopped watcher has just uninstalled gets the node's "filter not found" (charged, like any
 * error of the node's own).
 */
const EXPECTED_ERROR = 'eth_getFilterChanges: {"code":-32000,"message":"filter not found"}';

/** Per method, what the calls in `exchanges[from..]` cost by the catalogue, and every error answered. */

function expectedCharges(exchanges: readonly Exchange[], from: number): { byMethod: Record<string, { credits: number; requests: number }>; errors: string[]; methods: Set<string> } {
  const byMethod: Record<string, { credits: number; requests: number }> = {};
  const errors: string[] = [];
  const methods = new Set<string>();
  for (const { request, response } of exchanges.slice(from)) {
    const requests = (Array.isArray(request) ? request : [request]) as Item[];
    const responses = (Array.isArray(response) ? response : [response]) as Item[];
    for (const item of requests) {
      const answer = responses.find((candidate) => candidate.id === item.id);
      const method = item.method!;
      methods.add(method);
      if (answer === undefined) {
        errors.push(`${method}: no answer`);
        continue;
      }
      if (answer.error !== undefined) {
        // Nothing the gateway refuses is sent here: an error is the node's own, charged
        // unless it is "method not found".
        errors.push(`${method}: ${JSON.stringify(answer.error)}`);
        if (answer.error.code === -32601) continue;
      }
      // Methods outside the catalogue (viem tries `eth_fillTransaction`) are counted as `other`.
      const entry = (byMethod[PRICES.has(method) ? method : 'other'] ??= { credits: 0, requests: 0 });
      entry.credits += priceOf(method);
      entry.requests += 1;
    }
  }
  return { byMethod, errors, methods };
}

const today = (): string => new Date().toISOString().slice(0, 10);
/**
 * Waits until the proxy has answered every call it received: a stopped watcher may still have a
 * poll in flight, and its charge is in the ledger once its answer reached the proxy.
 */
function nothingInFlight(target: Target): Promise<void> {
  return until(() => target.proxy.calls.length === target.exchanges.length, `the calls in flight through ${target.name}`);
}

async function usageByMethod(target: Target): Promise<Record<string, { credits: number; requests: number }>> {
  const rows = await target.usage({ teamId: target.teamId, fromDay: today(), toDay: today() });
  const byMethod: Record<string, { credits: number; requests: number }> = {};
  for (const row of rows) {
    const entry = (byMethod[row.method] ??= { credits: 0, requests: 0 });
    entry.credits += row.credits;
    entry.requests += row.requests;
  }
  return byMethod;
}
function delta(before: Record<string, { credits: number; requests: number }>, after: Record<string, { credits: number; requests: number }>) {
  const out: Record<string, { credits: number; requests: number }> = {};
  for (const [method, value] of Object.entries(after)) {
    const was = before[method] ?? { credits: 0, requests: 0 };
    if (value.requests !== was.requests || value.credits !== was.credits) out[method] = { credits: value.credits - was.credits, requests: value.requests - was.requests };
  }
  return out;
}

/** Mines a block on anvil directly: dev-node controls are denied on the gateway. */
const mine = (): Promise<unknown> => directRpc(anvil.node.url, 'evm_mine', []);

/** Mines a block every 200 ms until `condition` holds (watchers only report blocks that come after they start). */
async function mineUntil(condition: () => boolean, what: string): Promise<void> {
  const giveUpAt = Date.now() + 15_000;
  while (!condition()) {
    if (Date.now() > giveUpAt) throw new Error(`timed out waiting for ${what}`);
    await mine();
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe.each(['one process', 'two workers'])('viem through the gateway (%s)', (name) => {
  it('reads, deploys, transacts, watches and multicalls; the ledger holds the catalogue price of every call', async () => {
    const target = targets.find((candidate) => candidate.name === name)!;
    const { exchanges } = target;
    const from = exchanges.length;
    const usageBefore = await usageByMethod(target);
    const transport = http(target.proxy.url);
    const client = createPublicClient({ chain: foundry, transport, pollingInterval: 100 });
    const account = privateKeyToAccount(VIEM_KEY);
    const wallet = createWalletClient({ chain: foundry, transport, account });

    const blockNumber = await client.getBlockNumber();
    expect(blockNumber).toBe(BigInt(Number.parseInt((await directRpc(anvil.node.url, 'eth_blockNumber', [])) as string, 16)));
    const balance = await client.getBalance({ address: account.address });
    expect(balance).toBe(BigInt((await directRpc(anvil.node.url, 'eth_getBalance', [account.address, 'latest'])) as string));
    expect(balance).toBeGreaterThan(0n);

    // Deployed with a transaction signed here and sent raw through the gateway.
    const deployHash = await wallet.deployContract({ abi: ABI, bytecode: INIT_CODE });
    const deployed = await client.waitForTransactionReceipt({ hash: deployHash });
    expect(deployed.status).toBe('success');
    const address = deployed.contractAddress!;
    expect(await client.getCode({ address })).toBe(`0x${RUNTIME}`);
    expect(await client.readContract({ address, abi: ABI, functionName: 'value' })).toBe(42n);

    const gas = await client.estimateGas({ account: account.address, to: RECIPIENT, value: 1n });
    expect(gas).toBe(21_000n);

    // Watchers: new block numbers (polling eth_blockNumber) and the contract's events (a filter).
    const seenBlocks: bigint[] = [];
    const unwatchBlocks = client.watchBlockNumber({ onBlockNumber: (number) => seenBlocks.push(number), pollingInterval: 100 });
    const seenEvents: Array<{ value: bigint | undefined; transactionHash: Hex | null }> = [];
    const unwatchEvents = client.watchContractEvent({
      address,
      abi: ABI,
      eventName: 'Pinged',
      pollingInterval: 100,
      onLogs: (logs) => seenEvents.push(...logs.map((log) => ({ value: log.args.value, transactionHash: log.transactionHash }))),
    });
    try {
      // Let the event watcher install its filter before the event happens.
      await until(() => exchanges.slice(from).some((exchange) => JSON.stringify(exchange.request).includes('eth_newFilter')), 'eth_newFilter');
      const transfer = await wallet.sendTransaction({ to: RECIPIENT, value: 1_000n });
      expect((await client.waitForTransactionReceipt({ hash: transfer })).status).toBe('success');
      const ping = await wallet.sendTransaction({ to: address, data: '0x' });
      const pinged = await client.waitForTransactionReceipt({ hash: ping });
      expect(pinged.logs).toHaveLength(1);
      await until(() => seenEvents.length >= 1, 'the Pinged event');
      await mineUntil(() => seenBlocks.length >= 2, 'two block numbers');
      expect(seenEvents).toEqual([{ value: 42n, transactionHash: ping }]);
      expect(seenBlocks.at(-1)!).toBeGreaterThan(blockNumber);

      const logs = await client.getLogs({ address, event: ABI[1], fromBlock: deployed.blockNumber, toBlock: 'latest' });
      expect(logs.map((log) => [log.transactionHash, log.args.value])).toEqual([[ping, 42n]]);
    } finally {
      unwatchBlocks();
      unwatchEvents();
    }
    expect(await client.getBalance({ address: RECIPIENT })).toBeGreaterThanOrEqual(1_000n);

    // Multicall without a deployed Multicall3: viem's deployless form (one eth_call carrying the aggregator's code).
    const callsBefore = exchanges.length;
    const results = await client.multicall({
      deployless: true,
      contracts: [
        { address, abi: ABI, functionName: 'value' },
        { address, abi: ABI, functionName: 'value' },
        { address, abi: ABI, functionName: 'value' },
      ],
    });
    expect(results).toEqual([
      { status: 'success', result: 42n },
      { status: 'success', result: 42n },
      { status: 'success', result: 42n },
    ]);
    // (Beside anything a stopped watcher still had in flight.)
    expect(exchanges.slice(callsBefore).filter((exchange) => (exchange.request as Item).method === 'eth_call')).toHaveLength(1);

    // The ledger: exactly the catalogue price of every call viem made, under each method's name.
    await nothingInFlight(target);
    const expected = expectedCharges(exchanges, from);
    expect(expected.errors.filter((error) => error !== EXPECTED_ERROR)).toEqual([]);
    for (const method of ['eth_blockNumber', 'eth_getBalance', 'eth_sendRawTransaction', 'eth_getTransactionReceipt', 'eth_call', 'eth_estimateGas', 'eth_newFilter', 'eth_getFilterChanges', 'eth_getLogs', 'eth_getCode']) {
      expect(expected.methods, method).toContain(method);
    }
    expect(delta(usageBefore, await usageByMethod(target))).toEqual(expected.byMethod);
  }, 60_000);
});

describe.each(['one process', 'two workers'])('ethers v6 through the gateway (%s)', (name) => {
  it('the same flows, with provider.on("block"), contract.on(event) and its default batching; the ledger holds the catalogue prices', async () => {
    const target = targets.find((candidate) => candidate.name === name)!;
    const { exchanges } = target;
    const from = exchanges.length;
    const usageBefore = await usageByMethod(target);
    // cacheTimeout -1: ethers otherwise answers a repeated call within 250 ms from its own cache,
    // and on an instantly mining node the next transaction would reuse the nonce it just read.
    const provider = new JsonRpcProvider(target.proxy.url, 31337, { staticNetwork: true, pollingInterval: 100, cacheTimeout: -1 });
    const wallet = new Wallet(ETHERS_KEY, provider);
    try {
      // Concurrent calls: ethers sends them as one JSON-RPC batch.
      const [blockNumber, balance, nonce] = await Promise.all([provider.getBlockNumber(), provider.getBalance(wallet.address), provider.getTransactionCount(wallet.address)]);
      expect(blockNumber).toBe(Number.parseInt((await directRpc(anvil.node.url, 'eth_blockNumber', [])) as string, 16));
      expect(balance).toBeGreaterThan(0n);
      // The account's transactions so far (the flows ran against the other target first on the same node).
      expect(nonce).toBe(Number.parseInt((await directRpc(anvil.node.url, 'eth_getTransactionCount', [wallet.address, 'latest'])) as string, 16));
      expect(exchanges.slice(from).some((exchange) => Array.isArray(exchange.request) && exchange.request.length >= 2)).toBe(true);

      const deployTx = await wallet.sendTransaction({ data: INIT_CODE });
      const deployed = await deployTx.wait();
      expect(deployed!.status).toBe(1);
      const address = deployed!.contractAddress!;
      const contract = new Contract(address, ETHERS_ABI, wallet);
      expect(await contract.getFunction('value')()).toBe(42n);
      expect(await provider.getCode(address)).toBe(`0x${RUNTIME}`);
      expect(await provider.estimateGas({ from: wallet.address, to: RECIPIENT, value: 1n })).toBe(21_000n);

      const seenBlocks: number[] = [];
      const seenEvents: Array<{ value: bigint; transactionHash: string }> = [];
      await provider.on('block', (number: number) => seenBlocks.push(number));
      await contract.on('Pinged', (value: bigint, event: { log: EthersLog }) => seenEvents.push({ value, transactionHash: event.log.transactionHash }));
      try {
        await until(() => exchanges.slice(from).some((exchange) => JSON.stringify(exchange.request).includes('eth_newFilter')), 'eth_newFilter');
        const transfer = await wallet.sendTransaction({ to: RECIPIENT, value: 1_000n });
        expect((await transfer.wait())!.status).toBe(1);
        const ping = await wallet.sendTransaction({ to: address, data: '0x' });
        expect((await ping.wait())!.logs).toHaveLength(1);
        await until(() => seenEvents.length >= 1, 'the Pinged event');
        await mineUntil(() => seenBlocks.length >= 2, 'two blocks');
        expect(seenEvents).toEqual([{ value: 42n, transactionHash: ping.hash }]);

        const logs = await provider.getLogs({ address, topics: [TOPIC], fromBlock: deployed!.blockNumber, toBlock: 'latest' });
        expect(logs.map((log) => log.transactionHash)).toEqual([ping.hash]);
      } finally {
        await provider.removeAllListeners();
        await contract.removeAllListeners();
        // Removing the listeners uninstalls each filter without awaiting it, and destroy() below
        // cancels whatever ethers still waits for (an unhandled rejection in ethers). So: every
        // filter installed is uninstalled, the proxy has answered every call, and one more round
        // trip lets ethers take in the answers that were already on their way.
        const sent = (method: string) => exchanges.slice(from).reduce((sum, exchange) => sum + (JSON.stringify(exchange.request).match(new RegExp(`"${method}"`, 'g'))?.length ?? 0), 0);
        await until(() => sent('eth_uninstallFilter') >= sent('eth_newFilter'), 'every filter uninstalled');
        await nothingInFlight(target);
        expect(await provider.send('eth_chainId', [])).toBe('0x7a69');
      }
    } finally {
      provider.destroy();
    }

    await nothingInFlight(target);
    const expected = expectedCharges(exchanges, from);
    expect(expected.errors.filter((error) => error !== EXPECTED_ERROR)).toEqual([]);
    for (const method of ['eth_blockNumber', 'eth_getBalance', 'eth_sendRawTransaction', 'eth_getTransactionReceipt', 'eth_call', 'eth_estimateGas', 'eth_newFilter', 'eth_getFilterChanges', 'eth_getLogs']) {
      expect(expected.methods, method).toContain(method);
    }
    expect(delta(usageBefore, await usageByMethod(target))).toEqual(expected.byMethod);
  }, 60_000);
});

describe.each(['one process', 'two workers'])('dev-node controls (%s)', (name) => {
  it('are denied on the gateway while the node itself serves them (the devnet seeds anvil directly)', async () => {
    const target = targets.find((candidate) => candidate.name === name)!;
    const before = await usageByMethod(target);
    for (const method of ['evm_mine', 'anvil_setBalance', 'eth_accounts', 'eth_sendTransaction']) {
      const r = await fetch(target.url('eth'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: [] }) });
      expect(await r.json()).toEqual({ jsonrpc: '2.0', id: 1, error: { code: -32601, message: `the method ${method} is disabled on this gateway` } });
    }
    expect(delta(before, await usageByMethod(target))).toEqual({});
    expect(await directRpc(anvil.node.url, 'eth_accounts', [])).toHaveLength(10);
  });
});

describe('the two-worker group', () => {
  it('served the flows with both workers (the connections of the proxy were spread over them)', () => {
    expect([...group!.requestsByWorker().keys()].sort()).toStrictEqual([1, 2]);
  });
});
