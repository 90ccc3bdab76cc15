import { GatewayError } from '../errors.js';
import { errorReply, type IdText, type Reply, type RequestItem } from '../jsonrpc/envelope.js';
import { returnLent } from '../jsonrpc/answer-buffers.js';
import { ownedCopy } from '../jsonrpc/result-bytes.js';
import type { PreparedCall } from '../methods/registry.js';
import { dehydrateBlock } from '../cache/block-cache.js';
import type { CachePlan, CacheTier, ResponseCache } from '../cache/response-cache.js';
import { createSingleFlight } from '../cache/single-flight.js';
import { addSaved, createCachedCalls, finalizedOf, serialised, shareAnswer, timedOutAnswer, type Answer } from './cached-calls.js';
import type { LedgerCommit, Meter } from '../metering/meter.js';
import { nextUtcMidnight, utcDay } from '../metering/meter.js';
import type { ProviderSpend } from '../routing/upstream-price.js';
import type { AdmissionResult, ChargeSubject, FinishResult, KeyWithTeam, LedgerRefusal, LedgerResult } from '../store/index.js';
import type { RequestContext } from './context.js';
import type { NetworkRuntime } from './network-runtime.js';
import { runFilterLogsCall, runLogsCall, runLogsRange, type LogsOutcome } from './logs-calls.js';
import { hex, type BlockRange, type LogsQuery } from '../routing/logs-range.js';
import { INTERNAL_CALLER, type Caller } from '../routing/forward.js';

/**
 * One JSON-RPC call, in two steps so that nothing is charged for an answer no one receives:
 *   execute: validate → (cache hit | local answer) or (reserve → forward with failover → refund if it failed)
 *   commit:  the client is still there → charge or settle; it left → refund (logged as 499).
 * Charging rule: answered calls (results, `null`, cache hits, upstream JSON-RPC
 * errors) cost their price; rejected calls, calls every upstream failed and answers that could
 * not be delivered cost nothing. Every failure becomes a reply, an unexpected one (a bug)
 * `-32603` for that call alone; nothing here throws.
 */

/** JSON-RPC "method not found", passed on uncharged when an upstream answers it. */
const METHOD_NOT_FOUND = -32601;
/** Waits before each new try of a settle whose outcome a store error left unknown (see settleAgain). */
const SETTLE_RETRY_DELAYS_MS = [0, 50, 150, 300];

export type CallItem = Extract<RequestItem, { kind: 'call' }>;

/** A call's reply, held until the response is about to be written, with what makes it charged. */
export type PendingReply =
  /** Nothing to charge: rejected, refused, failed, or served uncharged while the store is unreachable (fail open). */
  | { ledger: 'none'; reply: Reply }
  /** Answered without an upstream call (cache hit, local answer): charged at commit. */
  | { ledger: 'charge'; reply: Reply; subject: ChargeSubject }
  /** Forwarded and answered: its reservation is settled at commit, or refunded. */
  | { ledger: 'settle'; reply: Reply; subject: ChargeSubject; reservationId: string };

type ChargePending = Extract<PendingReply, { ledger: 'charge' }>;
type SettlePending = Extract<PendingReply, { ledger: 'settle' }>;

export interface CallExecutor {
  /** Validates, reserves credits and forwards (or answers locally); charges nothing yet. */
  execute(item: CallItem, network: NetworkRuntime, auth: KeyWithTeam, ctx: RequestContext, deadline: number): PendingReply | Promise<PendingReply>;
  /**
   * Makes an answer final just before its response is written: charged (or settled) when it can
   * be delivered, refunded when the client is gone. Returns the reply to send: the answer, or a
   * refusal when the charge was refused, or a store error when it could not be recorded.
   */
  commit(pending: PendingReply, ctx: RequestContext, deliverable: boolean): Reply | Promise<Reply>;
  /**
   * {@link commit} for a batch's items at once (`undefined` for a notification, which has no
   * reply): their charges and settles go to the store together, in item order, and the batch
   * waits on one promise instead of one per item.
   */
  commitAll(pendings: ReadonlyArray<PendingReply | undefined>, ctx: RequestContext, deliverable: boolean): Array<Reply | undefined> | Promise<Array<Reply | undefined>>;
  /**
   * `eth_getLogs` over blocks `range` for the gateway itself (a `logs` subscription's back-fill,
   * docs/websocket.md): the splitter and the forward step of client calls (the response cache,
   * the failsafe chain), over the upstreams that serve `eth_getLogs`, with no key and no charge.
   */
  internalLogs(network: NetworkRuntime, filter: Readonly<Record<string, unknown>>, range: BlockRange, deadline: number): Promise<LogsOutcome>;
}

export interface CallExecutorDeps {
  meter: Meter;
  cache: ResponseCache;
  now: () => number;
  /**
   * When the store cannot be reached: false answers `-32603` (HTTP 503) and charges nothing;
   * true serves the call without charging it.
   */
  failOpen: boolean;
  /**
   * Commits wait for replicas (`store.waitReplicas`): an answer goes out only once its charge is
   * on them, so a settle found applied only on a try after it failed (which may be on a new
   * connection, whose `WAIT` does not cover the first) is not answered.
   */
  commitsWaitForReplicas?: boolean;
  onStoreError?: (error: unknown) => void;
  /** An `eth_getBlockByHash` lookup (the response cache reports the others itself). */
  onCacheLookup?: (network: string, hit: boolean) => void;
  /** A logs call (`eth_getLogs` at a range) finished, with the upstream calls it took. */
  onLogsCall?: (network: string, method: string, upstreamCalls: number) => void;
  /** An upstream call a call did not need: answered from a tier, or shared with an identical call in flight. */
  onUpstreamCallSaved?: (network: string, method: string, reason: CacheTier | 'coalesced') => void;
  /** What a call cost at the providers (networks with priced upstreams only), for its team's usage. */
  onProviderSpend?: (subject: ChargeSubject, spend: ProviderSpend) => void;
  /** Units a cache answer saved its team (networks with priced upstreams only). */
  onProviderSaved?: (subject: ChargeSubject, savedUnits: number) => void;
}

/** A bug met while handling one call: that call's `-32603`, with the error kept as the cause for the log. */
export function internalError(error: unknown): GatewayError {
  return new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, error);
}

/**
 * What one charge is against: the team and key, the method and its cost on the day. Calls a client
 * makes fall under its team's throughput limit; subscription events (paced by the chain, not by
 * the client) do not.
 */
export function chargeSubject(auth: KeyWithTeam, networkId: string, method: string, cost: number, nowMs: number, throughputLimited = true): ChargeSubject {
  return {
    teamId: auth.team.id,
    keyId: auth.key.id,
    network: networkId,
    method,
    cost,
    day: utcDay(nowMs),
    teamDailyCredits: auth.team.dailyCredits,
    keyDailyCap: auth.key.dailyCap,
    teamCreditsPerSecond: throughputLimited ? auth.team.creditsPerSecond : null,
  };
}

function subjectOf(call: PreparedCall, network: NetworkRuntime, auth: KeyWithTeam, nowMs: number): ChargeSubject {
  // Unlisted names are the client's text: counted as `other`, so usage and metric labels stay bounded.
  return chargeSubject(auth, network.config.id, call.unlisted === true ? 'other' : call.method, call.cost, nowMs);
}

/** The error a refused ledger operation becomes (402 or 429 for a single request). */
export function refusal(result: LedgerRefusal, subject: ChargeSubject, nowMs: number): GatewayError {
  if (result.reason === 'rate_limited') {
    return new GatewayError('TG_ERR_RATE_LIMITED', undefined, { reason: 'rate_limited', retryAfterMs: result.retryAfterMs }, {
      'retry-after': String(Math.max(1, Math.ceil(result.retryAfterMs / 1000))),
    });
  }
  const resetsAt = nextUtcMidnight(nowMs);
  const message = result.scope === 'key' ? 'daily credit cap of this API key exhausted' : 'daily credit balance exhausted';
  return new GatewayError(
    'TG_ERR_CREDITS_EXHAUSTED',
    message,
    { reason: 'daily_credits_exhausted', scope: result.scope, limit: result.limit, used: result.used, cost: subject.cost, resetsAt: new Date(resetsAt).toISOString() },
    { 'retry-after': String(Math.max(1, Math.ceil((resetsAt - nowMs) / 1000))) },
  );
}

export function createCallExecutor(deps: CallExecutorDeps): CallExecutor {
  const { meter, cache, now } = deps;
  const blockFlights = createSingleFlight<Answer>(now, shareAnswer);
  const cachedCalls = createCachedCalls({
    cache,
    now,
    forwardBlock: (call, network, deadline) => forward(call, network, deadline, INTERNAL_CALLER),
    onUpstreamCallSaved: deps.onUpstreamCallSaved,
  });

  function recordCharge(ctx: RequestContext, method: string, charged: number, result: LedgerResult): void {
    ctx.creditsCharged += charged;
    if (charged > 0) ctx.charges.push({ method, credits: charged });
    if (!result.ok && result.reason !== 'reservation_gone') ctx.creditRejections.push(result.reason);
    // Ledger results reach a request in the order the store applied them when each is recorded in
    // the first reaction to its operation (as `charge`, `settle` and `refund` do), so the last one
    // is the freshest view of the team's spend; a maximum would keep a batch item's reservation
    // in X-Credits-Remaining after that item was refunded. A reservation already gone tells
    // nothing of it: leave it to the handler's peek at the end of the request.
    ctx.teamUsed = result.ok || result.reason !== 'reservation_gone' ? result.teamUsed : undefined;
  }

  /** A ledger operation, or `undefined` when the store could not be reached. */
  async function ledger<R extends LedgerResult>(operation: Promise<R>): Promise<R | undefined> {
    try {
      return await operation;
    } catch (error) {
      deps.onStoreError?.(error);
      return undefined;
    }
  }

  /** A cache answer's saving, for the caller's usage (networks with priced upstreams only). */
  function recordSaved(network: NetworkRuntime, method: string, subject: ChargeSubject): void {
    const saved = network.forwarder.priced ? network.forwarder.savedBy(method) : undefined;
    if (saved !== undefined) deps.onProviderSaved?.(subject, saved.units);
  }

  const storeUnavailable = (id: IdText): Reply => errorReply(id, new GatewayError('TG_ERR_STORE_UNAVAILABLE'));
  const none = (reply: Reply): PendingReply => ({ ledger: 'none', reply });

  async function forward(call: PreparedCall, network: NetworkRuntime, deadline: number, caller: Caller, plan?: CachePlan, readCache = true): Promise<Answer> {
    if (plan !== undefined && call.kind === 'pass-through') return cachedCalls.forward(call, plan, network, deadline, caller, readCache);
    // The key makes the call: filter ids are bound to it.
    if (call.kind !== 'block') return serialised(await network.forwarder.forward(call, deadline, caller));
    const { hash, hydrated } = call.query;
    // Keyed by the form fetched upstream: with `verification: full` a hydrated and a non-hydrated
    // miss of one block share one upstream call.
    const key = `${network.config.id}|${hash}|${call.fetchHydrated}`;
    const answer = await blockFlights.run(
      key,
      async () => {
        // Another replica (or this process before a restart) may have fetched it.
        const shared = readCache ? await cache.sharedBlock(network.config.id, hash, call.fetchHydrated) : undefined;
        if (shared !== undefined) {
          cache.blocks.set(network.config.id, hash, call.fetchHydrated, shared);
          deps.onUpstreamCallSaved?.(network.config.id, call.method, 'shared');
          addSaved(caller, network, call.method);
          return { kind: 'cached', bytes: shared, attempts: [] };
        }
        // The leader's trace gets the attempts: a follower's request waited on them.
        const outcome = await network.forwarder.forward(call, deadline, caller);
        // Only verified blocks reach this point (the forwarder's result check rejected the rest).
        if (outcome.kind !== 'result' || outcome.result === null) return serialised(outcome);
        // A copy: the bytes may be views into the upstream's network chunks, which the cache must not keep.
        const bytes = ownedCopy(outcome.resultBytes);
        // Every caller is answered from the copy too, so a pooled buffer the parts were lent with
        // goes back now (jsonrpc/answer-buffers.ts): coalesced callers share the copy, and a
        // dehydrated answer never writes the parts at all.
        returnLent(outcome.resultBytes);
        cache.blocks.set(network.config.id, hash, call.fetchHydrated, bytes);
        cache.shareBlock(network.config.id, hash, call.fetchHydrated, bytes);
        return { ...serialised(outcome), bytes, block: outcome.result };
      },
      deadline,
      timedOutAnswer,
    );
    if (hydrated || !call.fetchHydrated) return answer;
    // The full block was fetched to verify it; the client asked for transaction hashes.
    if (answer.kind === 'cached') return { ...answer, bytes: dehydrateBlock(JSON.parse(answer.bytes.toString('utf8'))) ?? answer.bytes };
    if (answer.kind !== 'result' || answer.block === undefined) return answer;
    return { ...answer, bytes: dehydrateBlock(answer.block) ?? answer.bytes };
  }

  /**
   * An `eth_getLogs` call (or an `eth_getFilterLogs` its node declined as too large): split, each
   * chunk through the forward step on its own (logs-calls.ts), merged. The request's log line and
   * the metric get the upstream calls it took.
   */
  async function forwardLogs(call: PreparedCall, network: NetworkRuntime, deadline: number, caller: Caller, ctx: RequestContext): Promise<Answer> {
    let planned = false;
    const forwardChunk = (chunk: PreparedCall) =>
      cachedCalls.logsStep(chunk, network, deadline, caller, !ctx.skipCacheRead, () => {
        planned = true;
      });
    const outcome =
      call.kind === 'logs'
        ? await runLogsCall(call.query, call, network, forwardChunk)
        : await runFilterLogsCall(call, network, (filterId) => network.forwarder.filterCriteria(caller, filterId), forwardChunk);
    ctx.upstreamCalls = (ctx.upstreamCalls ?? 0) + outcome.upstreamCalls;
    deps.onLogsCall?.(network.config.id, call.method, outcome.upstreamCalls);
    // X-Cache of a split call, when the cache knew its chunks: a hit only when it answered every one.
    if (planned) ctx.cache = ctx.skipCacheRead ? 'bypass' : outcome.kind === 'result' && outcome.cachedChunks === outcome.chunkCalls ? 'hit' : 'miss';
    return serialised(outcome);
  }

  async function internalLogs(network: NetworkRuntime, filter: Readonly<Record<string, unknown>>, range: BlockRange, deadline: number): Promise<LogsOutcome> {
    const query: LogsQuery = { filter, from: range.from, to: range.to };
    // Priced at 0: nothing is reserved or charged for it (the events it delivers are).
    const call: PreparedCall = { kind: 'logs', method: 'eth_getLogs', cost: 0, params: [{ ...filter, fromBlock: hex(range.from), toBlock: hex(range.to) }], query };
    const servedBy = network.methods.upstreamsServing('eth_getLogs');
    if (servedBy !== undefined) call.servedBy = servedBy;
    return runLogsRange(query, range, call, network, (chunk) => cachedCalls.logsStep(chunk, network, deadline, INTERNAL_CALLER, true));
  }

  /** Validates and prepares; a cache hit or a local answer is known at once, anything else goes upstream. */
  function execute(item: CallItem, network: NetworkRuntime, auth: KeyWithTeam, ctx: RequestContext, deadline: number): PendingReply | Promise<PendingReply> {
    let call: PreparedCall;
    try {
      // Params over the bounds are only reported for a method this network offers: `-32601` comes first.
      call = network.methods.prepare(item.method, item.params, item.paramsError);
    } catch (error) {
      return none(errorReply(item.id, error instanceof GatewayError ? error : internalError(error)));
    }
    const subject = subjectOf(call, network, auth, now());
    if (call.kind === 'local') return { ledger: 'charge', reply: { id: item.id, result: JSON.stringify(call.result) }, subject };
    if (call.kind === 'block') {
      if (ctx.skipCacheRead) {
        ctx.cache = 'bypass';
      } else {
        const cached = cache.blocks.get(network.config.id, call.query.hash, call.query.hydrated);
        deps.onCacheLookup?.(network.config.id, cached !== undefined);
        ctx.cache = cached === undefined ? 'miss' : 'hit';
        if (cached !== undefined) {
          deps.onUpstreamCallSaved?.(network.config.id, call.method, 'memory');
          recordSaved(network, call.method, subject);
          return { ledger: 'charge', reply: { id: item.id, result: cached }, subject };
        }
      }
    }
    let plan: CachePlan | undefined;
    if (call.kind === 'pass-through') {
      plan = cache.plan(network.config, call.method, call.params, finalizedOf(network));
      if (plan !== undefined) {
        const cached = plan.storable && !ctx.skipCacheRead ? cache.hit(plan) : undefined;
        if (cached !== undefined) {
          ctx.cache = 'hit';
          deps.onUpstreamCallSaved?.(network.config.id, call.method, 'memory');
          recordSaved(network, call.method, subject);
          return { ledger: 'charge', reply: { id: item.id, result: cached }, subject };
        }
        ctx.cache = ctx.skipCacheRead ? 'bypass' : 'miss';
      }
    }
    return forwardAndHold(item, call, network, subject, ctx, deadline, plan);
  }

  /** Gives a reservation back (now, or once the store answers again). */
  function refund(reservationId: string, subject: ChargeSubject, ctx: RequestContext): Promise<void> {
    return meter.refund(reservationId).then(
      (refunded) => recordCharge(ctx, subject.method, 0, refunded),
      (error: unknown) => {
        deps.onStoreError?.(error);
        meter.release(reservationId);
      },
    );
  }

  /** Reserves, forwards, and holds the reservation of an answered call until {@link commit}. */
  async function forwardAndHold(
    item: CallItem,
    call: PreparedCall,
    network: NetworkRuntime,
    subject: ChargeSubject,
    ctx: RequestContext,
    deadline: number,
    plan: CachePlan | undefined,
  ): Promise<PendingReply> {
    const reservationId = meter.newReservationId();
    const reserved = await ledger(meter.reserve(reservationId, subject));
    if (reserved === undefined) {
      // The reserve may have reached the store before the connection failed: give it back later.
      meter.release(reservationId);
      if (!deps.failOpen) return none(storeUnavailable(item.id));
    } else if (!reserved.ok) {
      recordCharge(ctx, subject.method, 0, reserved);
      return none(errorReply(item.id, refusal(reserved, subject, now())));
    }
    let outcome: Answer;
    // What the attempts cost at priced upstreams, recorded however the call ends (providers bill failed attempts too).
    const spend = network.forwarder.priced ? { units: 0, usd: 0, savedUnits: 0 } : undefined;
    try {
      const isLogs = call.kind === 'logs' || call.method === 'eth_getFilterLogs';
      const caller: Caller = { keyId: subject.keyId, trace: ctx.trace, spend };
      outcome = isLogs ? await forwardLogs(call, network, deadline, caller, ctx) : await forward(call, network, deadline, caller, plan, !ctx.skipCacheRead);
    } catch (error) {
      // A bug on the way upstream (params no serialiser can take, say): this call alone fails, its credits go back.
      if (reserved !== undefined) await refund(reservationId, subject, ctx);
      return none(errorReply(item.id, internalError(error)));
    } finally {
      if (spend !== undefined) deps.onProviderSpend?.(subject, spend);
    }
    ctx.attempts.push(...outcome.attempts);
    if (outcome.kind === 'failed') {
      if (reserved !== undefined) await refund(reservationId, subject, ctx);
      return none(errorReply(item.id, outcome.error));
    }
    if (outcome.kind === 'cached') ctx.cache = 'hit';
    else ctx.upstream = outcome.upstream;
    if (outcome.kind === 'rpc-error' && outcome.error.code === METHOD_NOT_FOUND) {
      // The upstream does not know the method: not offered after all, and unknown methods cost nothing.
      if (reserved !== undefined) await refund(reservationId, subject, ctx);
      return none({ id: item.id, error: outcome.error });
    }
    const reply: Reply = outcome.kind === 'rpc-error' ? { id: item.id, error: outcome.error } : { id: item.id, result: outcome.bytes };
    // Failing open with the store unreachable: served, not charged.
    if (reserved === undefined) return none(reply);
    return { ledger: 'settle', reply, subject, reservationId };
  }

  /**
   * Charges an answer known without an upstream call, then returns it. Written with one `then`
   * rather than async layers: this is the cache-hit path, where every promise shows.
   */
  function charge(reply: Reply, subject: ChargeSubject, ctx: RequestContext): Promise<Reply> {
    return meter.charge(subject).then(
      (charged) => chargedReply(reply, subject, ctx, charged, undefined),
      (error: unknown) => chargedReply(reply, subject, ctx, undefined, error),
    );
  }

  /** The reply of a charged answer: itself, a refusal, or (`charged` undefined: the store failed with `error`) a store error. */
  function chargedReply(reply: Reply, subject: ChargeSubject, ctx: RequestContext, charged: AdmissionResult | undefined, error: unknown): Reply {
    if (charged === undefined) {
      deps.onStoreError?.(error);
      return deps.failOpen ? reply : storeUnavailable(reply.id);
    }
    recordCharge(ctx, subject.method, charged.ok ? subject.cost : 0, charged);
    if (!charged.ok) return errorReply(reply.id, refusal(charged, subject, now()));
    (ctx.charged ??= []).push(subject);
    return reply;
  }

  function settle(pending: SettlePending, ctx: RequestContext): Promise<Reply> {
    return meter.settle(pending.reservationId).then(
      (settled) => settledReply(pending, ctx, settled),
      (error: unknown) => settleAgain(pending, ctx, error),
    );
  }

  /**
   * A settle that failed may still have been applied: the store ran it and the reply was lost
   * (the connection was dropped and made again, or the command timed out while the process was
   * not scheduled). Given up there, the refund would find the reservation gone and the call would
   * be charged while its client got a store error. So the settle is sent again before anything is
   * decided: a settle changes nothing the second time, and a reservation gone right after one
   * (far younger than the stale-reservation sweep's age) was settled by it. Failing closed, a
   * few tries over half a second let a connection being made again come up; failing open, the
   * answer goes out either way and one more try is enough. With commits that wait for replicas
   * (failing closed), a reservation found gone is not answered: the first settle may not be on them.
   */
  async function settleAgain(pending: SettlePending, ctx: RequestContext, firstError: unknown): Promise<Reply> {
    deps.onStoreError?.(firstError);
    for (const delayMs of deps.failOpen ? [0] : SETTLE_RETRY_DELAYS_MS) {
      if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
      try {
        const settled = await meter.settle(pending.reservationId);
        if (settled.ok) return settledReply(pending, ctx, settled);
        // Gone: a try whose reply was lost settled it. Waiting for replicas, it is withheld (and
        // charged) as a commit whose WAIT fell short is, unless failing open.
        if (deps.commitsWaitForReplicas !== true || deps.failOpen) return settledEarlier(pending, ctx);
        return storeUnavailable(pending.reply.id);
      } catch (error) {
        deps.onStoreError?.(error);
      }
    }
    // Every try failed, so the first most likely never ran: the answer is not charged and its
    // credits go back; failing closed, it is not sent either.
    meter.release(pending.reservationId);
    return deps.failOpen ? pending.reply : storeUnavailable(pending.reply.id);
  }

  /** The reply of an answer whose first settle was applied though its reply was lost: charged. */
  function settledEarlier(pending: SettlePending, ctx: RequestContext): Reply {
    recordCharge(ctx, pending.subject.method, pending.subject.cost, { ok: false, reason: 'reservation_gone' });
    (ctx.charged ??= []).push(pending.subject);
    return pending.reply;
  }

  /** The reply of a settled answer. */
  function settledReply(pending: SettlePending, ctx: RequestContext, settled: FinishResult): Reply {
    // A reservation already gone was given back by the stale-reservation sweep: the answer
    // goes out uncharged, and its headers and log say so.
    recordCharge(ctx, pending.subject.method, settled.ok ? pending.subject.cost : 0, settled);
    if (settled.ok) (ctx.charged ??= []).push(pending.subject);
    return pending.reply;
  }

  function commit(pending: PendingReply, ctx: RequestContext, deliverable: boolean): Reply | Promise<Reply> {
    switch (pending.ledger) {
      case 'none':
        return pending.reply;
      case 'charge':
        return deliverable ? charge(pending.reply, pending.subject, ctx) : pending.reply;
      case 'settle':
        if (deliverable) return settle(pending, ctx);
        return refund(pending.reservationId, pending.subject, ctx).then(() => pending.reply);
    }
  }

  return {
    execute,
    internalLogs,
    commit,
    commitAll(pendings, ctx, deliverable) {
      // A client gone: nothing is charged, each reservation is refunded on its own.
      if (!deliverable) return Promise.all(pendings.map((pending) => (pending === undefined ? undefined : commit(pending, ctx, false))));
      const replies: Array<Reply | undefined> = [];
      const commits: LedgerCommit[] = [];
      const committed: Array<ChargePending | SettlePending> = [];
      const positions: number[] = [];
      for (const pending of pendings) {
        replies.push(pending?.reply);
        if (pending === undefined || pending.ledger === 'none') continue;
        commits.push(pending.ledger === 'charge' ? { type: 'charge', subject: pending.subject } : { type: 'settle', reservationId: pending.reservationId });
        committed.push(pending);
        positions.push(replies.length - 1);
      }
      if (commits.length === 0) return replies;
      return meter.commitAll(commits).then(({ results, error }) => {
        // Settles that failed are sent again (settleAgain); made only when one did.
        let settlingAgain: Array<Promise<void>> | undefined;
        committed.forEach((pending, index) => {
          const result = results[index];
          const at = positions[index]!;
          if (pending.ledger === 'charge') replies[at] = chargedReply(pending.reply, pending.subject, ctx, result as AdmissionResult | undefined, error);
          else if (result !== undefined) replies[at] = settledReply(pending, ctx, result as FinishResult);
          else (settlingAgain ??= []).push(settleAgain(pending, ctx, error).then((reply) => void (replies[at] = reply)));
        });
        return settlingAgain === undefined ? replies : Promise.all(settlingAgain).then(() => replies);
      });
    },
  };
}
