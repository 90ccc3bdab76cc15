// viem's webSocket() transport against `tollgate serve` with two workers: the primary hands each
// upgrade to a worker like any connection, every worker holds its own upstream subscriptions
// (one per network and subscription kind, shared by that worker's clients), and every client sees
// every block and log once. A WebSocket proxy in front of anvil counts the upstream subscriptions.

import { createPublicClient, createWalletClient, http, parseAbi, toEventSelector, webSocket, type Hash, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { foundry } from 'viem/chains';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { directRpc, useSeededAnvil } from './helpers/anvil.js';
import { ensureBuilt } from './helpers/build.js';
import { killSpawned } from './helpers/spawn-gateway.js';
import { until } from './helpers/until.js';
import { sampleSum, setUpGroup, startGroup, type GroupSetup } from './helpers/worker-group.js';
import { startWsProxy, type WsProxy } from './helpers/ws-proxy.js';

const anvil = useSeededAnvil({}, { blocks: 2, txPerBlock: 1 });
/** Anvil's dev account 8 (this file's anvil is its own). */
const DEV_KEY: Hex = '0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97';
const ABI = parseAbi(['event Pinged(uint256 value)']);
const TOPIC = toEventSelector('Pinged(uint256)');
/** The dapp flows' hand-written contract: any call emits Pinged(42) and returns 42. */
const INIT_CODE: Hex = `0x603080600b6000396000f3602a6000527f${TOPIC.slice(2)}60206000a160206000f3`;
const CLIENTS = 4;

let setup: GroupSetup | undefined;
let proxy: WsProxy | undefined;
beforeAll(async () => {
  await ensureBuilt();
}, 180_000);
afterEach(async () => {
  await killSpawned();
});
afterAll(async () => {
  setup?.cleanUp();
  await proxy?.kill();
});

async function send(transaction: { to?: Hex; data?: Hex }): Promise<{ hash: Hash; contractAddress: Hex | null | undefined }> {
  const wallet = createWalletClient({ account: privateKeyToAccount(DEV_KEY), chain: foundry, transport: http(anvil.node.url) });
  const hash = await wallet.sendTransaction({ ...transaction, gas: 200_000n });
  const receipt = await createPublicClient({ chain: foundry, transport: http(anvil.node.url) }).waitForTransactionReceipt({ hash, pollingInterval: 50 });
  return { hash, contractAddress: receipt.contractAddress };
}

describe('viem webSocket() against two workers', () => {
  it('getBlockNumber, watchBlocks and watchContractEvent on four clients spread over both workers; each worker holds its own upstream subscriptions', async () => {
    proxy = await startWsProxy(anvil.node.url.replace(/^http/, 'ws'));
    setup = await setUpGroup({ workers: 2, dailyCredits: 1_000_000_000 });
    setup.writeConfig([{ id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], upstreams: [{ id: 'anvil', url: anvil.node.url, wsUrl: proxy.url }] }]);
    const group = await startGroup(setup);
    const wsUrl = `${group.rpcOrigin.replace('http://', 'ws://')}/eth/ws/v3/${setup.secret}`;
    const { contractAddress } = await send({ data: INIT_CODE });
    const address = contractAddress!;

    // viem shares one socket between clients of one URL: a query string per client gives each its own connection.
    const clients = Array.from({ length: CLIENTS }, (_, index) => createPublicClient({ chain: foundry, transport: webSocket(`${wsUrl}?client=${index}`) }));
    const head = BigInt((await directRpc(anvil.node.url, 'eth_blockNumber', [])) as string);
    for (const client of clients) expect(await client.getBlockNumber()).toBe(head);
    // Both workers hold some of the connections.
    const opens = group.lines.filter((line) => line.msg === 'websocket open');
    const workersWithClients = new Set(opens.map((line) => line.worker));
    expect([...workersWithClients].sort()).toStrictEqual([1, 2]);

    const seen = clients.map(() => ({ blocks: [] as Array<{ number: bigint; hash: string }>, logs: [] as string[] }));
    const stops = clients.flatMap((client, index) => [
      client.watchBlocks({ onBlock: (block) => seen[index]!.blocks.push({ number: block.number!, hash: block.hash! }) }),
      client.watchContractEvent({ address, abi: ABI, eventName: 'Pinged', onLogs: (logs) => seen[index]!.logs.push(...logs.map((log) => log.transactionHash!)) }),
    ]);
    try {
      // Every client subscription confirmed by the group (confirmation means delivery is set up upstream).
      await until(async () => {
        const metrics = await group.metricsText();
        return sampleSum(metrics, 'tollgate_ws_subscriptions', { type: 'logs' }) === CLIENTS && sampleSum(metrics, 'tollgate_ws_subscriptions', { type: 'newHeads' }) === CLIENTS;
      }, 'every client subscription confirmed');

      const sent: Hash[] = [];
      for (let index = 0; index < 3; index += 1) sent.push((await send({ to: address })).hash);
      await until(() => seen.every((client) => client.logs.length >= sent.length && client.blocks.length >= sent.length), 'every client sees three blocks and three logs', 20_000);
      for (const client of seen) {
        expect(client.logs).toStrictEqual(sent);
        for (const block of client.blocks) {
          const canonical = (await directRpc(anvil.node.url, 'eth_getBlockByNumber', [`0x${block.number.toString(16)}`, false])) as { hash: string };
          expect(block.hash).toBe(canonical.hash);
        }
      }

      // The cost of per-worker subscriptions: one upstream logs subscription per worker with
      // clients (a single process would hold one for all four), as the group's metrics and the
      // upstream itself both count.
      const metrics = await group.metricsText();
      expect(sampleSum(metrics, 'tollgate_ws_upstream_subscriptions', { type: 'logs' })).toBe(workersWithClients.size);
      expect(proxy.subscribeCalls.filter((kind) => kind === 'logs')).toHaveLength(workersWithClients.size);
      console.log(
        `${CLIENTS} viem clients on 2 workers: upstream subscriptions ${sampleSum(metrics, 'tollgate_ws_upstream_subscriptions')} ` +
          `(logs ${sampleSum(metrics, 'tollgate_ws_upstream_subscriptions', { type: 'logs' })}, newHeads ${sampleSum(metrics, 'tollgate_ws_upstream_subscriptions', { type: 'newHeads' })}), upstream sockets ${proxy.open()}`,
      );
    } finally {
      for (const stop of stops) stop();
      for (const client of clients) await (client.transport as { getRpcClient?: () => Promise<{ close(): void }> }).getRpcClient?.().then((rpc) => rpc.close());
    }
    expect((await group.stop('SIGTERM')).code).toBe(0);
  }, 90_000);
});
