import type { NetworkConfig, NetworkKind, UpstreamConfig } from '../config/schema.js';
import { parseBlockByHashParams, type BlockByHashQuery } from './eth-get-block-by-hash.js';
import { verifyBlock, type BlockVerification } from '../verification/block-verifier.js';
import { parseAssetsByGroupParams, serialiseAssetsByGroupParams } from './get-assets-by-group.js';
import { GatewayError } from '../errors.js';

/**
 * What the gateway knows about each method a network offers: its cost, how its params are
 * validated and normalised (once per request), and how they are sent to a given upstream.
 */

export const DEFAULT_METHOD_COSTS: Readonly<Record<string, number>> = {
  getAssetsByGroup: 160,
  eth_getBlockByHash: 80,
  eth_chainId: 5,
  net_version: 5,
};

/** Cost of an extra pass-through method listed in a network's `methods` without a built-in price. */
export const DEFAULT_PASS_THROUGH_COST = 80;

export type PreparedCall =
  | {
      kind: 'block';
      method: 'eth_getBlockByHash';
      cost: number;
      query: BlockByHashQuery;
      verification: BlockVerification;
      /**
       * Ask upstreams for the full block: the client asked for it, or `verification: full` needs
       * the transactions to check them (the answer is then reduced to hashes).
       */
      fetchHydrated: boolean;
    }
  | { kind: 'assets'; method: 'getAssetsByGroup'; cost: number; query: ReturnType<typeof parseAssetsByGroupParams> }
  | { kind: 'local'; method: string; cost: number; result: unknown }
  | { kind: 'pass-through'; method: string; cost: number; params: unknown };

type Preparer = (params: unknown, cost: number) => PreparedCall;

const BUILT_IN: Record<NetworkKind, Record<string, (network: NetworkConfig) => Preparer>> = {
  evm: {
    eth_getBlockByHash: (network) => (params, cost) => {
      const query = parseBlockByHashParams(params);
      return {
        kind: 'block',
        method: 'eth_getBlockByHash',
        cost,
        query,
        verification: network.verification,
        fetchHydrated: query.hydrated || network.verification === 'full',
      };
    },
    // Answered from config: ethers and viem ask for the chain id before anything else.
    eth_chainId: (network) => {
      const result = `0x${(network.chainId ?? 0).toString(16)}`;
      return (_params, cost) => ({ kind: 'local', method: 'eth_chainId', cost, result });
    },
    net_version: (network) => {
      const result = String(network.chainId ?? 0);
      return (_params, cost) => ({ kind: 'local', method: 'net_version', cost, result });
    },
  },
  asset: {
    getAssetsByGroup: () => (params, cost) => ({
      kind: 'assets',
      method: 'getAssetsByGroup',
      cost,
      query: parseAssetsByGroupParams(params),
    }),
  },
};

function passThrough(method: string): Preparer {
  return (params, cost) => {
    if (params !== undefined && (params === null || typeof params !== 'object')) {
      throw new GatewayError('TG_ERR_INVALID_PARAMS', 'invalid params: expected an array or an object');
    }
    return { kind: 'pass-through', method, cost, params };
  };
}

export interface MethodTable {
  /** Validates params and prices the call; throws `TG_ERR_METHOD_NOT_FOUND` / param errors. */
  prepare(method: string, params: unknown): PreparedCall;
  has(method: string): boolean;
}

/** The methods one network offers, built once per config (re)load. */
export function createMethodTable(network: NetworkConfig): MethodTable {
  const entries = new Map<string, { cost: number; prepare: Preparer }>();
  for (const [method, build] of Object.entries(BUILT_IN[network.kind])) {
    entries.set(method, { cost: network.methods[method] ?? DEFAULT_METHOD_COSTS[method] ?? DEFAULT_PASS_THROUGH_COST, prepare: build(network) });
  }
  for (const [method, cost] of Object.entries(network.methods)) {
    if (!entries.has(method)) entries.set(method, { cost, prepare: passThrough(method) });
  }
  return {
    prepare(method, params) {
      const entry = entries.get(method);
      if (entry === undefined) {
        throw new GatewayError('TG_ERR_METHOD_NOT_FOUND', `the method ${method} does not exist/is not available`);
      }
      return entry.prepare(params, entry.cost);
    },
    has: (method) => entries.has(method),
  };
}

/** The params to send to one upstream for a prepared call. */
export function upstreamParams(call: PreparedCall, upstream: UpstreamConfig): unknown {
  switch (call.kind) {
    case 'block':
      return [call.query.hash, call.fetchHydrated];
    case 'assets':
      return serialiseAssetsByGroupParams(call.query, upstream.params);
    case 'pass-through':
      return call.params;
    case 'local':
      return undefined;
  }
}

/**
 * The check an upstream's result must pass for this call (a block must verify against the hash
 * asked for, DESIGN §5), or undefined when results are passed on unparsed. `null` passes here;
 * whether it is believed is the null-confirmation policy's business.
 */
export function resultCheckOf(call: PreparedCall): ((result: unknown) => Promise<string | undefined> | undefined) | undefined {
  if (call.kind !== 'block') return undefined;
  const { query, verification } = call;
  return (result) => (result === null ? undefined : verifyBlock(result, query.hash, verification));
}
