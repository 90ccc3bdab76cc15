// Real client libraries through the gateway URL with a key: viem and ethers v6
// against a real seeded anvil, and the Metaplex umi DAS plugin against the sample DAS upstream.
// Scripted proxies on both sides of the gateway show what the clients really send (ethers'
// batches, umi's named params and string ids) and what the gateway forwards.

import { dasApi, type DasApiInterface } from '@metaplex-foundation/digital-asset-standard-api';
import { createUmi } from '@metaplex-foundation/umi-bundle-defaults';
import { JsonRpcProvider } from 'ethers';
import { createPublicClient, http, type Hash } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSampleDasServer, type Collection, type SampleDasServer } from '../src/devnet/sample-das/index.js';
import { useSeededAnvil } from './helpers/anvil.js';
import { startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ReceivedCall, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const anvil = useSeededAnvil({}, { blocks: 6, txPerBlock: 3 });

let das: SampleDasServer;
let gateway: TestGateway;
/** Between the gateway and the sample DAS upstream: what the gateway forwards. */
let dasUpstreamProxy: ScriptedUpstream;
/** Between umi and the gateway: what umi sends and what the gateway answers it. */
let clientProxy: ScriptedUpstream;
const clientExchanges: Array<{ request: unknown; response: unknown }> = [];
let evmUrl: string;

beforeAll(async () => {
  das = await startSampleDasServer();
  dasUpstreamProxy = await startScriptedUpstream({ kind: 'proxy', url: das.url });
  gateway = await startTestGateway({
    networks: [
      { id: 'eth', kind: 'evm', chainId: 31337, upstreams: [{ id: 'anvil', url: anvil.node.url }] },
      { id: 'das', kind: 'asset', upstreams: [{ id: 'sample-das', url: dasUpstreamProxy.url, params: 'named' }] },
    ],
  });
  evmUrl = gateway.url('eth');
  clientProxy = await startScriptedUpstream({
    kind: 'proxy',
    url: gateway.url('das'),
    transform: (response, request) => {
      clientExchanges.push({ request, response });
      return response;
    },
  });
}, 30_000);

afterAll(async () => {
  await clientProxy?.close();
  await gateway?.close();
  await dasUpstreamProxy?.close();
  await das?.close();
});

function seededBlocks(count: number): Hash[] {
  const hashes = anvil.seed.blocksWithTransactions.slice(0, count) as Hash[];
  expect(hashes).toHaveLength(count);
  return hashes;
}

function parsedLogLines(): Array<Record<string, unknown>> {
  return gateway.logLines.map((line) => JSON.parse(line) as Record<string, unknown>);
}

describe('viem', () => {
  it('getBlock by hash, with and without transactions, equals a direct client on anvil; getChainId', async () => {
    const viaGateway = createPublicClient({ transport: http(evmUrl) });
    const direct = createPublicClient({ transport: http(anvil.node.url) });
    const [hash] = seededBlocks(1);

    const block = await viaGateway.getBlock({ blockHash: hash!, includeTransactions: false });
    const expected = await direct.getBlock({ blockHash: hash!, includeTransactions: false });
    expect(block.hash).toBe(hash);
    expect(block.number).toBe(expected.number);
    expect(block.transactions.length).toBeGreaterThan(0);
    expect(block.transactions).toEqual(expected.transactions);
    expect(block).toEqual(expected);

    const full = await viaGateway.getBlock({ blockHash: hash!, includeTransactions: true });
    const expectedFull = await direct.getBlock({ blockHash: hash!, includeTransactions: true });
    expect(full.hash).toBe(hash);
    expect(full.number).toBe(expectedFull.number);
    expect(full.transactions.map((tx) => tx.hash)).toEqual(expected.transactions);
    for (const tx of full.transactions) expect(tx.blockHash).toBe(hash);
    expect(full).toEqual(expectedFull);

    expect(await viaGateway.getChainId()).toBe(31337);
    expect(await viaGateway.getChainId()).toBe(await direct.getChainId());
  });
});

describe('ethers v6', () => {
  it('JsonRpcProvider batches concurrent getBlock calls; every answer matches anvil', async () => {
    const provider = new JsonRpcProvider(evmUrl);
    const direct = new JsonRpcProvider(anvil.node.url, undefined, { batchMaxCount: 1 });
    try {
      const hashes = seededBlocks(4);
      const before = gateway.logLines.length;
      const [network, ...blocks] = await Promise.all([
        provider.getNetwork(),
        ...hashes.map((hash) => provider.getBlock(hash)),
        ...hashes.map((hash) => provider.getBlock(hash, true)),
      ]);
      expect(network.chainId).toBe(31337n);

      const plain = blocks.slice(0, hashes.length);
      const prefetched = blocks.slice(hashes.length);
      for (const [index, hash] of hashes.entries()) {
        const expected = await direct.getBlock(hash, true);
        expect(expected).not.toBeNull();
        const block = plain[index]!;
        const hydrated = prefetched[index]!;
        expect(block).not.toBeNull();
        expect(hydrated).not.toBeNull();
        expect(block!.hash).toBe(hash);
        expect(block!.number).toBe(expected!.number);
        expect(block!.transactions).toEqual(expected!.transactions);
        expect(block!.transactions.length).toBeGreaterThan(0);
        expect(hydrated!.hash).toBe(hash);
        expect(hydrated!.number).toBe(expected!.number);
        expect(hydrated!.prefetchedTransactions.map((tx) => tx.hash)).toEqual(expected!.transactions);
        expect(hydrated!.prefetchedTransactions.map((tx) => tx.toJSON())).toEqual(expected!.prefetchedTransactions.map((tx) => tx.toJSON()));
      }

      // ethers really sent a JSON array: the gateway logged at least one batch of block calls.
      const batches = parsedLogLines()
        .slice(before)
        .filter((line) => line.msg === 'request' && typeof line.batchSize === 'number' && line.batchSize >= 2);
      expect(batches.length).toBeGreaterThan(0);
      expect(batches.every((line) => line.status === 200)).toBe(true);
      const batchedMethods = batches.flatMap((line) => line.methods as string[]);
      expect(batchedMethods.filter((method) => method === 'eth_getBlockByHash').length).toBeGreaterThanOrEqual(2);
    } finally {
      provider.destroy();
      direct.destroy();
    }
  });
});

describe('Metaplex umi DAS client', () => {
  let collection: Collection;
  /**
   * `umi.rpc` with the DAS methods. The plugin's type augmentation targets a deep path
   * (`umi/dist/types/Umi`) that NodeNext resolution does not see through umi's `exports`, so the
   * type is stated here; at run time `umi.rpc` is the decorated interface.
   */
  let umi: { rpc: DasApiInterface };
  let expectedIds: Set<string>;

  beforeAll(() => {
    const smallest = [...das.dataset.collections].sort((a, b) => a.size - b.size)[0];
    if (smallest === undefined) throw new Error('the sample data set has no collections');
    collection = smallest;
    expectedIds = new Set(
      das.dataset.assets.filter((asset) => asset.grouping.some((group) => group.group_value === collection.id)).map((asset) => asset.id),
    );
    expect(expectedIds.size).toBe(collection.size);
    expect(collection.size).toBeGreaterThan(500); // more than one page of 500
    umi = createUmi(clientProxy.url).use(dasApi()) as unknown as { rpc: DasApiInterface };
  });

  it('pages through a whole collection with page numbers', async () => {
    const sentBefore = clientProxy.calls.length;
    const forwardedBefore = dasUpstreamProxy.calls.length;
    const ids: string[] = [];
    let pages = 0;
    for (let page = 1; page <= 10; page++) {
      const result = await umi.rpc.getAssetsByGroup({ groupKey: 'collection', groupValue: collection.id, limit: 500, page });
      pages++;
      expect(result.total).toBe(collection.size);
      expect(result.limit).toBe(500);
      expect(result.page).toBe(page);
      for (const item of result.items) {
        expect(item.grouping).toContainEqual({ group_key: 'collection', group_value: collection.id });
        ids.push(item.id);
      }
      if (result.items.length < 500) break;
    }
    expect(pages).toBe(Math.floor(collection.size / 500) + 1);
    expect(ids).toHaveLength(collection.size);
    expect(new Set(ids).size).toBe(collection.size);
    expect(new Set(ids)).toEqual(expectedIds);

    // What umi sent: named params and string ids, echoed back exactly by the gateway.
    const sent = clientProxy.calls.slice(sentBefore);
    expect(sent).toHaveLength(pages);
    for (const call of sent) {
      const body = call.body as { id: unknown; method: string; params: unknown };
      expect(body.method).toBe('getAssetsByGroup');
      expect(typeof body.id).toBe('string');
      expect(Array.isArray(body.params)).toBe(false);
      expect(body.params).toMatchObject({ groupKey: 'collection', groupValue: collection.id, limit: 500 });
    }
    for (const exchange of clientExchanges.slice(-pages)) {
      expect((exchange.response as { id: unknown }).id).toBe((exchange.request as { id: unknown }).id);
    }
    // What the gateway forwarded: the named form this upstream declares, with its own numeric ids.
    const forwarded = dasUpstreamProxy.calls.slice(forwardedBefore);
    expect(forwarded).toHaveLength(pages);
    forwarded.forEach((call: ReceivedCall, index) => {
      const body = call.body as { id: unknown; params: Record<string, unknown> };
      expect(typeof body.id).toBe('number');
      expect(body.params).toMatchObject({ groupKey: 'collection', groupValue: collection.id, limit: 500, page: index + 1 });
    });
  });

  it('pages sorted by created ascending', async () => {
    const created = new Map<string, number>();
    das.dataset.sortKeys.forEach((keys) => created.set(keys.id, keys.created));
    const ids: string[] = [];
    for (let page = 1; page <= 10; page++) {
      const result = await umi.rpc.getAssetsByGroup({
        groupKey: 'collection',
        groupValue: collection.id,
        sortBy: { sortBy: 'created', sortDirection: 'asc' },
        limit: 500,
        page,
      });
      expect(result.total).toBe(collection.size);
      ids.push(...result.items.map((item) => item.id));
      if (result.items.length < 500) break;
    }
    expect(ids).toHaveLength(collection.size);
    expect(new Set(ids)).toEqual(expectedIds);
    const slots = ids.map((id) => created.get(id)!);
    for (let i = 1; i < slots.length; i++) expect(slots[i]!).toBeGreaterThanOrEqual(slots[i - 1]!);
    expect(slots[0]!).toBeLessThan(slots.at(-1)!);

    const lastSent = clientProxy.calls.at(-1)!.body as { params: Record<string, unknown> };
    expect(lastSent.params.sortBy).toEqual({ sortBy: 'created', sortDirection: 'asc' });
  });

  it('pages with cursors', async () => {
    const ids: string[] = [];
    let cursor: string | undefined;
    let rounds = 0;
    for (; rounds < 10; rounds++) {
      const result = await umi.rpc.getAssetsByGroup({
        groupKey: 'collection',
        groupValue: collection.id,
        limit: 500,
        ...(cursor === undefined ? {} : { cursor }),
      });
      expect(result.total).toBe(collection.size);
      expect(result.page).toBeUndefined();
      ids.push(...result.items.map((item) => item.id));
      if (result.items.length < 500) break;
      expect(typeof result.cursor).toBe('string');
      cursor = result.cursor as string;
      expect(cursor).toBe(result.items.at(-1)!.id);
    }
    expect(rounds).toBeLessThan(10);
    expect(ids).toHaveLength(collection.size);
    expect(new Set(ids)).toEqual(expectedIds);
    const sentCursors = clientProxy.calls
      .slice(-(rounds + 1))
      .map((call) => (call.body as { params: Record<string, unknown> }).params.cursor);
    expect(sentCursors[0]).toBeUndefined();
    expect(sentCursors.slice(1).every((value) => typeof value === 'string')).toBe(true);
  });

  it('gets the gateway\'s validation error with its own string id (umi reports it as "no assets")', async () => {
    const before = clientExchanges.length;
    const forwardedBefore = dasUpstreamProxy.calls.length;
    // umi's web3.js transport resolves a JSON-RPC error as an undefined result, which the DAS
    // plugin turns into its own "No assets found" error; the wire shows the real answer.
    await expect(
      umi.rpc.getAssetsByGroup({ groupKey: 'collection', groupValue: 'not-a-pubkey', limit: 10, page: 1 }),
    ).rejects.toThrow(/No assets found/);
    const exchange = clientExchanges.slice(before);
    expect(exchange).toHaveLength(1);
    const request = exchange[0]!.request as { id: unknown };
    expect(typeof request.id).toBe('string');
    expect(exchange[0]!.response).toEqual({
      jsonrpc: '2.0',
      id: request.id,
      error: { code: -32000, message: 'Pubkey Validation Err: not-a-pubkey is invalid' },
    });
    expect(dasUpstreamProxy.calls.length).toBe(forwardedBefore);
  });
});
