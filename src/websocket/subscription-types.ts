// The subscription hub's interface (subscription-hub.ts): the kinds of subscription, the events
// and listeners, and what the hub is given (its networks, upstream sockets, logs back-fills).
// Separate so that the hub, its feeds (subscription-feed.ts) and the WebSocket endpoint's
// modules share these types without importing one another.
import type { Logger } from '../logging/logger.js';
import type { UpstreamSocket } from './upstream-socket.js';

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
  /**
   * The network's `verification`: unless `off`, every block a feed fetches to fill a gap is
   * checked (its header hashes to its hash, and the blocks link up to the head by parent hash)
   * before its head is delivered.
   */
  verification: 'full' | 'header' | 'off';
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
  /**
   * The feed left an upstream for a fault of its own (closed, stalled, a failed subscribe or
   * back-fill, an unverified block): routing counts it against that upstream's health, as a
   * failed call is, so HTTP calls rank it lower too.
   */
  upstreamFailed?(networkId: string, upstreamId: string, reason: string): void;
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
