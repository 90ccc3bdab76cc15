// One network's feed of upstream subscriptions for the hub (subscription-hub.ts): its state, and
// what it does with the upstream's events (heads, logs, pending transactions), deduplicated,
// caught up after a gap or a reorg, and back-filled after a move to another upstream. Separate
// from the hub, which decides which upstream socket carries the feed and holds the clients'
// subscriptions on it: this is what reaches the listeners, whichever upstream sent it.
import type { HubDeps, HubEvent, HubListener, SubscriptionKind } from './subscription-types.js';
import type { UpstreamSocket } from './upstream-socket.js';
import { verifyBlock } from '../verification/block-verifier.js';

/** Blocks of logs and heads remembered for deduplication. */
const DEDUP_WINDOW_BLOCKS = 256;
/** A log back-fill after a move starts this many blocks before the last head delivered. */
const LOG_BACKFILL_MARGIN = 8;
/** The deepest reorg or gap filled with fetched blocks; a longer gap delivers its last blocks only. */
const MAX_BACKFILL_BLOCKS = 128;
/** Pending transaction hashes remembered for deduplication. */
const PENDING_DEDUP_ENTRIES = 50_000;

export interface Entry {
  key: string;
  kind: SubscriptionKind;
  params: unknown[];
  listeners: Set<HubListener>;
  upstreamSubscriptionId: string | undefined;
  /** Client subscriptions waiting for the upstream subscription to exist before they are confirmed. */
  waiters: Set<() => void>;
  /** Logs: had an upstream subscription on a socket that went away, so the next one back-fills it. */
  backfill: boolean;
}

interface LogRecord {
  blockNumber: number;
  blockHash: string;
  log: Record<string, unknown>;
}

export interface Feed {
  networkId: string;
  entries: Map<string, Entry>;
  heads: Entry;
  socket: UpstreamSocket | undefined;
  /** Bumped with every new socket: events of an older one are dropped. */
  generation: number;
  connecting: boolean;
  retryTimer: NodeJS.Timeout | undefined;
  stallTimer: NodeJS.Timeout | undefined;
  cooldownUntil: Map<string, number>;
  queue: Promise<void>;
  /** Tasks in `queue` not yet run. */
  queued: number;
  lastHeadAt: number;
  // Heads delivered: number → hash, and the last one.
  headHashes: Map<number, string>;
  seenHeads: Set<string>;
  lastNumber: number | undefined;
  lastHash: string | undefined;
  /** Logs delivered, by entry key then `${blockHash}:${logIndex}:${removed}`. */
  logs: Map<string, Map<string, LogRecord>>;
  pending: Map<string, Set<string>>;
  closed: boolean;
}

const toNumber = (value: unknown): number => (typeof value === 'string' ? Number.parseInt(value, 16) : Number.NaN);
const hex = (value: number): string => `0x${value.toString(16)}`;

/** The header fields of a block fetched with `eth_getBlockByNumber` (what `newHeads` carries). */
function headerOf(block: Record<string, unknown>): Record<string, unknown> {
  const { transactions: _transactions, uncles: _uncles, size: _size, ...header } = block;
  return header;
}

export interface FeedEventsContext {
  deps: HubDeps;
  now: () => number;
  /** Queues an upstream event of socket `generation` on the feed's serial queue (the hub's: past its bound the upstream is left). */
  enqueueEvent(feed: Feed, generation: number, task: () => Promise<void> | void): void;
  /** Leaves the feed's upstream of socket `generation` (for a fault of that upstream) and moves to the next. */
  leave(feed: Feed, generation: number, reason: string, error: unknown): void;
}

/** A block an upstream gave to fill a gap did not verify: the upstream is left, its blocks are not delivered. */
export class UnverifiedBlockError extends Error {
  readonly reason = 'unverified_block';
}

/** The handlers of a feed's upstream events, and the catch-up and back-fill after a move. */
export function createFeedEvents(context: FeedEventsContext) {
  const { deps, now, enqueueEvent } = context;
  const { logger } = deps;

  function deliver(entry: Entry, json: string, blockHash?: string, blockNumber?: number): void {
    if (entry.listeners.size === 0) return;
    const event: HubEvent = { json, bytes: Buffer.byteLength(json), blockHash, blockNumber };
    for (const listener of entry.listeners) listener(event);
  }

  // --- heads -----------------------------------------------------------------------------

  function deliverHead(feed: Feed, header: Record<string, unknown>): void {
    const number = toNumber(header.number);
    const hash = String(header.hash);
    if (feed.seenHeads.has(hash) || Number.isNaN(number)) return;
    feed.seenHeads.add(hash);
    feed.headHashes.set(number, hash);
    feed.lastNumber = number;
    feed.lastHash = hash;
    for (const [old, oldHash] of feed.headHashes) {
      if (old > number - DEDUP_WINDOW_BLOCKS) break;
      feed.headHashes.delete(old);
      feed.seenHeads.delete(oldHash);
    }
    deliver(feed.heads, JSON.stringify(header));
  }

  async function blockByNumber(feed: Feed, socket: UpstreamSocket, number: number): Promise<Record<string, unknown> | undefined> {
    const timeoutMs = deps.network(feed.networkId)?.requestTimeoutMs ?? 10_000;
    const block = await socket.request('eth_getBlockByNumber', [hex(number), false], timeoutMs);
    return block !== null && typeof block === 'object' ? (block as Record<string, unknown>) : undefined;
  }

  /** A head that does not follow the last one: deliver the canonical blocks from the fork point first. */
  async function catchUp(feed: Feed, socket: UpstreamSocket, head: Record<string, unknown>): Promise<void> {
    const number = toNumber(head.number);
    const last = feed.lastNumber;
    if (last === undefined || Number.isNaN(number)) return;
    if (number === last + 1 && head.parentHash === feed.lastHash) return;
    // The fork point: the highest delivered height whose block is still canonical.
    let fork = Math.min(last, number - 1);
    while (fork > last - MAX_BACKFILL_BLOCKS && fork >= 0) {
      const delivered = feed.headHashes.get(fork);
      if (delivered === undefined) break;
      const canonical = fork === number - 1 ? String(head.parentHash) : (await blockByNumber(feed, socket, fork))?.hash;
      if (canonical === delivered) break;
      fork -= 1;
    }
    const from = Math.max(fork + 1, number - MAX_BACKFILL_BLOCKS);
    const blocks: Array<Record<string, unknown>> = [];
    for (let height = from; height < number; height += 1) {
      const block = await blockByNumber(feed, socket, height);
      if (block === undefined) return;
      blocks.push(block);
    }
    await verifyGap(feed, blocks, head);
    // A block delivered before at this height on the same chain is skipped by hash.
    for (const block of blocks) deliverHead(feed, headerOf(block));
  }

  /**
   * The blocks fetched to fill a gap before `head`, checked before any is delivered: each one's
   * header hashes to its hash, and each is the parent of the next, the last of `head`. A lying or
   * broken upstream cannot put a block of its own making into a client's stream. Not with
   * `verification: off` (a chain whose headers this gateway cannot hash).
   */
  async function verifyGap(feed: Feed, blocks: ReadonlyArray<Record<string, unknown>>, head: Record<string, unknown>): Promise<void> {
    if (blocks.length === 0 || deps.network(feed.networkId)?.verification === 'off') return;
    for (const [index, block] of blocks.entries()) {
      const reason = await verifyBlock(block, String(block.hash), 'header');
      if (reason !== undefined) throw new UnverifiedBlockError(`block ${String(block.number)} of a gap does not verify: ${reason}`);
      const child = index + 1 < blocks.length ? blocks[index + 1]! : head;
      if (child.parentHash !== block.hash) throw new UnverifiedBlockError(`block ${String(block.number)} of a gap is not the parent of the next block`);
    }
  }

  /**
   * After a move: the heads mined while no upstream carried the stream, up to the new upstream's
   * latest block now (its live stream brings the later ones), rather than at its next block, which
   * on a quiet chain can be long in coming. Nothing when the socket was left meanwhile.
   */
  async function catchUpHeads(feed: Feed, socket: UpstreamSocket, generation: number): Promise<void> {
    if (feed.lastNumber === undefined) return;
    const timeoutMs = deps.network(feed.networkId)?.requestTimeoutMs ?? 10_000;
    const latest = await socket.request('eth_getBlockByNumber', ['latest', false], timeoutMs);
    if (generation !== feed.generation || latest === null || typeof latest !== 'object') return;
    const header = headerOf(latest as Record<string, unknown>);
    if (feed.seenHeads.has(String(header.hash)) || !(toNumber(header.number) > feed.lastNumber)) return;
    await catchUp(feed, socket, header);
    deliverHead(feed, header);
  }

  function onHead(feed: Feed, generation: number, socket: UpstreamSocket, result: unknown): void {
    if (result === null || typeof result !== 'object') return;
    enqueueEvent(feed, generation, async () => {
      if (generation !== feed.generation) return;
      feed.lastHeadAt = now();
      const header = result as Record<string, unknown>;
      if (feed.seenHeads.has(String(header.hash))) return;
      try {
        await catchUp(feed, socket, header);
      } catch (error) {
        // Not this head either: the next upstream's catch-up brings it with the gap, verified.
        if (error instanceof UnverifiedBlockError) return context.leave(feed, generation, error.reason, error);
        throw error;
      }
      deliverHead(feed, header);
    });
  }

  // --- logs ------------------------------------------------------------------------------

  function deliverLog(feed: Feed, entry: Entry, log: Record<string, unknown>): void {
    const blockHash = String(log.blockHash);
    const key = `${blockHash}:${String(log.logIndex)}:${log.removed === true}`;
    let delivered = feed.logs.get(entry.key);
    if (delivered === undefined) feed.logs.set(entry.key, (delivered = new Map()));
    if (delivered.has(key)) return;
    const blockNumber = toNumber(log.blockNumber);
    delivered.set(key, { blockNumber, blockHash, log });
    const horizon = (feed.lastNumber ?? blockNumber) - DEDUP_WINDOW_BLOCKS;
    for (const [oldKey, record] of delivered) {
      if (record.blockNumber >= horizon) break;
      delivered.delete(oldKey);
    }
    deliver(entry, JSON.stringify(log), blockHash, Number.isFinite(blockNumber) ? blockNumber : undefined);
  }

  function onLog(feed: Feed, entry: Entry, generation: number, result: unknown): void {
    if (result === null || typeof result !== 'object') return;
    enqueueEvent(feed, generation, () => {
      if (generation !== feed.generation || feed.entries.get(entry.key) !== entry) return;
      deliverLog(feed, entry, result as Record<string, unknown>);
    });
  }

  /**
   * After a move: the logs the gap may have hidden, and removals of logs whose block is no longer
   * canonical. False when the socket was left meanwhile (nothing delivered: the next one back-fills).
   */
  async function backfillLogs(feed: Feed, entry: Entry, socket: UpstreamSocket, generation: number): Promise<boolean> {
    if (feed.lastNumber === undefined) return true;
    const timeoutMs = deps.network(feed.networkId)?.requestTimeoutMs ?? 10_000;
    const from = Math.max(0, feed.lastNumber - LOG_BACKFILL_MARGIN);
    const filter = (entry.params[1] ?? {}) as Record<string, unknown>;
    // `latest` as the new upstream has it, read once its subscription exists: its live stream
    // brings every later block, so the back-fill reaches at least the block that stream starts
    // after. An HTTP upstream's own `latest` could be a block behind and leave a gap.
    const head = toNumber(await socket.request('eth_blockNumber', [], timeoutMs));
    if (Number.isNaN(head)) throw new Error(`${socket.upstreamId} answered eth_blockNumber without a block number`);
    // Not on the socket: after a long move the gap can be wider than an upstream answers at once.
    const found = head < from ? [] : await deps.getLogs(feed.networkId, filter, from, head);
    if (generation !== feed.generation) return false;
    logger.info({ network: feed.networkId, upstream: socket.upstreamId, fromBlock: from, toBlock: head, logs: found.length }, 'logs subscription back-filled after a move');
    const logs = (found as Array<Record<string, unknown>>).filter((log) => log !== null && typeof log === 'object');
    const canonical = new Map<number, string>();
    for (const log of logs) canonical.set(toNumber(log.blockNumber), String(log.blockHash));
    const delivered = feed.logs.get(entry.key) ?? new Map<string, LogRecord>();
    const removedAlready = new Set([...delivered.values()].filter((record) => record.log.removed === true).map((record) => `${record.blockHash}:${String(record.log.logIndex)}`));
    for (const record of [...delivered.values()]) {
      if (record.blockNumber < from || record.log.removed === true || removedAlready.has(`${record.blockHash}:${String(record.log.logIndex)}`)) continue;
      let hash = canonical.get(record.blockNumber);
      if (hash === undefined) {
        hash = (await blockByNumber(feed, socket, record.blockNumber))?.hash as string | undefined;
        if (hash === undefined) continue;
        canonical.set(record.blockNumber, hash);
      }
      if (hash !== record.blockHash) deliverLog(feed, entry, { ...record.log, removed: true });
    }
    logs.sort((a, b) => toNumber(a.blockNumber) - toNumber(b.blockNumber) || toNumber(a.logIndex) - toNumber(b.logIndex));
    for (const log of logs) deliverLog(feed, entry, log);
    return true;
  }

  // --- pending transactions ----------------------------------------------------------------

  function onPending(feed: Feed, entry: Entry, generation: number, result: unknown): void {
    enqueueEvent(feed, generation, () => {
      if (generation !== feed.generation || feed.entries.get(entry.key) !== entry) return;
      const hash = typeof result === 'string' ? result : String((result as { hash?: unknown } | null)?.hash);
      let seen = feed.pending.get(entry.key);
      if (seen === undefined) feed.pending.set(entry.key, (seen = new Set()));
      if (seen.has(hash)) return;
      seen.add(hash);
      if (seen.size > PENDING_DEDUP_ENTRIES) seen.delete(seen.values().next().value!);
      deliver(entry, JSON.stringify(result));
    });
  }

  return { onHead, onLog, onPending, backfillLogs, catchUpHeads };
}
