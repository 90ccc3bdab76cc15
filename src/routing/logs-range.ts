import { GatewayError } from '../errors.js';

/**
 * The block range of an `eth_getLogs` call (or of a filter's criteria): its filter object read
 * and checked against the network's limits before anything is reserved or sent upstream, its
 * tags resolved to numbers, and the aligned chunks a split call is made of. Pure functions; the
 * upstream calls live in the caller (tag resolution is injected).
 */

/** Block tags a range may name instead of a number. */
export type BlockTag = 'earliest' | 'latest' | 'safe' | 'finalized' | 'pending';
/** One end of a range: a block number, or a tag still to resolve. */
export type BlockBound = number | BlockTag;

export interface BlockRange {
  from: number;
  to: number;
}

/** A network's `getLogs` limits (its config section). */
export interface LogsLimits {
  /** Widest range in blocks; 0 = unlimited. */
  maxRange: number;
  maxAddresses?: number | undefined;
  maxTopics?: number | undefined;
}

export interface LogsQuery {
  /** The client's filter object as sent (other fields pass through to upstreams unchanged). */
  filter: Readonly<Record<string, unknown>>;
  /** Present for a call pinned to one block by hash: never split. */
  blockHash?: string;
  from: BlockBound;
  to: BlockBound;
}

const TAGS: ReadonlySet<string> = new Set<BlockTag>(['earliest', 'latest', 'safe', 'finalized', 'pending']);
const QUANTITY = /^0x(?:0|[1-9a-fA-F][0-9a-fA-F]{0,12})$/;
const HASH = /^0x[0-9a-fA-F]{64}$/;
/** Topic positions an EVM log has (LOG0–LOG4). */
const MAX_TOPIC_POSITIONS = 4;

function invalid(message: string, data?: Record<string, unknown>): GatewayError {
  return new GatewayError('TG_ERR_INVALID_PARAMS', `invalid params: ${message}`, data);
}

/** A limit of the network's `getLogs` section exceeded: `-32602` naming it. */
function overLimit(limit: 'maxRange' | 'maxAddresses' | 'maxTopics', requested: number, max: number, what: string): GatewayError {
  return invalid(`${what} is over this network's getLogs.${limit} (${max})`, { limit: `getLogs.${limit}`, max, requested });
}

function boundOf(value: unknown, field: 'fromBlock' | 'toBlock'): BlockBound {
  // Absent or null is `latest`, as on every node.
  if (value === undefined || value === null) return 'latest';
  if (typeof value === 'string') {
    if (TAGS.has(value)) return value as BlockTag;
    if (QUANTITY.test(value)) return Number.parseInt(value.slice(2), 16);
  }
  throw invalid(`${field} must be a block number (hex quantity) or one of earliest, latest, safe, finalized, pending`);
}

function countAddresses(address: unknown): number {
  if (address === undefined || address === null) return 0;
  if (typeof address === 'string') return 1;
  if (Array.isArray(address) && address.every((entry) => typeof entry === 'string')) return address.length;
  throw invalid('address must be an address or an array of addresses');
}

function countTopics(topics: unknown): number {
  if (topics === undefined || topics === null) return 0;
  if (!Array.isArray(topics)) throw invalid('topics must be an array');
  if (topics.length > MAX_TOPIC_POSITIONS) throw invalid(`topics has ${topics.length} positions; a log has at most ${MAX_TOPIC_POSITIONS}`);
  let count = 0;
  for (const position of topics) {
    if (position === null) continue;
    if (typeof position === 'string') count += 1;
    else if (Array.isArray(position) && position.every((entry) => entry === null || typeof entry === 'string')) count += position.filter((entry) => entry !== null).length;
    else throw invalid('each topics position must be a topic, an array of topics, or null');
  }
  return count;
}

/**
 * Reads an `eth_getLogs` params array (or a filter's criteria as `[filter]`) and checks what can
 * be checked without an upstream: the address and topic limits, `blockHash` against a range, and
 * a range given in numbers (order and width). Throws `-32602` naming what is wrong.
 */
export function parseLogsQuery(params: unknown, limits: LogsLimits): LogsQuery {
  if (!Array.isArray(params) || params.length < 1) throw invalid('expected [filter]');
  const filter: unknown = params[0];
  if (filter === null || typeof filter !== 'object' || Array.isArray(filter)) throw invalid('the filter must be an object');
  const fields = filter as Record<string, unknown>;
  const addresses = countAddresses(fields.address);
  if (limits.maxAddresses !== undefined && addresses > limits.maxAddresses) {
    throw overLimit('maxAddresses', addresses, limits.maxAddresses, `${addresses} addresses`);
  }
  const topics = countTopics(fields.topics);
  if (limits.maxTopics !== undefined && topics > limits.maxTopics) throw overLimit('maxTopics', topics, limits.maxTopics, `${topics} topics`);
  if (fields.blockHash !== undefined && fields.blockHash !== null) {
    if (typeof fields.blockHash !== 'string' || !HASH.test(fields.blockHash)) throw invalid('blockHash must be a 32-byte hex hash');
    const ranged = (fields.fromBlock !== undefined && fields.fromBlock !== null) || (fields.toBlock !== undefined && fields.toBlock !== null);
    if (ranged) throw invalid('blockHash cannot be combined with fromBlock or toBlock');
    return { filter: fields, blockHash: fields.blockHash, from: 'latest', to: 'latest' };
  }
  const query: LogsQuery = { filter: fields, from: boundOf(fields.fromBlock, 'fromBlock'), to: boundOf(fields.toBlock, 'toBlock') };
  const from = query.from === 'earliest' ? 0 : query.from;
  if (typeof from === 'number' && typeof query.to === 'number') checkRange({ from, to: query.to }, limits);
  return query;
}

/** Order and width of a range of numbers: `-32602` when fromBlock is after toBlock or the range is over `maxRange`. */
export function checkRange(range: BlockRange, limits: LogsLimits): void {
  if (range.from > range.to) {
    throw invalid(`fromBlock (${hex(range.from)}) is after toBlock (${hex(range.to)})`, { fromBlock: hex(range.from), toBlock: hex(range.to) });
  }
  const width = range.to - range.from + 1;
  if (limits.maxRange > 0 && width > limits.maxRange) throw overLimit('maxRange', width, limits.maxRange, `a range of ${width} blocks`);
}

/**
 * The range in numbers: tags resolved with `resolveTag` (each distinct tag once; `earliest` is
 * block 0 without asking), then checked as {@link checkRange} does.
 */
export async function resolveRange(query: LogsQuery, limits: LogsLimits, resolveTag: (tag: Exclude<BlockTag, 'earliest'>) => Promise<number>): Promise<BlockRange> {
  const resolved = new Map<BlockTag, Promise<number>>([['earliest', Promise.resolve(0)]]);
  const numberOf = (bound: BlockBound): Promise<number> => {
    if (typeof bound === 'number') return Promise.resolve(bound);
    let known = resolved.get(bound);
    if (known === undefined) {
      known = resolveTag(bound as Exclude<BlockTag, 'earliest'>);
      resolved.set(bound, known);
    }
    return known;
  };
  const [from, to] = await Promise.all([numberOf(query.from), numberOf(query.to)]);
  const range = { from, to };
  checkRange(range, limits);
  return range;
}

/** True when the range needs no resolution to be known as one block or less (both ends the same tag). */
export function isSameTag(query: LogsQuery): boolean {
  return typeof query.from === 'string' && query.from === query.to;
}

/**
 * The chunks of `range` for an upstream range of `size` blocks. A range no wider than `size` is
 * one chunk as it is (splitting it would only add upstream calls); a wider one is cut at the
 * multiples of `size` (block k·size starts a chunk) so that overlapping calls from different
 * clients ask upstreams for, and cache, the same chunks. The first and last are cut to the range.
 */
export function alignedChunks(range: BlockRange, size: number): BlockRange[] {
  if (!Number.isFinite(size) || size <= 0 || range.to - range.from + 1 <= size) return [{ ...range }];
  const chunks: BlockRange[] = [];
  let from = range.from;
  while (from <= range.to) {
    const end = Math.min(range.to, (Math.floor(from / size) + 1) * size - 1);
    chunks.push({ from, to: end });
    from = end + 1;
  }
  return chunks;
}

export function hex(block: number): string {
  return `0x${block.toString(16)}`;
}

/** The params of one chunk: the client's filter with the chunk's range in numbers. */
export function chunkParams(query: LogsQuery, range: BlockRange): unknown[] {
  return [{ ...query.filter, fromBlock: hex(range.from), toBlock: hex(range.to) }];
}
