import { servesSubscriptions } from '../websocket/subscribe-params.js';
import type { Forwarder } from './forward.js';

/** An upstream that can carry a network's subscriptions, as the subscription hub sees it. */
export interface SubscriptionUpstream {
  id: string;
  wsUrl: string;
  /** The upstream's probed head (if health probes run): tells whether the carrying upstream fell behind. */
  probedHead(): number | undefined;
}

/**
 * The upstreams that serve subscriptions (a `wsUrl`, `eth_subscribe` not denied), in the order the
 * hub should try them: healthy ones in the forwarder's routing order first, then those whose
 * circuit is open (last, not out: with every circuit open, one of them is still tried).
 */
export function rankSubscriptionUpstreams(forwarder: Forwarder): SubscriptionUpstream[] {
  const ordered = forwarder.selector.order().map((upstream) => upstream.id);
  const rank = (id: string): number => (ordered.includes(id) ? ordered.indexOf(id) : ordered.length);
  return forwarder.upstreams
    .filter((upstream) => servesSubscriptions(upstream.config))
    .sort((a, b) => rank(a.id) - rank(b.id))
    .map((upstream) => ({ id: upstream.id, wsUrl: upstream.config.wsUrl!, probedHead: () => upstream.health.head }));
}
