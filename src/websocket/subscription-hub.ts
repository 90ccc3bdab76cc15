import { GatewayError } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import type { UpstreamSocket } from './upstream-socket.js';

/**
 * Upstream subscriptions shared by every client that asked for the same thing (docs/websocket.md).
 *
 * Per network, one upstream socket at a time carries all of the network's subscriptions, next
 * to an internal `newHeads` subscription that tracks the head (and is shared with clients that
 * subscribe to `newHeads`). Identical subscriptions (network, type, normalised params) are one
 * upstream subscription whatever the number of clients. When the carrying socket closes, or its
 * head stops moving while another upstream's probed head is ahead, every subscription of the
 * network moves to the next upstream with a `wsUrl`, and the stream goes on without a gap or a
 * duplicate:
 *   - heads: deduplicated by hash; a head that does not follow the last one delivered (a gap, or
 *     a reorg) is preceded by the canonical blocks from the fork point, fetched from the new
 *     upstream with `eth_getBlockByNumber`;
 *   - logs: deduplicated by (blockHash, logIndex, removed); after a move, `eth_getLogs` from a
 *     few blocks before the last head to the new upstream's head fills the gap, asked through
 *     `deps.getLogs` (the HTTP path's splitter: a long move's gap may be wider than an upstream
 *     answers at once), and logs already delivered in blocks that are no longer canonical are
 *     delivered again with `removed: true`;
 *   - pending transactions: deduplicated by hash (a mempool cannot be replayed: hashes announced
 *     only while no upstream was connected are not seen).
 * Every network's events go through one serial queue, so back-fills and live events keep order.
 *
 * A client subscription is confirmed only once its events are assured from then on: `ready`
 * resolves when the upstream subscription it shares exists on the carrying socket (made now, or
 * already there). Until then the client gets no answer; if no upstream takes it within the
 * network's `requestTimeoutMs`, `ready` rejects and the client's `eth_subscribe` fails, uncharged.
 */

export type SubscriptionKind = 'newHeads' | 'logs' | 'newPendingTransactions';

export interface HubEvent {
  /** The result as JSON text, serialised once for every subscriber. */
  json: string;
  /** Its length in bytes (UTF-8), measured once: what each subscriber's queue counts. */
  bytes: number;
  /** Logs: the hash of the log's block (one block's logs are charged once per client subscription). */
  blockHash?: string;
  /** Logs: the number of the log's block (a subscription takes no log of a block before it began). */
  blockNumber?: number;
}

export type HubListener = (event: HubEvent) => void;

export interface SubscriptionCandidate {
  id: string;
  wsUrl: string;
  /** The upstream's probed head (if health probes run): tells whether the carrying upstream fell behind. */
  probedHead(): number | undefined;
}

export interface HubNetwork {
  /** Upstreams with a `wsUrl`, in the network's routing order (healthiest first). */
  candidates(): SubscriptionCandidate[];
  stallTimeoutMs: number;
  reconnectDelayMs: number;
  requestTimeoutMs: number;
}

export interface HubObserver {
  /** An upstream subscription was made (+1) or ended (-1). */
  upstreamSubscriptions?(network: string, kind: SubscriptionKind, delta: number): void;
  /** The network's subscriptions moved off an upstream (`closed`, `stalled`). */
  failover?(network: string, upstream: string, reason: string): void;
}

export interface HubDeps {
  /** The current config of a network, or undefined if it is no longer configured. */
  network(networkId: string): HubNetwork | undefined;
  connect(networkId: string, candidate: SubscriptionCandidate, onClose: (reason: string) => void): Promise<UpstreamSocket>;
  /**
   * The logs matching `filter` in blocks `fromBlock`…`toBlock`, for a back-fill: asked the way a
   * client's `eth_getLogs` is (split to the upstreams' ranges, the response cache, failover over
   * the network's upstreams), uncharged. In block order; rejects when the logs of some blocks
   * could not be had (never a partial list).
   */
  getLogs(networkId: string, filter: Readonly<Record<string, unknown>>, fromBlock: number, toBlock: number): Promise<unknown[]>;
  logger: Logger;
  now?: () => number;
  observe?: HubObserver;
}

export interface HubSubscription {
  /**
   * Resolves once every later event will reach the listener: the upstream subscription exists.
   * Rejects (TG_ERR_UPSTREAMS_TIMED_OUT) when no upstream took it within the network's request timeout.
   */
  ready: Promise<void>;
  /** Removes the listener (and the upstream subscription with its last listener). */
  unsubscribe(): void;
}

export interface SubscriptionHub {
  /** Adds a listener to the shared subscription. */
  subscribe(networkId: string, kind: SubscriptionKind, params: unknown[], listener: HubListener): HubSubscription;
  /** Upstream subscriptions open now, all networks. */
  upstreamSubscriptionCount(): number;
  close(): void;
}

/** Blocks of logs and heads remembered for deduplication. */
const DEDUP_WINDOW_BLOCKS = 256;
/** A log back-fill after a move starts this many blocks before the last head delivered. */
const LOG_BACKFILL_MARGIN = 8;
/** The deepest reorg or gap filled with fetched blocks; a longer gap delivers its last blocks only. */
const MAX_BACKFILL_BLOCKS = 128;
/** Pending transaction hashes remembered for deduplication. */
const PENDING_DEDUP_ENTRIES = 50_000;
/**
 * Upstream messages waiting in a network's serial queue (they pile up only while a back-fill or an
 * `eth_subscribe` waits on the upstream). Past it the upstream is left as if it had closed: the
 * queue is dropped, and the next upstream back-fills what it held (heads by number, logs by
 * `eth_getLogs`), so memory stays bounded without a silent gap.
 */
export const MAX_FEED_QUEUE_EVENTS = 10_000;

interface Entry {
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

interface Feed {
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

export function createSubscriptionHub(deps: HubDeps): SubscriptionHub {
  const now = deps.now ?? Date.now;
  const { logger } = deps;
  const feeds = new Map<string, Feed>();
  let upstreamSubscriptions = 0;

  function countSubscription(feed: Feed, entry: Entry, delta: number): void {
    upstreamSubscriptions += delta;
    deps.observe?.upstreamSubscriptions?.(feed.networkId, entry.kind, delta);
  }

  function enqueue(feed: Feed, task: () => Promise<void> | void): void {
    feed.queued += 1;
    feed.queue = feed.queue
      .then(() => {
        feed.queued -= 1;
        return task();
      })
      .catch((error: unknown) => {
        logger.warn({ err: error, network: feed.networkId }, 'subscription event handling failed');
      });
  }

  /** An upstream event to queue: past the queue's bound the upstream is left (its events are back-filled by the next). */
  function enqueueEvent(feed: Feed, generation: number, task: () => Promise<void> | void): void {
    if (generation !== feed.generation) return;
    if (feed.queued >= MAX_FEED_QUEUE_EVENTS) return detach(feed, 'queue_full');
    enqueue(feed, task);
  }

  function deliver(entry: Entry, json: string, blockHash?: string, blockNumber?: number): void {
    if (entry.listeners.size === 0) return;
    const event: HubEvent = { json, bytes: Buffer.byteLength(json), blockHash, blockNumber };
    for (const listener of entry.listeners) listener(event);
  }

  function subscribed(entry: Entry): void {
    for (const waiter of entry.waiters) waiter();
    entry.waiters.clear();
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
    for (let height = from; height < number; height += 1) {
      const block = await blockByNumber(feed, socket, height);
      if (block === undefined) return;
      // A block delivered before at this height on the same chain is skipped by hash.
      deliverHead(feed, headerOf(block));
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
      await catchUp(feed, socket, header);
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

  // --- upstream sockets ----------------------------------------------------------------------

  async function subscribeEntry(feed: Feed, entry: Entry, socket: UpstreamSocket, generation: number): Promise<void> {
    const timeoutMs = deps.network(feed.networkId)?.requestTimeoutMs ?? 10_000;
    const onEvent =
      entry.kind === 'newHeads'
        ? (result: unknown) => onHead(feed, generation, socket, result)
        : entry.kind === 'logs'
          ? (result: unknown) => onLog(feed, entry, generation, result)
          : (result: unknown) => onPending(feed, entry, generation, result);
    const id = await socket.subscribe(entry.params, timeoutMs, onEvent);
    if (generation !== feed.generation || feed.entries.get(entry.key) !== entry) {
      socket.unsubscribe(id);
      return;
    }
    entry.upstreamSubscriptionId = id;
    countSubscription(feed, entry, 1);
    subscribed(entry);
  }

  /** Subscribes every entry on a new socket (then back-fills logs), as one task of the queue. */
  function attach(feed: Feed, socket: UpstreamSocket, moved: boolean): void {
    const generation = feed.generation;
    enqueue(feed, async () => {
      let failure = 'subscribe_failed';
      try {
        for (const entry of feed.entries.values()) await subscribeEntry(feed, entry, socket, generation);
        if (!moved) return;
        failure = 'backfill_failed';
        // Only logs subscriptions the move interrupted: one made meanwhile was confirmed on this socket.
        for (const entry of feed.entries.values()) {
          if (entry.kind !== 'logs' || !entry.backfill) continue;
          if (!(await backfillLogs(feed, entry, socket, generation))) return;
          entry.backfill = false;
        }
        // Heads last: the logs back-fills start from the last head delivered before the move, so
        // one that fails is asked again by the next upstream from that same block.
        await catchUpHeads(feed, socket, generation);
      } catch (error) {
        // The new upstream failed mid-way, or a back-fill could not be had: it is dropped too, and
        // the next one is tried. A back-fill that failed is asked again by the next upstream from
        // the same block (the heads of this one were not delivered), and live events wait behind
        // it, so a subscription never skips a gap or gets its logs out of order.
        if (generation === feed.generation) detach(feed, failure, error);
      }
    });
  }

  function detach(feed: Feed, reason: string, error?: unknown): void {
    const socket = feed.socket;
    if (socket === undefined) return;
    feed.socket = undefined;
    feed.generation += 1;
    for (const entry of feed.entries.values()) {
      if (entry.upstreamSubscriptionId !== undefined) {
        countSubscription(feed, entry, -1);
        entry.backfill = true;
      }
      entry.upstreamSubscriptionId = undefined;
    }
    const network = deps.network(feed.networkId);
    feed.cooldownUntil.set(socket.upstreamId, now() + (network?.reconnectDelayMs ?? 1_000));
    deps.observe?.failover?.(feed.networkId, socket.upstreamId, reason);
    logger.warn({ network: feed.networkId, upstream: socket.upstreamId, reason, err: error }, 'subscriptions moving off an upstream');
    socket.close();
    if (!feed.closed) void connect(feed, true);
  }

  async function connect(feed: Feed, moved: boolean): Promise<void> {
    if (feed.connecting || feed.closed || feed.socket !== undefined) return;
    const network = deps.network(feed.networkId);
    if (network === undefined) return;
    feed.connecting = true;
    try {
      const candidates = network.candidates();
      // Upstreams that failed recently go last, not out: with every upstream failing, the least recent is retried.
      const ready = candidates.filter((candidate) => (feed.cooldownUntil.get(candidate.id) ?? 0) <= now());
      for (const candidate of ready) {
        let socket: UpstreamSocket;
        try {
          socket = await deps.connect(feed.networkId, candidate, (reason) => {
            if (feed.socket === socket) detach(feed, reason === 'closed_1000' ? 'closed' : reason);
          });
        } catch (error) {
          feed.cooldownUntil.set(candidate.id, now() + network.reconnectDelayMs);
          logger.warn({ network: feed.networkId, upstream: candidate.id, err: error }, 'upstream WebSocket connection failed');
          continue;
        }
        if (feed.closed) return socket.close();
        feed.generation += 1;
        feed.socket = socket;
        feed.lastHeadAt = now();
        attach(feed, socket, moved);
        return;
      }
      logger.warn({ network: feed.networkId, candidates: candidates.length }, 'no upstream WebSocket available for subscriptions; retrying');
      feed.retryTimer = setTimeout(() => {
        feed.retryTimer = undefined;
        void connect(feed, moved);
      }, network.reconnectDelayMs);
      feed.retryTimer.unref();
    } finally {
      feed.connecting = false;
    }
  }

  function watchStall(feed: Feed): void {
    const network = deps.network(feed.networkId);
    const interval = Math.max(100, Math.floor((network?.stallTimeoutMs ?? 30_000) / 4));
    feed.stallTimer = setInterval(() => {
      const current = deps.network(feed.networkId);
      if (current === undefined || feed.socket === undefined) return;
      if (now() - feed.lastHeadAt < current.stallTimeoutMs) return;
      // No new head for that long: stalled only if another upstream has seen a later block.
      const ours = feed.lastNumber ?? -1;
      const ahead = current.candidates().some((candidate) => candidate.id !== feed.socket?.upstreamId && (candidate.probedHead() ?? -1) > ours);
      if (ahead) detach(feed, 'stalled');
    }, interval);
    feed.stallTimer.unref();
  }

  function createFeed(networkId: string): Feed {
    const heads: Entry = { key: 'newHeads|[]', kind: 'newHeads', params: ['newHeads'], listeners: new Set(), upstreamSubscriptionId: undefined, waiters: new Set(), backfill: false };
    const feed: Feed = {
      networkId,
      entries: new Map([[heads.key, heads]]),
      heads,
      socket: undefined,
      generation: 0,
      connecting: false,
      retryTimer: undefined,
      stallTimer: undefined,
      cooldownUntil: new Map(),
      queue: Promise.resolve(),
      queued: 0,
      lastHeadAt: now(),
      headHashes: new Map(),
      seenHeads: new Set(),
      lastNumber: undefined,
      lastHash: undefined,
      logs: new Map(),
      pending: new Map(),
      closed: false,
    };
    feeds.set(networkId, feed);
    watchStall(feed);
    void connect(feed, false);
    return feed;
  }

  function closeFeed(feed: Feed): void {
    feed.closed = true;
    feeds.delete(feed.networkId);
    if (feed.retryTimer !== undefined) clearTimeout(feed.retryTimer);
    if (feed.stallTimer !== undefined) clearInterval(feed.stallTimer);
    for (const entry of feed.entries.values()) if (entry.upstreamSubscriptionId !== undefined) countSubscription(feed, entry, -1);
    feed.socket?.close();
    feed.socket = undefined;
  }

  function keyOf(kind: SubscriptionKind, params: unknown[]): string {
    return `${kind}|${JSON.stringify(params.slice(1))}`;
  }

  return {
    subscribe(networkId, kind, params, listener) {
      const feed = feeds.get(networkId) ?? createFeed(networkId);
      const key = kind === 'newHeads' ? feed.heads.key : keyOf(kind, params);
      let entry = feed.entries.get(key);
      if (entry === undefined) {
        entry = { key, kind, params, listeners: new Set(), upstreamSubscriptionId: undefined, waiters: new Set(), backfill: false };
        feed.entries.set(key, entry);
        const socket = feed.socket;
        if (socket !== undefined) {
          const generation = feed.generation;
          const added = entry;
          enqueue(feed, () => subscribeEntry(feed, added, socket, generation).catch((error: unknown) => {
            if (generation === feed.generation) detach(feed, 'subscribe_failed', error);
          }));
        }
        // Without a socket (the first one connecting, or a move under way) the next socket's attach subscribes it.
      }
      // One function per client subscription, so the same listener may be added twice. A logs
      // subscription takes the logs of blocks after the last head seen, as a node's own does (a
      // block's logs are emitted as it is imported): a back-fill after a move reaches a few blocks
      // further back, for the logs a shared subscription may have missed, and a log of an earlier
      // block is not this subscription's to receive or pay for, removed or not.
      const since = kind === 'logs' ? feed.lastNumber : undefined;
      const own: HubListener =
        since === undefined
          ? (event) => listener(event)
          : (event) => {
              if (event.blockNumber === undefined || event.blockNumber > since) listener(event);
            };
      entry.listeners.add(own);
      const target = entry;
      let settle: (() => void) | undefined;
      const ready =
        target.upstreamSubscriptionId !== undefined
          ? Promise.resolve()
          : new Promise<void>((resolve, reject) => {
              const timeoutMs = deps.network(networkId)?.requestTimeoutMs ?? 10_000;
              const timer = setTimeout(() => {
                target.waiters.delete(waiter);
                reject(new GatewayError('TG_ERR_UPSTREAMS_TIMED_OUT', `no upstream took the ${kind} subscription within ${timeoutMs} ms`));
              }, timeoutMs);
              timer.unref();
              const waiter = () => {
                clearTimeout(timer);
                resolve();
              };
              settle = () => {
                clearTimeout(timer);
                target.waiters.delete(waiter);
              };
              target.waiters.add(waiter);
            });
      let removed = false;
      const unsubscribe = () => {
        if (removed) return;
        removed = true;
        settle?.();
        target.listeners.delete(own);
        if (target.listeners.size > 0) return;
        if (target !== feed.heads) {
          if (feed.entries.get(target.key) === target) feed.entries.delete(target.key);
          feed.logs.delete(target.key);
          feed.pending.delete(target.key);
          if (target.upstreamSubscriptionId !== undefined) {
            countSubscription(feed, target, -1);
            feed.socket?.unsubscribe(target.upstreamSubscriptionId);
            target.upstreamSubscriptionId = undefined;
          }
        }
        // Nothing left but the internal head tracker without listeners: the network's socket goes.
        if (feed.entries.size === 1 && feed.heads.listeners.size === 0 && feeds.get(networkId) === feed) closeFeed(feed);
      };
      return { ready, unsubscribe };
    },
    upstreamSubscriptionCount: () => upstreamSubscriptions,
    close() {
      for (const feed of [...feeds.values()]) closeFeed(feed);
    },
  };
}
