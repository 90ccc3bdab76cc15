import bs58 from 'bs58';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createSampleDasIndex,
  generateSampleDataset,
  queryAssetsByGroup,
  startSampleDasServer,
  type Asset,
  type SampleDasServer,
  type SampleDataset,
} from '../src/devnet/sample-das/index.js';

// Expectations here are computed from the data set with the test's own decoding (bs58) and
// ordering (Buffer.compare), never read back from the fixture's index.

const SEED = 4242;
let dataset: SampleDataset;
let server: SampleDasServer;

interface RpcReply {
  jsonrpc: string;
  id: unknown;
  result?: { total: number; limit: number; page?: number; cursor?: string; before?: string; after?: string; items: Asset[] };
  error?: { code: number; message: string };
}

async function post(body: unknown, raw = false): Promise<{ status: number; json: unknown }> {
  const response = await fetch(server.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: raw ? (body as string) : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, json: text === '' ? undefined : JSON.parse(text) };
}

async function call(params: unknown, id: unknown = 1): Promise<RpcReply> {
  const { status, json } = await post({ jsonrpc: '2.0', id, method: 'getAssetsByGroup', params });
  expect(status).toBe(200);
  return json as RpcReply;
}

async function result(params: unknown): Promise<NonNullable<RpcReply['result']>> {
  const reply = await call(params);
  expect(reply.error).toBeUndefined();
  return reply.result!;
}

const bytesOf = (id: string): Buffer => Buffer.from(bs58.decode(id));
const byBytes = (a: string, b: string): number => Buffer.compare(bytesOf(a), bytesOf(b));
const randomKey = (): string => bs58.encode(randomBytes(32));
const ids = (items: Asset[]): string[] => items.map((asset) => asset.id);

function membersOf(collectionId: string): Array<{ asset: Asset; created: number; updated: number; recentAction: number }> {
  const members: Array<{ asset: Asset; created: number; updated: number; recentAction: number }> = [];
  dataset.assets.forEach((asset, i) => {
    if (asset.grouping.some((g) => g.group_key === 'collection' && g.group_value === collectionId)) {
      const keys = dataset.sortKeys[i]!;
      members.push({ asset, created: keys.created, updated: keys.updated, recentAction: keys.recentAction });
    }
  });
  return members;
}

/** Collection ids, largest first. */
function collectionIds(): string[] {
  return [...dataset.collections].sort((a, b) => b.size - a.size).map((c) => c.id);
}

beforeAll(async () => {
  dataset = generateSampleDataset({ seed: SEED });
  server = await startSampleDasServer({ dataset });
});

afterAll(async () => {
  await server?.close();
});

describe('sample DAS data set', () => {
  it('is deterministic per seed and differs across seeds', () => {
    const again = generateSampleDataset({ seed: SEED });
    expect(JSON.stringify(again)).toBe(JSON.stringify(dataset));
    const other = generateSampleDataset({ seed: SEED + 1 });
    expect(JSON.stringify(other)).not.toBe(JSON.stringify(dataset));
    expect(other.collections.map((c) => c.id)).not.toEqual(dataset.collections.map((c) => c.id));
    expect(new Set([...other.assets.map((a) => a.id), ...dataset.assets.map((a) => a.id)]).size).toBe(
      other.assets.length + dataset.assets.length,
    );
  });

  it('has at least 3 collections of distinct sizes and at least 2,500 assets', () => {
    expect(dataset.collections.length).toBeGreaterThanOrEqual(3);
    expect(dataset.assets.length).toBeGreaterThanOrEqual(2500);
    const sizes = dataset.collections.map((c) => membersOf(c.id).length);
    expect(new Set(sizes).size).toBe(sizes.length);
    expect(dataset.collections.map((c) => c.size)).toEqual(sizes);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(dataset.assets.length);
    expect(dataset.sortKeys.map((k) => k.id)).toEqual(dataset.assets.map((a) => a.id));
  });

  it('honours the size options', () => {
    const small = generateSampleDataset({ seed: 9, assetsPerCollection: [5, 0, 7] });
    expect(small.collections.map((c) => c.size)).toEqual([5, 0, 7]);
    expect(small.assets.length).toBe(12);
    expect(generateSampleDataset({ seed: 9, collections: 4 }).collections).toHaveLength(4);
    expect(() => generateSampleDataset({ collections: 2, assetsPerCollection: [1] })).toThrow(RangeError);
  });

  it('uses real 32-byte base58 keys for every id, and unique asset ids', () => {
    const keys: string[] = [];
    for (const collection of dataset.collections) keys.push(collection.id, collection.updateAuthority);
    for (const asset of dataset.assets) {
      keys.push(asset.id, asset.ownership.owner, ...asset.grouping.map((g) => g.group_value));
      keys.push(...asset.authorities.map((a) => a.address), ...asset.creators.map((c) => c.address));
      if (asset.ownership.delegate !== null) keys.push(asset.ownership.delegate);
      const { compression } = asset;
      if (compression.compressed) {
        keys.push(compression.tree, compression.data_hash, compression.creator_hash, compression.asset_hash);
      } else {
        // What real DAS servers send for uncompressed assets.
        expect([compression.tree, compression.data_hash, compression.creator_hash, compression.asset_hash]).toEqual(['', '', '', '']);
      }
    }
    for (const key of keys) {
      expect(key.length).toBeLessThanOrEqual(44);
      expect(bs58.decode(key).length).toBe(32);
    }
    expect(new Set(dataset.assets.map((a) => a.id)).size).toBe(dataset.assets.length);
    expect(dataset.assets.some((a) => a.compression.compressed)).toBe(true);
    expect(dataset.assets.some((a) => a.ownership.delegate !== null)).toBe(true);
  });

  it('gives every asset the full DAS Asset shape', () => {
    const served = new Set([
      'interface', 'id', 'content', 'authorities', 'compression', 'grouping', 'royalty', 'creators', 'ownership', 'supply', 'mutable', 'burnt',
    ]);
    for (const asset of dataset.assets) {
      expect(new Set(Object.keys(asset))).toEqual(served);
      expect(['V1_NFT', 'ProgrammableNFT']).toContain(asset.interface);
      const { content } = asset;
      expect(typeof content.$schema).toBe('string');
      expect(content.json_uri).toMatch(/^https:\/\//);
      expect(content.files.length).toBeGreaterThan(0);
      expect(content.files[0]).toEqual({ uri: expect.any(String), mime: 'image/png' });
      expect(typeof content.metadata.name).toBe('string');
      expect(typeof content.metadata.symbol).toBe('string');
      expect(typeof content.metadata.description).toBe('string');
      expect(content.metadata.attributes.length).toBeGreaterThan(0);
      expect(content.links).toEqual({ image: expect.any(String), external_url: expect.any(String) });
      expect(asset.authorities).toEqual([{ address: expect.any(String), scopes: ['full'] }]);
      expect(Object.keys(asset.compression).sort()).toEqual(
        ['asset_hash', 'compressed', 'creator_hash', 'data_hash', 'eligible', 'leaf_id', 'seq', 'tree'],
      );
      expect(Number.isInteger(asset.compression.seq) && Number.isInteger(asset.compression.leaf_id)).toBe(true);
      expect(asset.grouping).toEqual([{ group_key: 'collection', group_value: expect.any(String) }]);
      expect(asset.royalty).toEqual({
        royalty_model: 'creators',
        target: null,
        percent: asset.royalty.basis_points / 10_000,
        basis_points: expect.any(Number),
        primary_sale_happened: expect.any(Boolean),
        locked: expect.any(Boolean),
      });
      expect(asset.creators.reduce((sum, c) => sum + c.share, 0)).toBe(100);
      for (const creator of asset.creators) expect(typeof creator.verified).toBe('boolean');
      expect(asset.ownership).toEqual({
        frozen: expect.any(Boolean),
        delegated: asset.ownership.delegate !== null,
        delegate: asset.ownership.delegate,
        ownership_model: 'single',
        owner: expect.any(String),
      });
      expect(asset.supply === null || typeof asset.supply.print_max_supply === 'number').toBe(true);
      expect(typeof asset.mutable).toBe('boolean');
      expect(asset.burnt).toBe(false);
    }
  });

  it('has ties in every sort key (so the id tie-break is exercised) and ids where base58 order ≠ byte order', () => {
    for (const collection of dataset.collections) {
      const members = membersOf(collection.id);
      for (const key of ['created', 'updated', 'recentAction'] as const) {
        expect(new Set(members.map((m) => m[key])).size).toBeLessThan(members.length * 0.9);
      }
    }
    // Base58 strings of 32-byte keys differ in length (43 vs 44 characters, leading '1's), so
    // string order and byte order disagree: that's what the id-sort tests rely on.
    expect(dataset.assets.some((a) => a.id.length < 44)).toBe(true);
    expect(dataset.assets.some((a) => a.id.startsWith('1'))).toBe(true);
  });
});

describe('sample DAS server: getAssetsByGroup', () => {
  it('sorts by id on the decoded bytes, ascending and descending', async () => {
    const [collection] = collectionIds();
    const all = membersOf(collection!).map((m) => m.asset.id);
    const expectedAsc = [...all].sort(byBytes);
    const stringAsc = [...all].sort();
    expect(stringAsc).not.toEqual(expectedAsc);

    const asc: string[] = [];
    const desc: string[] = [];
    for (const page of [1, 2]) {
      asc.push(...ids((await result({ groupKey: 'collection', groupValue: collection, sortBy: { sortBy: 'id', sortDirection: 'asc' }, page })).items));
      desc.push(...ids((await result({ groupKey: 'collection', groupValue: collection, page })).items)); // default: id desc
    }
    expect(asc).toEqual(expectedAsc);
    expect(desc).toEqual([...expectedAsc].reverse());

    // A concrete pair on which the two orders disagree, and the fixture follows the bytes.
    const decoded = all.map((id) => [id, bytesOf(id)] as const);
    const pair = (() => {
      for (const [a, aBytes] of decoded) {
        for (const [b, bBytes] of decoded) if (a < b && Buffer.compare(aBytes, bBytes) > 0) return [a, b] as const;
      }
      return undefined;
    })();
    expect(pair).toBeDefined();
    const [smallerString, smallerBytes] = [pair![0], pair![1]];
    expect(asc.indexOf(smallerBytes)).toBeLessThan(asc.indexOf(smallerString));
  });

  it.each([
    ['created', 'created'],
    ['updated', 'updated'],
    ['recent_action', 'recentAction'],
  ] as const)('sorts by %s with the id bytes as tie-break', async (sortBy, key) => {
    const collection = collectionIds()[1]!;
    const members = membersOf(collection);
    const expectedAsc = [...members].sort((a, b) => a[key] - b[key] || byBytes(a.asset.id, b.asset.id)).map((m) => m.asset.id);
    for (const sortDirection of ['asc', 'desc'] as const) {
      const listing: string[] = [];
      for (let page = 1; ; page++) {
        const res = await result({ groupKey: 'collection', groupValue: collection, sortBy: { sortBy, sortDirection }, limit: 400, page });
        expect(res.total).toBe(members.length);
        if (res.items.length === 0) break;
        listing.push(...ids(res.items));
      }
      expect(listing).toEqual(sortDirection === 'asc' ? expectedAsc : [...expectedAsc].reverse());
    }
  });

  it('serves sortBy none in the data set insertion order', async () => {
    const collection = collectionIds()[2]!;
    const natural = membersOf(collection).map((m) => m.asset.id);
    const res = await result({ groupKey: 'collection', groupValue: collection, sortBy: { sortBy: 'none', sortDirection: 'asc' }, page: 1 });
    expect(ids(res.items)).toEqual(natural);
  });

  it('serves the exact asset objects of the data set', async () => {
    const collection = collectionIds()[0]!;
    const byId = new Map(dataset.assets.map((a) => [a.id, a]));
    const res = await result({ groupKey: 'collection', groupValue: collection, limit: 50, page: 3 });
    expect(res.items).toHaveLength(50);
    for (const item of res.items) expect(item).toEqual(byId.get(item.id));
  });

  it('page mode covers each collection without duplicates or gaps, with total = group size', async () => {
    for (const collection of dataset.collections) {
      const expected = membersOf(collection.id).map((m) => m.asset.id).sort(byBytes).reverse();
      const seen: string[] = [];
      for (let page = 1; ; page++) {
        const res = await result({ groupKey: 'collection', groupValue: collection.id, limit: 250, page });
        expect(res.total).toBe(collection.size);
        expect(res.limit).toBe(250);
        expect(res.page).toBe(page);
        expect(res.cursor).toBeUndefined();
        if (res.items.length === 0) break;
        expect(res.items.length).toBe(Math.min(250, collection.size - (page - 1) * 250));
        seen.push(...ids(res.items));
      }
      expect(new Set(seen).size).toBe(seen.length);
      expect(seen).toEqual(expected);
    }
  });

  it('cursor mode pages through a whole collection and yields the same listing as page mode', async () => {
    for (const sortDirection of ['desc', 'asc'] as const) {
      const collection = collectionIds()[0]!;
      const size = membersOf(collection).length;
      const sortBy = { sortBy: 'id', sortDirection };
      const viaPages: string[] = [];
      for (const page of [1, 2]) viaPages.push(...ids((await result({ groupKey: 'collection', groupValue: collection, sortBy, page })).items));
      expect(viaPages).toHaveLength(size);

      const viaCursor: string[] = [];
      let cursor: string | undefined;
      let requests = 0;
      for (;;) {
        const res = await result({ groupKey: 'collection', groupValue: collection, sortBy, limit: 333, ...(cursor ? { cursor } : {}) });
        requests++;
        // A cursor that does not advance would loop forever: fail instead.
        expect(requests).toBeLessThanOrEqual(Math.ceil(size / 333) + 1);
        expect(res.total).toBe(size);
        expect(res.page).toBeUndefined();
        if (res.items.length === 0) {
          expect(res.cursor).toBeUndefined();
          break;
        }
        expect(res.cursor).toBe(res.items[res.items.length - 1]!.id);
        viaCursor.push(...ids(res.items));
        cursor = res.cursor;
      }
      expect(requests).toBe(Math.ceil(size / 333) + 1);
      expect(viaCursor).toEqual(viaPages);
    }
  });

  it('cursor mode without any pagination parameter starts from the beginning', async () => {
    const collection = collectionIds()[2]!;
    const expected = membersOf(collection).map((m) => m.asset.id).sort(byBytes).reverse();
    const res = await result({ groupKey: 'collection', groupValue: collection, limit: 10 });
    expect(ids(res.items)).toEqual(expected.slice(0, 10));
    expect(res.cursor).toBe(expected[9]);
  });

  it('before / after return the right slices in both directions, alone and as a range', async () => {
    const collection = collectionIds()[1]!;
    const asc = membersOf(collection).map((m) => m.asset.id).sort(byBytes);
    const desc = [...asc].reverse();
    const x = asc[100]!;
    const y = asc[400]!;
    const base = { groupKey: 'collection', groupValue: collection };
    const ascSort = { sortBy: 'id', sortDirection: 'asc' };
    const descSort = { sortBy: 'id', sortDirection: 'desc' };

    let res = await result({ ...base, sortBy: ascSort, after: x });
    expect(ids(res.items)).toEqual(asc.slice(101));
    expect(res.total).toBe(asc.length);
    res = await result({ ...base, sortBy: ascSort, before: y, limit: 50 });
    expect(ids(res.items)).toEqual(asc.slice(0, 50));
    res = await result({ ...base, sortBy: ascSort, after: x, before: y });
    expect(ids(res.items)).toEqual(asc.slice(101, 400));
    res = await result({ ...base, sortBy: ascSort, after: y, before: x });
    expect(res.items).toEqual([]);

    // Descending: "after X" is what comes after X in the descending listing (smaller ids).
    res = await result({ ...base, sortBy: descSort, after: y });
    expect(ids(res.items)).toEqual(desc.slice(desc.indexOf(y) + 1));
    expect(ids(res.items)).toEqual(asc.slice(0, 400).reverse());
    res = await result({ ...base, sortBy: descSort, before: x });
    expect(ids(res.items)).toEqual(desc.slice(0, desc.indexOf(x)));
    res = await result({ ...base, sortBy: descSort, after: y, before: x, limit: 7 });
    expect(ids(res.items)).toEqual(asc.slice(101, 400).reverse().slice(0, 7));
    expect(res.total).toBe(asc.length);

    // A key that is not in the group splits the listing by byte order too.
    const outsider = randomKey();
    res = await result({ ...base, sortBy: ascSort, after: outsider });
    expect(ids(res.items)).toEqual(asc.filter((id) => byBytes(id, outsider) > 0));
  });

  it('answers an unknown group with total 0 and no items', async () => {
    for (const params of [
      { groupKey: 'collection', groupValue: randomKey() },
      { groupKey: 'group', groupValue: dataset.collections[0]!.id },
      { groupKey: 'collection', groupValue: randomKey(), page: 1 },
    ]) {
      const res = await result(params);
      expect(res.total).toBe(0);
      expect(res.items).toEqual([]);
      expect(res.cursor).toBeUndefined();
    }
  });

  it('gives identical results for the named and positional param forms', async () => {
    const collection = collectionIds()[0]!;
    const asc = membersOf(collection).map((m) => m.asset.id).sort(byBytes);
    const cases: Array<[Record<string, unknown>, unknown[]]> = [
      [{ groupKey: 'collection', groupValue: collection }, ['collection', collection]],
      [
        { groupKey: 'collection', groupValue: collection, sortBy: { sortBy: 'created', sortDirection: 'asc' }, limit: 20, page: 3, displayOptions: { showCollectionMetadata: true } },
        ['collection', collection, { sortBy: 'created', sortDirection: 'asc' }, 20, 3, null, null, { showCollectionMetadata: true }],
      ],
      [
        { groupKey: 'collection', groupValue: collection, sortBy: { sortBy: 'id', sortDirection: 'asc' }, limit: 5, after: asc[10], before: asc[30] },
        ['collection', collection, { sortBy: 'id', sortDirection: 'asc' }, 5, null, asc[30], asc[10]],
      ],
      [
        { groupKey: 'collection', groupValue: collection, limit: 9, cursor: asc[600] },
        ['collection', collection, null, 9, null, null, null, null, asc[600]],
      ],
    ];
    for (const [named, positional] of cases) {
      const a = await call(named);
      const b = await call(positional);
      expect(a.error).toBeUndefined();
      expect(a.result!.items.length).toBeGreaterThan(0);
      expect(b).toEqual(a);
    }
  });

  it('answers validation errors with the DAS codes and messages', async () => {
    const collection = dataset.collections[0]!.id;
    const cases: Array<[unknown, number, string | RegExp]> = [
      [{ groupKey: 'collection', groupValue: collection, limit: 5000 }, -32000, 'Pagination Error. Limit should not be greater than 1000.'],
      [['collection', collection, null, 5000], -32000, 'Pagination Error. Limit should not be greater than 1000.'],
      [{ groupKey: 'collection', groupValue: 'not-a-key' }, -32000, 'Pubkey Validation Err: not-a-key is invalid'],
      [{ groupKey: 'collection', groupValue: collection, page: 0 }, -32000, 'Pagination Error. No Pagination Method Selected'],
      [
        { groupKey: 'collection', groupValue: collection, page: 1, cursor: collection },
        -32000,
        'Pagination Error. Only one pagination parameter supported per query.',
      ],
      [
        { groupKey: 'collection', groupValue: collection, sortBy: { sortBy: 'created', sortDirection: 'asc' } },
        -32000,
        'Pagination Sorting Error. Only sorting based on id is supported for this pagination option.',
      ],
      [{ groupKey: 'collection', groupValue: collection, cursor: '0OIl' }, -32000, 'Cursor Validation Err: 0OIl is invalid'],
      [{ groupKey: 'collection', groupValue: collection, limit: -1 }, -32602, /limit/],
      [{ groupKey: 'collection' }, -32602, /groupValue/],
      [undefined, -32602, /params/],
    ];
    for (const [params, code, message] of cases) {
      const reply = await call(params, 'req-1');
      expect(reply.id).toBe('req-1');
      expect(reply.result).toBeUndefined();
      expect(reply.error!.code).toBe(code);
      if (typeof message === 'string') expect(reply.error!.message).toBe(message);
      else expect(reply.error!.message).toMatch(message);
    }
  });

  it('speaks JSON-RPC 2.0: ids echoed, batches, unknown methods, bad JSON, notifications, POST only', async () => {
    const collection = dataset.collections[2]!.id;
    const zero = await call({ groupKey: 'collection', groupValue: collection, limit: 1 }, 0);
    expect(zero.id).toBe(0);
    expect(zero.jsonrpc).toBe('2.0');

    const batch = await post([
      { jsonrpc: '2.0', id: 'a', method: 'getAssetsByGroup', params: ['collection', collection, null, 2] },
      { jsonrpc: '2.0', id: 'b', method: 'getAsset', params: { id: collection } },
      { jsonrpc: '2.0', method: 'getAssetsByGroup', params: ['collection', collection] },
      { jsonrpc: '2.0', id: 'c', method: 'getAssetsByGroup', params: { groupKey: 'collection', groupValue: collection, limit: 1001 } },
    ]);
    const replies = batch.json as RpcReply[];
    expect(replies.map((r) => r.id)).toEqual(['a', 'b', 'c']);
    expect(replies[0]!.result!.items).toHaveLength(2);
    expect(replies[0]!.result!.total).toBe(dataset.collections[2]!.size);
    expect(replies[1]!.error).toEqual({ code: -32601, message: 'the method getAsset does not exist/is not available' });
    expect(replies[2]!.error!.code).toBe(-32000);

    const bad = await post('{"jsonrpc":"2.0",', true);
    expect(bad.json).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
    expect((await post([])).json).toMatchObject({ id: null, error: { code: -32600 } });
    expect((await post({ jsonrpc: '2.0', method: 'getAssetsByGroup', params: ['collection', collection] })).status).toBe(204);

    const get = await fetch(server.url);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    await get.text();
  });

  it('counts HTTP requests', async () => {
    const before = server.requestCount();
    await call(['collection', dataset.collections[0]!.id, null, 1]);
    await post('nope', true);
    expect(server.requestCount()).toBe(before + 2);
  });

  it('answers a 1000-item query in a few milliseconds', () => {
    const index = createSampleDasIndex(dataset);
    const query = { groupKey: 'collection', groupValue: collectionIds()[0]!, limit: 1000, cursor: randomKey() };
    for (let i = 0; i < 20; i++) queryAssetsByGroup(index, query);
    const durations: number[] = [];
    for (let i = 0; i < 50; i++) {
      const start = performance.now();
      const res = queryAssetsByGroup(index, { ...query, cursor: randomKey() });
      durations.push(performance.now() - start);
      expect(res.total).toBe(membersOf(query.groupValue).length);
    }
    durations.sort((a, b) => a - b);
    expect(durations[25]!).toBeLessThan(5);
  });
});
