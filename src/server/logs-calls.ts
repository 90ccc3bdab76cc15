import { GatewayError } from '../errors.js';
import type { PreparedCall } from '../methods/registry.js';
import type { ForwardOutcome } from '../routing/call-outcome.js';
import { chunkParams, isSameTag, parseLogsQuery, resolveRange, type BlockRange, type BlockTag, type LogsQuery } from '../routing/logs-range.js';
import { splitLogsRange, type ChunkRun } from '../routing/logs-splitter.js';
import { isLogsTooLarge, LOGS_TOO_LARGE } from '../routing/policies/logs-too-large.js';
import type { Attempt } from '../routing/policies/types.js';
import type { NetworkRuntime } from './network-runtime.js';
import { contiguous } from '../jsonrpc/result-bytes.js';

/**
 * `eth_getLogs` at any range, between the call executor and its forward step:
 *   tags → numbers (one upstream call per distinct tag, see below) → the network's maxRange →
 *   aligned chunks of the smallest upstream range → each chunk through `forwardChunk` (the
 *   executor's forward step: cache, then the failsafe chain) → bisection → one merged answer.
 * `blockHash` calls, and calls whose two ends are the same tag (`latest`…`latest`: one block at
 * most), go through `forwardChunk` once, as sent.
 *
 * Tags are resolved with one upstream call each, through the same chain: `latest` and `pending`
 * with `eth_blockNumber`, `safe` and `finalized` with `eth_getBlockByNumber(tag, false)`;
 * `earliest` is 0. The health probes' heads are not used: they may be a probe interval old, and a
 * `latest` read from them would leave out the newest blocks' logs.
 */

/** A logs call's outcome, with what it cost upstream. */
export type LogsOutcome = ForwardOutcome & {
  /** Upstream calls the call took: tag resolution, every chunk and bisection (cache hits are 0). */
  upstreamCalls: number;
  /** Chunk calls made (1 for a call that was not split). */
  chunkCalls: number;
  /** Chunk calls the response cache answered. */
  cachedChunks: number;
};

/** What the executor's forward step gives for one call: an upstream's outcome, or the cache's answer. */
export type StepOutcome = ForwardOutcome | { kind: 'cached'; resultBytes: Buffer; attempts: [] };

/** The executor's forward step for one prepared call (the cache for chunks, then the failsafe chain). */
export type ForwardChunk = (call: PreparedCall) => Promise<StepOutcome>;

/** Upstream calls behind one step: its listed failed attempts, and the one that answered (none for the cache). */
export function upstreamCallsOf(outcome: StepOutcome): number {
  return outcome.attempts.length + (outcome.kind === 'failed' || outcome.kind === 'cached' ? 0 : 1);
}

/** A step's outcome as the executor takes it: a cached answer is a result no upstream gave. */
function asForwardOutcome(outcome: StepOutcome): ForwardOutcome {
  return outcome.kind === 'cached' ? { kind: 'result', resultBytes: outcome.resultBytes, upstream: '', attempts: [] } : outcome;
}

/**
 * The width of the chunks of this network's split calls: the smallest `getLogs.maxRange` among
 * the upstreams that serve the call, so any of them can take any chunk on failover and the chunk
 * grid (and so the cache entries) does not depend on which upstream is tried first.
 */
export function chunkSizeOf(network: NetworkRuntime, servedBy: ReadonlySet<string> | undefined): number {
  let size = Infinity;
  for (const upstream of network.config.upstreams) {
    if (servedBy !== undefined && !servedBy.has(upstream.id)) continue;
    if (upstream.getLogs.maxRange !== undefined) size = Math.min(size, upstream.getLogs.maxRange);
  }
  return size;
}

export async function runLogsCall(query: LogsQuery, call: PreparedCall, network: NetworkRuntime, forwardChunk: ForwardChunk): Promise<LogsOutcome> {
  if (query.blockHash !== undefined || isSameTag(query)) {
    const outcome = await forwardChunk(call);
    return { ...asForwardOutcome(outcome), upstreamCalls: upstreamCallsOf(outcome), chunkCalls: 1, cachedChunks: outcome.kind === 'cached' ? 1 : 0 };
  }
  const limits = network.config.getLogs;
  let resolutionCalls = 0;
  const resolutionAttempts: Attempt[] = [];
  const sibling = (method: string, params: unknown[]): PreparedCall => siblingOf(call, method, params);

  async function resolveTag(tag: Exclude<BlockTag, 'earliest'>): Promise<number> {
    const byNumber = tag === 'latest' || tag === 'pending';
    const step = await forwardChunk(byNumber ? sibling('eth_blockNumber', []) : sibling('eth_getBlockByNumber', [tag, false]));
    resolutionCalls += upstreamCallsOf(step);
    resolutionAttempts.push(...step.attempts);
    const outcome = asForwardOutcome(step);
    if (outcome.kind === 'failed') throw new ResolutionFailure({ ...outcome, upstreamCalls: 0, chunkCalls: 0, cachedChunks: 0 });
    if (outcome.kind === 'rpc-error') throw new ResolutionFailure({ ...outcome, upstreamCalls: 0, chunkCalls: 0, cachedChunks: 0 });
    const block = blockNumberOf(contiguous(outcome.resultBytes), byNumber);
    if (block === undefined) {
      const attempts = [{ upstream: outcome.upstream, reason: 'invalid_response', detail: `no block number for the tag ${tag}` }];
      throw new ResolutionFailure({ kind: 'failed', error: new GatewayError('TG_ERR_UPSTREAMS_FAILED', undefined, { attempts }), attempts, upstreamCalls: 0, chunkCalls: 0, cachedChunks: 0 });
    }
    return block;
  }

  let range: BlockRange;
  try {
    range = await resolveRange(query, limits, resolveTag);
  } catch (error) {
    if (error instanceof ResolutionFailure) return { ...error.outcome, upstreamCalls: resolutionCalls };
    // Over the range limit or in the wrong order once resolved: the client's error, uncharged.
    if (error instanceof GatewayError) return { kind: 'failed', error, attempts: resolutionAttempts, upstreamCalls: resolutionCalls, chunkCalls: 0, cachedChunks: 0 };
    throw error;
  }

  const split = await runLogsRange(query, range, call, network, forwardChunk);
  return { ...split, attempts: [...resolutionAttempts, ...split.attempts], upstreamCalls: resolutionCalls + split.upstreamCalls };
}

/**
 * The split part of a logs call, over a range already in numbers: aligned chunks of the smallest
 * upstream range, each through `forwardChunk`, bisection, one merged answer. Also what the
 * gateway's own `eth_getLogs` calls run (a `logs` subscription's back-fill), whose ends are
 * numbers from the start and which are not held to the network's `getLogs.maxRange` (a limit on
 * what clients may ask).
 */
export async function runLogsRange(query: LogsQuery, range: BlockRange, call: PreparedCall, network: NetworkRuntime, forwardChunk: ForwardChunk): Promise<LogsOutcome> {
  let cachedChunks = 0;
  const split = await splitLogsRange(range, { chunkSize: chunkSizeOf(network, call.servedBy), concurrency: network.config.getLogs.concurrency }, async (chunk): Promise<ChunkRun> => {
    const step = await forwardChunk(siblingOf(call, 'eth_getLogs', chunkParams(query, chunk)));
    if (step.kind === 'cached') cachedChunks += 1;
    return { outcome: chunkOutcomeOf(step), upstreamCalls: upstreamCallsOf(step) };
  });
  const counts = { upstreamCalls: split.upstreamCalls, chunkCalls: split.chunkCalls, cachedChunks };
  switch (split.kind) {
    case 'logs':
      return { kind: 'result', resultBytes: split.bytes, upstream: split.upstreams.join(','), attempts: [], ...counts };
    case 'rpc-error':
      return { kind: 'rpc-error', error: split.error, upstream: split.upstream, attempts: [], ...counts };
    case 'failed':
      return { kind: 'failed', error: split.error, attempts: split.attempts, ...counts };
  }
}

/**
 * `eth_getFilterLogs`: asked of the node that holds the filter, as always. When that node declines
 * it as too large and this process knows the filter's criteria (it created the filter), the call
 * is answered as `eth_getLogs` over those criteria by the splitter, from any upstream: a filter's
 * logs are the logs its criteria match, with tags read at the time of the call, as nodes do.
 */
export async function runFilterLogsCall(call: PreparedCall, network: NetworkRuntime, criteriaOf: (filterId: unknown) => unknown, forwardChunk: ForwardChunk): Promise<LogsOutcome> {
  const step = await forwardChunk(call);
  const pinnedCalls = upstreamCallsOf(step);
  const pinned = asForwardOutcome(step);
  const unchanged: LogsOutcome = { ...pinned, upstreamCalls: pinnedCalls, chunkCalls: 1, cachedChunks: 0 };
  if (pinned.kind !== 'failed' || !pinned.attempts.some((attempt) => attempt.reason === LOGS_TOO_LARGE)) return unchanged;
  const params = call.kind === 'pass-through' ? call.params : undefined;
  const criteria = Array.isArray(params) ? criteriaOf(params[0]) : undefined;
  if (criteria === undefined) return unchanged;
  let query: LogsQuery;
  try {
    query = parseLogsQuery([criteria], network.config.getLogs);
  } catch (error) {
    if (error instanceof GatewayError) return { kind: 'failed', error, attempts: pinned.attempts, upstreamCalls: pinnedCalls, chunkCalls: 1, cachedChunks: 0 };
    throw error;
  }
  const asLogs: PreparedCall = { kind: 'logs', method: 'eth_getLogs', cost: call.cost, params: [criteria], query };
  if (call.servedBy !== undefined) asLogs.servedBy = call.servedBy;
  const split = await runLogsCall(query, asLogs, network, forwardChunk);
  return { ...split, upstreamCalls: pinnedCalls + split.upstreamCalls, chunkCalls: 1 + split.chunkCalls };
}

/** An upstream call made for a logs call (a chunk, a tag lookup): its price and the upstreams that serve it. */
function siblingOf(call: PreparedCall, method: string, params: unknown[]): PreparedCall {
  const prepared: PreparedCall = { kind: 'pass-through', method, cost: call.cost, params };
  if (call.servedBy !== undefined) prepared.servedBy = call.servedBy;
  return prepared;
}

class ResolutionFailure {
  constructor(readonly outcome: LogsOutcome) {}
}

/**
 * A chunk's forward outcome as the splitter reads it: declined as too large when some upstream
 * said so (by the attempt policy's reason, or an error passed through with such words) — a
 * smaller range may then be served, even by an upstream that failed otherwise.
 */
function chunkOutcomeOf(outcome: StepOutcome): ChunkRun['outcome'] {
  switch (outcome.kind) {
    case 'cached':
      return { kind: 'logs', bytes: outcome.resultBytes, upstream: undefined };
    case 'result':
      return { kind: 'logs', bytes: contiguous(outcome.resultBytes), upstream: outcome.upstream };
    case 'rpc-error':
      if (isLogsTooLarge(outcome.error.message, outcome.error.data)) return { kind: 'too-large', attempts: outcome.attempts };
      return { kind: 'rpc-error', error: outcome.error, upstream: outcome.upstream };
    case 'failed':
      if (outcome.attempts.some((attempt) => attempt.reason === LOGS_TOO_LARGE)) return { kind: 'too-large', attempts: outcome.attempts };
      return { kind: 'failed', error: outcome.error, attempts: outcome.attempts };
  }
}

/** The block number of an `eth_blockNumber` result, or of the `number` of an `eth_getBlockByNumber` result. */
function blockNumberOf(resultBytes: Buffer, isQuantity: boolean): number | undefined {
  let value: unknown;
  try {
    value = JSON.parse(resultBytes.toString('utf8'));
  } catch {
    return undefined;
  }
  const quantity = isQuantity ? value : value !== null && typeof value === 'object' ? (value as { number?: unknown }).number : undefined;
  if (typeof quantity !== 'string' || !/^0x[0-9a-fA-F]{1,13}$/.test(quantity)) return undefined;
  return Number.parseInt(quantity.slice(2), 16);
}
