import { GatewayError } from '../errors.js';
import { createFeedEvents, UnverifiedBlockError, type Entry, type Feed } from './subscription-feed.js';
import type { HubDeps, HubListener, SubscriptionHub, SubscriptionKind } from './subscription-types.js';
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
 *
 * This module holds the clients' subscriptions and which upstream socket carries each network's
 * feed; what the feed does with the events (the deduplication, catch-up and back-fills above) is
 * in subscription-feed.ts, and the hub's types are in subscription-types.ts.
 */

/**
 * Upstream messages waiting in a network's serial queue (they pile up only while a back-fill or an
 * `eth_subscribe` waits on the upstream). Past it the upstream is left as if it had closed: the
 * queue is dropped, and the next upstream back-fills what it held (heads by number, logs by
 * `eth_getLogs`), so memory stays bounded without a silent gap.
 */
export const MAX_FEED_QUEUE_EVENTS = 10_000;

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

  const { onHead, onLog, onPending, backfillLogs, catchUpHeads } = createFeedEvents({
    deps,
    now,
    enqueueEvent,
    leave: (feed, generation, reason, error) => {
      if (generation === feed.generation) detach(feed, reason, error);
    },
  });

  function subscribed(entry: Entry): void {
    for (const waiter of entry.waiters) waiter();
    entry.waiters.clear();
  }

  // --- upstream sockets ----------------------------------------------------------------------

  async function subscribeEntry(feed: Feed, entry: Entry, socket: UpstreamSocket, generation: number): Promise<void> {
    // Already subscribed on this socket: an entry added after a new socket's attach was queued has
    // a task of its own queued too, but the attach, which takes every entry there is when it runs,
    // subscribed it first. (A move clears every entry's id and starts a new generation.)
    if (generation !== feed.generation || entry.upstreamSubscriptionId !== undefined) return;
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
        if (generation === feed.generation) detach(feed, error instanceof UnverifiedBlockError ? error.reason : failure, error);
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
    // The gateway's own queue falling behind is no fault of the upstream's.
    if (reason !== 'queue_full') deps.upstreamFailed?.(feed.networkId, socket.upstreamId, reason);
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
          deps.upstreamFailed?.(feed.networkId, candidate.id, 'connect_failed');
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
