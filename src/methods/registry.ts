import type { NetworkConfig, UpstreamConfig } from '../config/schema.js';
import { parseBlockByHashParams, type BlockByHashQuery } from './eth-get-block-by-hash.js';
import { verifyBlock, type BlockVerification } from '../verification/block-verifier.js';
import { parseAssetsByGroupParams, serialiseAssetsByGroupParams } from './get-assets-by-group.js';
import { CATALOGUE, createDenyRule, type NetworkKind } from './catalogue.js';
import { globsMatcher } from './method-globs.js';
import { GatewayError } from '../errors.js';
import { parseLogsQuery, type LogsQuery } from '../routing/logs-range.js';

/**
 * What the gateway knows about each method a network offers: its cost, how its params are
 * validated and normalised (once per request), and how they are sent to a given upstream. The
 * methods and default prices come from the catalogue (./catalogue.ts, docs/methods.md); a few
 * first-class methods have their own preparers here, every other method passes through.
 */

/** Default prices of the catalogue methods of both kinds (a network's `methods` overrides them). */
export const DEFAULT_METHOD_COSTS: Readonly<Record<string, number>> = Object.fromEntries(
  Object.values(CATALOGUE).flatMap((catalogue) => catalogue.groups.flatMap((group) => group.methods.map((method) => [method, group.credits]))),
);

/** Cost of a method that is neither in the catalogue nor configured, unless a network's `methods["*"]` says otherwise. */
export const DEFAULT_PASS_THROUGH_COST = 80;

/**
 * Names an unlisted method may have to be forwarded: what JSON-RPC method names look like. Anything
 * else (spaces, control characters, a megabyte of text) is `-32601` and never reaches an upstream.
 */
const FORWARDABLE_NAME = /^[A-Za-z][A-Za-z0-9_]{0,99}$/;
/** Unlisted method names whose decision is remembered; beyond this the memo starts over. */
const UNLISTED_MEMO_ENTRIES = 1024;

export type PreparedCall = (
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
  /** `eth_getLogs` over a range: checked against the network's limits, split by the logs route. */
  | { kind: 'logs'; method: 'eth_getLogs'; cost: number; params: unknown; query: LogsQuery }
  /** `verification`: set for `eth_getBlockByNumber`, whose answers are checked like every block answer. */
  | { kind: 'pass-through'; method: string; cost: number; params: unknown; verification?: BlockVerification }
) & {
  /**
   * The ids of the upstreams that serve this method, when some of the network's upstreams deny it
   * (`upstreams[].methods.deny`); absent when every upstream serves it. Routing tries no other.
   */
  servedBy?: ReadonlySet<string>;
  /** Neither in the catalogue nor configured: usage and metrics count it as `other` (bounded labels). */
  unlisted?: true;
};

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
    eth_getBlockByNumber: (network) => {
      const forward = passThrough('eth_getBlockByNumber');
      return (params, cost) => ({ ...forward(params, cost), verification: network.verification });
    },
    // Answered from config: ethers and viem ask for the chain id before anything else.
    eth_chainId: (network) => {
      const result = `0x${(network.chainId ?? 0).toString(16)}`;
      return (_params, cost) => ({ kind: 'local', method: 'eth_chainId', cost, result });
    },
    // Limits are checked here, before anything is reserved: a call over them is uncharged.
    eth_getLogs: (network) => (params, cost) => ({ kind: 'logs', method: 'eth_getLogs', cost, params, query: parseLogsQuery(params, network.getLogs) }),
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
  /**
   * Validates params and prices the call; throws `TG_ERR_METHOD_NOT_FOUND` / `TG_ERR_METHOD_DISABLED`
   * for a method this network does not serve, then `paramsError` (params over the envelope's
   * bounds) if given, then the method's own param errors.
   */
  prepare(method: string, params: unknown, paramsError?: GatewayError): PreparedCall;
  /**
   * Whether the method is one this network knows by name (its catalogue, its config): such
   * names are used as metric labels and logged as they are; every other name is `other`.
   */
  has(method: string): boolean;
  /**
   * The upstreams that may be sent `method` (their `methods.deny` does not match it): undefined
   * for every one. For the gateway's own calls, which no client makes: whether clients may call
   * the method is not asked.
   */
  upstreamsServing(method: string): ReadonlySet<string> | undefined;
}

/** A method's decision on one network: served at a price, or refused with an error. */
type Entry =
  | { served: true; cost: number; prepare: Preparer; servedBy: ReadonlySet<string> | undefined; unlisted: boolean }
  | { served: false; code: 'TG_ERR_METHOD_NOT_FOUND' | 'TG_ERR_METHOD_DISABLED' };

const NOT_FOUND: Entry = Object.freeze({ served: false, code: 'TG_ERR_METHOD_NOT_FOUND' });
const DISABLED: Entry = Object.freeze({ served: false, code: 'TG_ERR_METHOD_DISABLED' });

function refusal(method: string, code: 'TG_ERR_METHOD_NOT_FOUND' | 'TG_ERR_METHOD_DISABLED'): GatewayError {
  return new GatewayError(
    code,
    code === 'TG_ERR_METHOD_DISABLED' ? `the method ${method} is disabled on this gateway` : `the method ${method} does not exist/is not available`,
  );
}

/**
 * The methods one network offers, built once per config (re)load: every catalogue and configured
 * method is decided here (price, denial, which upstreams serve it), so a call costs one Map
 * lookup. Unlisted names are decided on first sight and remembered in a bounded memo.
 */
export function createMethodTable(network: NetworkConfig): MethodTable {
  const catalogue = CATALOGUE[network.kind];
  const deniedBy = createDenyRule(network.kind, network);
  const upstreamDenies = network.upstreams.map((upstream) => ({ id: upstream.id, denies: globsMatcher(upstream.methods.deny) }));
  const unlistedCost = network.methods['*'] ?? catalogue.unlistedCredits;

  /** Undefined: every upstream serves it; an empty set: none does. */
  function servedBy(method: string): ReadonlySet<string> | undefined {
    const serving = upstreamDenies.filter((upstream) => upstream.denies?.(method) !== true);
    return serving.length === upstreamDenies.length ? undefined : new Set(serving.map((upstream) => upstream.id));
  }

  function decide(method: string, cost: number, prepare: Preparer, unlisted: boolean): Entry {
    if (deniedBy(method) !== undefined) return DISABLED;
    const serving = servedBy(method);
    if (serving !== undefined && serving.size === 0) return NOT_FOUND;
    return { served: true, cost, prepare, servedBy: serving, unlisted };
  }

  const builtIn = BUILT_IN[network.kind];
  const entries = new Map<string, Entry>();
  for (const group of catalogue.groups) {
    for (const method of group.methods) {
      if (group.webSocketOnly) {
        entries.set(method, NOT_FOUND);
        continue;
      }
      const local = builtIn[method];
      const prepare = local === undefined ? passThrough(method) : local(network);
      const cost = network.methods[method] ?? group.credits;
      // Answered by the gateway itself: no upstream needs to serve it.
      const answeredLocally = method === 'eth_chainId' || method === 'net_version';
      if (answeredLocally && deniedBy(method) === undefined) entries.set(method, { served: true, cost, prepare, servedBy: undefined, unlisted: false });
      else entries.set(method, decide(method, cost, prepare, false));
    }
  }
  for (const [method, cost] of Object.entries(network.methods)) {
    if (method !== '*' && !entries.has(method)) entries.set(method, decide(method, cost, passThrough(method), false));
  }
  // The concrete names of the default deny list are known names too (labelled, and refused at once).
  for (const group of catalogue.denied) {
    for (const pattern of group.patterns) {
      if (!pattern.includes('*') && !entries.has(pattern)) entries.set(pattern, deniedBy(pattern) === undefined ? decide(pattern, unlistedCost, passThrough(pattern), false) : DISABLED);
    }
  }

  const unlisted = new Map<string, Entry>();
  function decideUnlisted(method: string): Entry {
    if (!FORWARDABLE_NAME.test(method)) return NOT_FOUND;
    let entry = unlisted.get(method);
    if (entry === undefined) {
      if (unlisted.size >= UNLISTED_MEMO_ENTRIES) unlisted.clear();
      entry = decide(method, unlistedCost, passThrough(method), true);
      unlisted.set(method, entry);
    }
    return entry;
  }

  return {
    prepare(method, params, paramsError) {
      const entry = entries.get(method) ?? decideUnlisted(method);
      if (!entry.served) throw refusal(method, entry.code);
      if (paramsError !== undefined) throw paramsError;
      const call = entry.prepare(params, entry.cost);
      if (entry.servedBy !== undefined) call.servedBy = entry.servedBy;
      if (entry.unlisted) call.unlisted = true;
      return call;
    },
    has: (method) => entries.has(method),
    upstreamsServing: servedBy,
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
    case 'logs':
      return call.params;
    case 'local':
      return undefined;
  }
}

/**
 * The check an upstream's result must pass for this call (a block must verify against the hash
 * asked for, docs/verification.md), or undefined when results are passed on unparsed. `null` passes
 * here; whether it is believed is the null-confirmation policy's business.
 */
export function resultCheckOf(call: PreparedCall): ((result: unknown) => Promise<string | undefined> | undefined) | undefined {
  if (call.kind === 'pass-through' && call.verification !== undefined && call.verification !== 'off') return blockByNumberCheck(call.params);
  if (call.kind !== 'block') return undefined;
  const { query, verification } = call;
  return (result) => (result === null ? undefined : verifyBlock(result, query.hash, verification));
}

/**
 * An `eth_getBlockByNumber` answer: its header must hash to its own `hash` field (the body is
 * checked by hash elsewhere), and it must be the block of the number asked for.
 */
function blockByNumberCheck(params: unknown): (result: unknown) => Promise<string | undefined> | undefined {
  const asked = Array.isArray(params) && typeof params[0] === 'string' && /^0x[0-9a-fA-F]{1,13}$/.test(params[0]) ? Number.parseInt(params[0].slice(2), 16) : undefined;
  return (result) => {
    if (result === null) return undefined;
    const { hash, number } = (result ?? {}) as { hash?: unknown; number?: unknown };
    if (typeof hash !== 'string') return Promise.resolve('block without a hash');
    if (asked !== undefined && (typeof number !== 'string' || Number.parseInt(number.slice(2), 16) !== asked)) return Promise.resolve('block number mismatch');
    return verifyBlock(result, hash.toLowerCase(), 'header');
  };
}
