import type { GatewayConfig, NetworkConfig } from '../config/schema.js';
import { createMethodTable, type MethodTable } from '../methods/registry.js';
import { createForwarder, type Forwarder, type ForwarderOptions } from '../routing/forward.js';
import { createNetworkResolver, type NetworkResolver } from '../routing/network-resolver.js';

/** A network ready to serve: its methods and prices, and its upstream pools. */
export interface NetworkRuntime {
  config: NetworkConfig;
  methods: MethodTable;
  forwarder: Forwarder;
}

/**
 * Everything built from the `networks` section of one config. A reload builds a new one and
 * swaps it in; requests already running keep the one they started with.
 */
export interface NetworkSet {
  resolver: NetworkResolver<NetworkRuntime>;
  byId: ReadonlyMap<string, NetworkRuntime>;
  close(): Promise<void>;
}

export function buildNetworkSet(config: GatewayConfig, options: ForwarderOptions = {}): NetworkSet {
  const byId = new Map<string, NetworkRuntime>();
  for (const network of config.networks) {
    byId.set(network.id, { config: network, methods: createMethodTable(network), forwarder: createForwarder(network, options) });
  }
  const resolver = createNetworkResolver(
    [...byId.values()].flatMap((runtime) => runtime.config.baseUrls.map((baseUrl) => ({ baseUrl, network: runtime }))),
  );
  return {
    resolver,
    byId,
    close: async () => {
      await Promise.all([...byId.values()].map((runtime) => runtime.forwarder.close()));
    },
  };
}
