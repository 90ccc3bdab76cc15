import { GatewayError } from '../errors.js';
import type { NetworkRuntime } from '../server/network-runtime.js';
import type { SubscriptionKind } from './subscription-hub.js';

/**
 * `eth_subscribe` params, validated and normalised once: identical subscriptions (same type,
 * same filter after normalisation) share one upstream subscription, so the normal form is the
 * sharing key. Lower-case hex, sorted and deduplicated addresses; topics as given (position
 * matters), lower-cased, a one-element OR-list reduced to its element.
 */

/** The methods answered by the WebSocket endpoint itself (over HTTP they do not exist). */
export const SUBSCRIPTION_METHODS: ReadonlySet<string> = new Set(['eth_subscribe', 'eth_unsubscribe']);

/** Catalogue prices (DESIGN §1.3) unless the network's `methods` re-prices them. */
const DEFAULT_COSTS: Readonly<Record<string, number>> = { eth_subscribe: 5, eth_unsubscribe: 10 };

/**
 * The price of `eth_subscribe` / `eth_unsubscribe` on a network, or undefined where the network
 * offers no subscriptions (not EVM, or no upstream with a `wsUrl`): `-32601` there.
 */
export function subscriptionMethodCost(network: NetworkRuntime, method: string): number | undefined {
  if (network.config.kind !== 'evm') return undefined;
  if (!network.config.upstreams.some((upstream) => upstream.wsUrl !== undefined)) return undefined;
  return network.config.methods[method] ?? DEFAULT_COSTS[method];
}

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const TOPIC = /^0x[0-9a-fA-F]{64}$/;
const KINDS: ReadonlySet<string> = new Set<SubscriptionKind>(['newHeads', 'logs', 'newPendingTransactions']);

function invalid(message: string): GatewayError {
  return new GatewayError('TG_ERR_INVALID_PARAMS', `invalid argument ${message}`);
}

function topicOf(value: unknown, index: number): string | string[] | null {
  if (value === null) return null;
  if (typeof value === 'string') {
    if (!TOPIC.test(value)) throw invalid(`1: topics[${index}] is not a 32-byte hex string`);
    return value.toLowerCase();
  }
  if (Array.isArray(value)) {
    if (value.length === 0) return null;
    const options = value.map((option) => {
      if (typeof option !== 'string' || !TOPIC.test(option)) throw invalid(`1: topics[${index}] holds a value that is not a 32-byte hex string`);
      return option.toLowerCase();
    });
    const unique = [...new Set(options)].sort();
    return unique.length === 1 ? unique[0]! : unique;
  }
  throw invalid(`1: topics[${index}] must be a hex string, an array or null`);
}

export interface SubscribeRequest {
  kind: SubscriptionKind;
  /** What is sent upstream: `[kind]` or `[kind, normalised filter]`. */
  upstreamParams: unknown[];
}

export function parseSubscribeParams(network: NetworkRuntime, params: unknown): SubscribeRequest {
  void network;
  if (!Array.isArray(params) || params.length === 0) throw invalid('0: expected the subscription type');
  const [kind, options, ...rest] = params as unknown[];
  if (typeof kind !== 'string' || !KINDS.has(kind)) throw invalid('0: unknown subscription type (newHeads, logs, newPendingTransactions)');
  if (rest.length > 0) throw invalid('2: too many arguments');
  if (kind === 'newHeads') {
    if (options !== undefined && options !== null && !(typeof options === 'object' && !Array.isArray(options) && Object.keys(options).length === 0)) {
      throw invalid('1: newHeads takes no options');
    }
    return { kind, upstreamParams: ['newHeads'] };
  }
  if (kind === 'newPendingTransactions') {
    if (options !== undefined && options !== null && options !== false) throw invalid('1: only transaction hashes are served (no full transactions)');
    return { kind, upstreamParams: ['newPendingTransactions'] };
  }
  if (options === undefined || options === null) return { kind: 'logs', upstreamParams: ['logs', {}] };
  if (typeof options !== 'object' || Array.isArray(options)) throw invalid('1: expected a filter object {address, topics}');
  const filter: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(options)) {
    if (name === 'address') {
      const list = Array.isArray(value) ? value : value === null || value === undefined ? [] : [value];
      const addresses = list.map((address) => {
        if (typeof address !== 'string' || !ADDRESS.test(address)) throw invalid('1: address must be a 20-byte hex address or an array of them');
        return address.toLowerCase();
      });
      const unique = [...new Set(addresses)].sort();
      if (unique.length === 1) filter.address = unique[0];
      else if (unique.length > 1) filter.address = unique;
    } else if (name === 'topics') {
      if (value === null || value === undefined) continue;
      if (!Array.isArray(value) || value.length > 4) throw invalid('1: topics must be an array of at most 4 entries');
      const topics = value.map((topic, index) => topicOf(topic, index));
      while (topics.length > 0 && topics[topics.length - 1] === null) topics.pop();
      if (topics.length > 0) filter.topics = topics;
    } else {
      throw invalid(`1: unknown filter field ${name.length > 32 ? `${name.slice(0, 32)}…` : name} (address, topics)`);
    }
  }
  return { kind: 'logs', upstreamParams: ['logs', filter] };
}
