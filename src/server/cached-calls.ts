import { GatewayError } from '../errors.js';
import type { CachePlan, CacheTier, ChainReader, ResponseCache, ServingFinality } from '../cache/response-cache.js';
import { createSingleFlight } from '../cache/single-flight.js';
import type { PreparedCall } from '../methods/registry.js';
import { headerOf } from '../routing/finality-probe.js';
import type { Caller, ForwardOutcome } from '../routing/forward.js';
import type { NetworkRuntime } from './network-runtime.js';
import type { StepOutcome } from './logs-calls.js';
import { contiguous, type ResultBytes } from '../jsonrpc/result-bytes.js';
import { markShared } from '../jsonrpc/answer-buffers.js';

/**
 * The call executor's way through the response cache for calls other than `eth_getBlockByHash`:
 * the shared tier, then one upstream call that identical calls in flight share, and the answer
 * offered to the cache with the serving upstream's finality. It also reads the chain for the
 * cache's own checks (headers of anchors, verified blocks, a trace's transaction) through the
 * gateway's verified paths.
 */

/** A forwarded call's outcome with the result as bytes to splice (shared by single-flight followers). */
export type Answer =
  /** `block`: the parsed, verified block of an `eth_getBlockByHash` answer. */
  | { kind: 'result'; bytes: string | ResultBytes; upstream: string; attempts: ForwardOutcome['attempts']; block?: unknown }
  /** Answered by the shared tier of the cache, after the reservation was made. */
  | { kind: 'cached'; bytes: Buffer; attempts: [] }
  | Exclude<ForwardOutcome, { kind: 'result' }>;

const NO_FINALITY: ServingFinality = { head: undefined, finalized: undefined };

/** The highest finalized block the probes know on a network: what a `finalized` tag is resolved to. */
export function finalizedOf(network: NetworkRuntime): number | undefined {
  let highest: number | undefined;
  for (const upstream of network.forwarder.upstreams) {
    const finalized = upstream.health.finalized;
    if (finalized !== undefined && (highest === undefined || finalized > highest)) highest = finalized;
  }
  return highest;
}

export function serialised(outcome: ForwardOutcome): Answer {
  if (outcome.kind !== 'result') return outcome;
  return { kind: 'result', bytes: outcome.resultBytes, upstream: outcome.upstream, attempts: outcome.attempts };
}

/** A single-flight follower got `answer` too: a pooled buffer its result lends must never be given back. */
export function shareAnswer(answer: Answer): void {
  if (answer.kind === 'result') markShared(answer.bytes);
}

/** What a single-flight follower gets when its own deadline passes first. */
export function timedOutAnswer(): Answer {
  return { kind: 'failed', error: new GatewayError('TG_ERR_UPSTREAMS_TIMED_OUT', undefined, { attempts: [] }), attempts: [] };
}

export interface CachedCallsDeps {
  cache: ResponseCache;
  now: () => number;
  /** The executor's block path (block cache, single-flight, verification). */
  forwardBlock: (call: PreparedCall, network: NetworkRuntime, deadline: number) => Promise<Answer>;
  onUpstreamCallSaved?: (network: string, method: string, reason: CacheTier | 'coalesced') => void;
}

export interface CachedCalls {
  forward(call: Extract<PreparedCall, { kind: 'pass-through' }>, plan: CachePlan, network: NetworkRuntime, deadline: number, caller: Caller, readCache: boolean): Promise<Answer>;
  /** One step of a split `eth_getLogs` call (a chunk, a tag lookup), through the cache when it is a chunk over numbers. */
  logsStep(step: PreparedCall, network: NetworkRuntime, deadline: number, caller: Caller, readCache: boolean, onPlanned?: () => void): Promise<StepOutcome>;
}

/** Adds what a cache answer saved to the caller's provider spend (networks with priced upstreams only). */
export function addSaved(caller: Caller, network: NetworkRuntime, method: string): void {
  if (caller.spend === undefined) return;
  const saved = network.forwarder.savedBy(method);
  if (saved !== undefined) caller.spend.savedUnits += saved.units;
}

export function createCachedCalls(deps: CachedCallsDeps): CachedCalls {
  const { cache, now } = deps;
  const callFlights = createSingleFlight<Answer>(now, shareAnswer);

  /** The chain as the cache reads it on one network: verified headers and blocks, through the gateway's own paths. */
  function readerOf(network: NetworkRuntime): ChainReader {
    return {
      async header(number) {
        const call = network.methods.prepare('eth_getBlockByNumber', [`0x${number.toString(16)}`, false]);
        return headerOf(await network.forwarder.forward(call, now() + network.config.requestTimeoutMs));
      },
      async block(hash) {
        const cached = cache.blocks.get(network.config.id, hash, true);
        if (cached !== undefined) return JSON.parse(cached.toString('utf8'));
        const call = network.methods.prepare('eth_getBlockByHash', [hash, true]);
        const answer = await deps.forwardBlock(call, network, now() + network.config.requestTimeoutMs);
        return answer.kind === 'result' ? (answer.block ?? JSON.parse(typeof answer.bytes === 'string' ? answer.bytes : contiguous(answer.bytes).toString('utf8'))) : undefined;
      },
      async transaction(hash) {
        const call = network.methods.prepare('eth_getTransactionByHash', [hash]);
        const outcome = await network.forwarder.forward(call, now() + network.config.requestTimeoutMs);
        return outcome.kind === 'result' ? JSON.parse(contiguous(outcome.resultBytes).toString('utf8')) : undefined;
      },
    };
  }

  /** A pass-through call through the response cache: shared tier, then one upstream call shared by identical calls in flight. */
  async function forward(call: Extract<PreparedCall, { kind: 'pass-through' }>, plan: CachePlan, network: NetworkRuntime, deadline: number, caller: Caller, readCache: boolean): Promise<Answer> {
    const sent = plan.params === call.params ? call : { ...call, params: plan.params };
    const run = async (): Promise<Answer> => {
      const outcome = await cache.through(plan, readerOf(network), { memory: false, shared: readCache }, async () => {
        const forwarded = await network.forwarder.forward(sent, deadline, caller);
        const finality = forwarded.kind === 'result' ? network.forwarder.finalityOf(forwarded.upstream) : NO_FINALITY;
        return { answer: serialised(forwarded), bytes: forwarded.kind === 'result' ? forwarded.resultBytes : undefined, finality };
      });
      if ('hit' in outcome) {
        deps.onUpstreamCallSaved?.(network.config.id, plan.method, outcome.tier);
        addSaved(caller, network, plan.method);
        return { kind: 'cached', bytes: outcome.hit, attempts: [] };
      }
      const { answer, bytes } = outcome.fetched;
      return answer.kind === 'result' && bytes !== undefined ? { ...answer, bytes } : answer;
    };
    if (!plan.coalesce) return run();
    let led = false;
    const answer = await callFlights.run(
      readCache ? plan.key : `${plan.key}\u0001fresh`,
      () => {
        led = true;
        return run();
      },
      deadline,
      timedOutAnswer,
    );
    if (!led && answer.kind !== 'failed') {
      deps.onUpstreamCallSaved?.(network.config.id, plan.method, 'coalesced');
      addSaved(caller, network, plan.method);
    }
    return answer;
  }

  /**
   * One step of a logs call. A chunk (`eth_getLogs` over numbers) goes through the response cache on
   * its own: a finalized chunk is answered from it or kept in it, the unfinalized tail is neither
   * (the cache's own rules). Everything else (tag lookups, a pinned `eth_getFilterLogs`) goes to the
   * failsafe chain. Chunks are not coalesced: the splitter already bounds their concurrency.
   */
  async function logsStep(step: PreparedCall, network: NetworkRuntime, deadline: number, caller: Caller, readCache: boolean, onPlanned?: () => void): Promise<StepOutcome> {
    // A chunk is a pass-through call; a `blockHash` call is the client's own `logs` call, pinned by its hash.
    const isLogsCall = (step.kind === 'pass-through' || step.kind === 'logs') && step.method === 'eth_getLogs';
    const plan = isLogsCall ? cache.plan(network.config, step.method, step.params, finalizedOf(network)) : undefined;
    if (plan === undefined) return network.forwarder.forward(step, deadline, caller);
    onPlanned?.();
    const sent = plan.params === (step as { params: unknown }).params ? step : { ...step, params: plan.params };
    const outcome = await cache.through(plan, readerOf(network), { memory: readCache, shared: readCache }, async () => {
      const forwarded = await network.forwarder.forward(sent, deadline, caller);
      const finality = forwarded.kind === 'result' ? network.forwarder.finalityOf(forwarded.upstream) : NO_FINALITY;
      return { answer: forwarded, bytes: forwarded.kind === 'result' ? forwarded.resultBytes : undefined, finality };
    });
    if ('hit' in outcome) {
      deps.onUpstreamCallSaved?.(network.config.id, plan.method, outcome.tier);
      addSaved(caller, network, plan.method);
      return { kind: 'cached', resultBytes: outcome.hit, attempts: [] };
    }
    const { answer, bytes } = outcome.fetched;
    return answer.kind === 'result' && bytes !== undefined ? { ...answer, resultBytes: bytes } : answer;
  }

  return { forward, logsStep };
}
