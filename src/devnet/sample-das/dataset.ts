import { createHash } from 'node:crypto';
import { encodeBase58 } from '../../methods/base58.js';

/**
 * A generated Solana DAS data set for the sample upstream (development fixture: `tollgate
 * devnet`, tests, benchmarks). Everything derives from one seed through a SHAKE-256 counter
 * stream, so two runs with the same seed produce byte-identical JSON and tests can compare
 * against values they compute themselves. Asset fields follow the DAS `Asset` shape that real
 * servers send (Metaplex digital-asset-rpc-infrastructure, Helius); see the notes on
 * {@link AssetContent.links} and {@link AssetCompression} where that differs from the Metaplex
 * client's TypeScript types.
 */

export type AssetInterface = 'V1_NFT' | 'ProgrammableNFT';

export interface AssetFile {
  uri: string;
  mime: string;
}

export interface AssetAttribute {
  trait_type: string;
  value: string;
}

export interface AssetMetadata {
  name: string;
  symbol: string;
  description: string;
  token_standard: 'NonFungible' | 'ProgrammableNonFungible';
  attributes: AssetAttribute[];
}

export interface AssetContent {
  $schema: string;
  json_uri: string;
  files: AssetFile[];
  metadata: AssetMetadata;
  /**
   * An object, as real DAS servers send it. (The Metaplex client's `DasApiAssetContent` types
   * `links` as an array of objects; the wire format is a map.)
   */
  links: { image: string; external_url: string };
}

export interface AssetAuthority {
  address: string;
  scopes: Array<'full' | 'royalty' | 'metadata' | 'extension'>;
}

/**
 * For compressed assets every hash and the tree are base58 32-byte values. Uncompressed assets
 * carry empty strings and zeros, exactly as real DAS servers answer for them.
 */
export interface AssetCompression {
  eligible: boolean;
  compressed: boolean;
  data_hash: string;
  creator_hash: string;
  asset_hash: string;
  tree: string;
  seq: number;
  leaf_id: number;
}

export interface AssetGrouping {
  group_key: 'collection';
  group_value: string;
}

export interface AssetRoyalty {
  royalty_model: 'creators';
  target: null;
  percent: number;
  basis_points: number;
  primary_sale_happened: boolean;
  locked: boolean;
}

export interface AssetCreator {
  address: string;
  share: number;
  verified: boolean;
}

export interface AssetOwnership {
  frozen: boolean;
  delegated: boolean;
  delegate: string | null;
  ownership_model: 'single';
  owner: string;
}

export interface AssetSupply {
  print_max_supply: number;
  print_current_supply: number;
  edition_nonce: number | null;
}

/** One asset exactly as the sample upstream serves it. */
export interface Asset {
  interface: AssetInterface;
  id: string;
  content: AssetContent;
  authorities: AssetAuthority[];
  compression: AssetCompression;
  grouping: AssetGrouping[];
  royalty: AssetRoyalty;
  creators: AssetCreator[];
  ownership: AssetOwnership;
  supply: AssetSupply | null;
  mutable: boolean;
  burnt: boolean;
}

/**
 * Sort keys a DAS server keeps in its database but never serves. Slot numbers; equal values
 * are common (several mints or updates in one slot), which exercises the id tie-break.
 */
export interface AssetSortKeys {
  id: string;
  created: number;
  updated: number;
  recentAction: number;
}

export interface Collection {
  /** The collection mint: the `group_value` of its assets. */
  id: string;
  name: string;
  symbol: string;
  description: string;
  interface: AssetInterface;
  compressed: boolean;
  /** Merkle tree of a compressed collection, `null` otherwise. */
  tree: string | null;
  updateAuthority: string;
  creators: AssetCreator[];
  royaltyBasisPoints: number;
  /** Number of assets in the collection. */
  size: number;
}

export interface SampleDataset {
  seed: number;
  collections: Collection[];
  /** Natural insertion order (what `sortBy: none` serves), collection by collection. */
  assets: Asset[];
  /** Parallel to `assets`: `sortKeys[i]` belongs to `assets[i]`. */
  sortKeys: AssetSortKeys[];
}

export interface SampleDatasetOptions {
  /** Any finite number; default {@link DEFAULT_SAMPLE_SEED}. */
  seed?: number;
  /** Number of collections; default the length of `assetsPerCollection`, else 3. */
  collections?: number;
  /** Assets in each collection; default 1200, 900, 600 (then 100 + index for more collections). */
  assetsPerCollection?: number[];
}

export const DEFAULT_SAMPLE_SEED = 1;
const DEFAULT_SIZES = [1200, 900, 600] as const;
const STREAM_DOMAIN = 'tollgate/sample-das/v1';

/**
 * Deterministic bytes: SHAKE-256 of `<label>/<counter>`, 4 KiB block after block. Each label
 * is an independent stream, so a collection's contents do not shift when another one changes
 * size.
 */
class ByteStream {
  private block = Buffer.alloc(0);
  private offset = 0;
  private counter = 0;

  constructor(private readonly label: string) {}

  private refill(): void {
    this.block = createHash('shake256', { outputLength: 4096 }).update(`${this.label}/${this.counter++}`).digest();
    this.offset = 0;
  }

  bytes(length: number): Buffer {
    const out = Buffer.alloc(length);
    let filled = 0;
    while (filled < length) {
      if (this.offset === this.block.length) this.refill();
      const take = Math.min(length - filled, this.block.length - this.offset);
      this.block.copy(out, filled, this.offset, this.offset + take);
      filled += take;
      this.offset += take;
    }
    return out;
  }

  private uint32(): number {
    if (this.block.length - this.offset < 4) return this.bytes(4).readUInt32BE(0);
    const value = this.block.readUInt32BE(this.offset);
    this.offset += 4;
    return value;
  }

  /** Uniform in [0, 1). */
  float(): number {
    return this.uint32() / 2 ** 32;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.float() * n);
  }

  chance(probability: number): boolean {
    return this.float() < probability;
  }

  pick<T>(values: readonly T[]): T {
    return values[this.int(values.length)]!;
  }

  publicKey(): string {
    return encodeBase58(this.bytes(32));
  }
}

const NAME_PARTS = [
  ['Lunar', 'Ember', 'Quiet', 'Copper', 'Velvet', 'Static', 'Hollow', 'Neon'],
  ['Foxes', 'Lanterns', 'Orchards', 'Golems', 'Comets', 'Tides', 'Sprites', 'Ruins'],
] as const;
const TRAITS: ReadonlyArray<{ type: string; values: readonly string[] }> = [
  { type: 'Background', values: ['Dusk', 'Dawn', 'Void', 'Meadow', 'Reef'] },
  { type: 'Body', values: ['Stone', 'Glass', 'Moss', 'Chrome'] },
  { type: 'Eyes', values: ['Sleepy', 'Laser', 'Wide', 'Closed', 'Starry'] },
  { type: 'Rarity', values: ['Common', 'Uncommon', 'Rare', 'Legendary'] },
];

function defaultSize(index: number): number {
  return DEFAULT_SIZES[index] ?? 100 + index;
}

function resolveSizes(options: SampleDatasetOptions): number[] {
  const { collections, assetsPerCollection } = options;
  if (collections !== undefined && (!Number.isInteger(collections) || collections < 1)) {
    throw new RangeError(`collections must be a positive integer, got ${collections}`);
  }
  if (assetsPerCollection !== undefined) {
    if (collections !== undefined && collections !== assetsPerCollection.length) {
      throw new RangeError(`collections (${collections}) differs from assetsPerCollection.length (${assetsPerCollection.length})`);
    }
    for (const size of assetsPerCollection) {
      if (!Number.isInteger(size) || size < 0) throw new RangeError(`assetsPerCollection entries must be non-negative integers, got ${size}`);
    }
    return [...assetsPerCollection];
  }
  return Array.from({ length: collections ?? DEFAULT_SIZES.length }, (_, index) => defaultSize(index));
}

function generateCollection(seed: number, index: number, size: number): Collection {
  const stream = new ByteStream(`${STREAM_DOMAIN}/seed=${seed}/collection=${index}`);
  // The id comes first in the stream: collection ids depend only on (seed, index).
  const id = stream.publicKey();
  const name = `${stream.pick(NAME_PARTS[0])} ${stream.pick(NAME_PARTS[1])} #${index + 1}`;
  const symbol = name
    .split(' ')
    .slice(0, 2)
    .map((word) => word.slice(0, 3).toUpperCase())
    .join('');
  // Every third collection is a classic programmable NFT collection; the others are compressed.
  const programmable = index % 3 === 1;
  const creatorCount = 1 + stream.int(2);
  const creators: AssetCreator[] = [];
  for (let c = 0; c < creatorCount; c++) {
    creators.push({ address: stream.publicKey(), share: creatorCount === 1 ? 100 : c === 0 ? 70 : 30, verified: c === 0 });
  }
  return {
    id,
    name,
    symbol,
    description: `${name}: a generated sample collection served by the Tollgate sample DAS upstream.`,
    interface: programmable ? 'ProgrammableNFT' : 'V1_NFT',
    compressed: !programmable,
    tree: programmable ? null : stream.publicKey(),
    updateAuthority: stream.publicKey(),
    creators,
    royaltyBasisPoints: stream.pick([0, 250, 500, 750]),
    size,
  };
}

function generateAssets(seed: number, index: number, collection: Collection): { assets: Asset[]; sortKeys: AssetSortKeys[] } {
  const stream = new ByteStream(`${STREAM_DOMAIN}/seed=${seed}/collection=${index}/assets`);
  const assets: Asset[] = [];
  const sortKeys: AssetSortKeys[] = [];
  let slot = 180_000_000 + index * 7_000_000 + stream.int(1_000_000);
  // A few slots where many assets were updated or acted on at once (metadata migrations,
  // marketplace sweeps): they produce long runs of equal `updated` / `recentAction` keys.
  const lastMintSlot = slot + collection.size * 400;
  const updateWaves = [lastMintSlot + 10_000 + stream.int(5_000), lastMintSlot + 40_000 + stream.int(5_000)];
  const actionWaves = [lastMintSlot + 60_000 + stream.int(5_000), lastMintSlot + 90_000 + stream.int(5_000)];

  for (let n = 0; n < collection.size; n++) {
    // About a third of the mints land in the same slot as the previous one.
    if (n > 0 && !stream.chance(0.35)) slot += 1 + stream.int(400);
    const created = slot;
    const updated = stream.chance(0.5) ? created : stream.chance(0.6) ? stream.pick(updateWaves) : created + 1 + stream.int(50_000);
    const recentAction = stream.chance(0.4) ? updated : Math.max(updated, stream.chance(0.5) ? stream.pick(actionWaves) : updated + 1 + stream.int(80_000));

    const idBytes = stream.bytes(32);
    // Some ids start with zero bytes: they encode with a leading '1' and are shorter than 44
    // characters, where base58 string order and byte order disagree the most.
    if (n % 97 === 13) idBytes[0] = 0;
    if (n % 389 === 200) idBytes[1] = 0;
    const id = encodeBase58(idBytes);

    const number = n + 1;
    const attributes = TRAITS.map((trait) => ({ trait_type: trait.type, value: stream.pick(trait.values) }));
    const image = `https://example.com/sample-das/${collection.symbol.toLowerCase()}/${number}.png`;
    const delegated = stream.chance(0.15);
    const delegate = delegated ? stream.publicKey() : null;
    const compressed = collection.compressed;
    const compression: AssetCompression = compressed
      ? {
          eligible: false,
          compressed: true,
          data_hash: stream.publicKey(),
          creator_hash: stream.publicKey(),
          asset_hash: stream.publicKey(),
          tree: collection.tree!,
          seq: n + 1 + stream.int(3),
          leaf_id: n,
        }
      : { eligible: false, compressed: false, data_hash: '', creator_hash: '', asset_hash: '', tree: '', seq: 0, leaf_id: 0 };

    assets.push({
      interface: collection.interface,
      id,
      content: {
        $schema: 'https://schema.metaplex.com/nft1.0.json',
        json_uri: `https://example.com/sample-das/${collection.symbol.toLowerCase()}/${number}.json`,
        files: [{ uri: image, mime: 'image/png' }],
        metadata: {
          name: `${collection.name.replace(/ #\d+$/, '')} #${number}`,
          symbol: collection.symbol,
          description: `Item ${number} of ${collection.name}.`,
          token_standard: compressed ? 'NonFungible' : 'ProgrammableNonFungible',
          attributes,
        },
        links: { image, external_url: `https://example.com/sample-das/${collection.symbol.toLowerCase()}` },
      },
      authorities: [{ address: collection.updateAuthority, scopes: ['full'] }],
      compression,
      grouping: [{ group_key: 'collection', group_value: collection.id }],
      royalty: {
        royalty_model: 'creators',
        target: null,
        percent: collection.royaltyBasisPoints / 10_000,
        basis_points: collection.royaltyBasisPoints,
        primary_sale_happened: stream.chance(0.7),
        locked: false,
      },
      creators: collection.creators.map((creator) => ({ ...creator })),
      ownership: {
        // Programmable NFTs are frozen while delegated (the token-record lock).
        frozen: delegated && !compressed,
        delegated,
        delegate,
        ownership_model: 'single',
        owner: stream.publicKey(),
      },
      supply: compressed
        ? { print_max_supply: 0, print_current_supply: 0, edition_nonce: null }
        : { print_max_supply: 0, print_current_supply: 0, edition_nonce: 250 + stream.int(6) },
      mutable: !stream.chance(0.05),
      burnt: false,
    });
    sortKeys.push({ id, created, updated, recentAction });
  }
  return { assets, sortKeys };
}

/** Generates the sample data set; identical input gives identical output, byte for byte. */
export function generateSampleDataset(options: SampleDatasetOptions = {}): SampleDataset {
  const seed = options.seed ?? DEFAULT_SAMPLE_SEED;
  if (!Number.isFinite(seed)) throw new RangeError(`seed must be a finite number, got ${seed}`);
  const sizes = resolveSizes(options);
  const dataset: SampleDataset = { seed, collections: [], assets: [], sortKeys: [] };
  sizes.forEach((size, index) => {
    const collection = generateCollection(seed, index, size);
    const { assets, sortKeys } = generateAssets(seed, index, collection);
    dataset.collections.push(collection);
    dataset.assets.push(...assets);
    dataset.sortKeys.push(...sortKeys);
  });
  return dataset;
}
