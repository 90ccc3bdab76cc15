import type { UpstreamConfig } from '../config/schema.js';
import { GatewayError } from '../errors.js';
import { createDenyRule } from '../methods/catalogue.js';
import { globsMatcher } from '../methods/method-globs.js';
import { DEFAULT_METHOD_COSTS, DEFAULT_PASS_THROUGH_COST } from '../methods/registry.js';
import type { NetworkRuntime } from '../server/network-runtime.js';
import type { SubscriptionKind } from './subscription-types.js';

/**
 * `eth_subscribe` params, validated and normalised once: identical subscriptions (same type,
 * same filter after normalisation) share one upstream subscription, so the normal form is the
 * sharing key. Lower-case hex, sorted and deduplicated addresses; topics as given (position
 * matters), lower-cased, a one-element OR-list reduced to its element.
 */

/** The methods answered by the WebSocket endpoint itself (over HTTP they do not exist). */
export const SUBSCRIPTION_METHODS: ReadonlySet<string> = new Set(['eth_subscribe', 'eth_unsubscribe']);

/**
 * Whether an upstream carries subscriptions: it has a `wsUrl` and does not deny `eth_subscribe`
 * (`upstreams[].methods.deny`).
 */
export function servesSubscriptions(upstream: UpstreamConfig): boolean {
  return upstream.wsUrl !== undefined && globsMatcher(upstream.methods.deny)?.('eth_subscribe') !== true;
}

const decisions = new WeakMap<NetworkRuntime, Map<string, number | GatewayError>>();

/**
 * The price of `eth_subscribe` / `eth_unsubscribe` on a network (the catalogue's 5 and 10 unless
 * its `methods` re-prices them), or the error that answers them: `-32601` where the network
 * offers no subscriptions (not EVM, or no upstream serves them) or denies the method
 * (`denyMethods`, "disabled on this gateway"). Decided once per network set.
 */
export function subscriptionMethodPrice(network: NetworkRuntime, method: string): number | GatewayError {
  let decided = decisions.get(network);
  if (decided === undefined) decisions.set(network, (decided = new Map()));
  let decision = decided.get(method);
  if (decision === undefined) {
    const { config } = network;
    if (createDenyRule(config.kind, config)(method) !== undefined) {
      decision = new GatewayError('TG_ERR_METHOD_DISABLED', `the method ${method} is disabled on this gateway`);
    } else if (config.kind !== 'evm' || !config.upstreams.some(servesSubscriptions)) {
      decision = new GatewayError('TG_ERR_METHOD_NOT_FOUND', `the method ${method} does not exist/is not available`);
    } else {
      decision = config.methods[method] ?? DEFAULT_METHOD_COSTS[method] ?? DEFAULT_PASS_THROUGH_COST;
    }
    decided.set(method, decision);
  }
  return decision;
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
