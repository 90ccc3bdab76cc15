import { errorReply, type Reply, type RequestItem } from '../jsonrpc/envelope.js';
import { methodForLog, type Logger } from '../logging/logger.js';
import { rejected, type ItemRules } from '../auth/key-policy.js';
import type { KeyWithTeam } from '../store/index.js';
import type { GatewayError } from '../errors.js';
import type { AdmissionResult, ChargeSubject, LedgerDone } from '../metering/ledger.js';
import type { Meter } from '../metering/meter.js';
import { internalError, type CallExecutor, type CallItem, type PendingReply } from './call-executor.js';
import { clientGone, type RequestContext } from './context.js';
import type { NetworkRuntime } from './network-runtime.js';

/**
 * The call core both transports share: a parsed body's items, with the caller already admitted
 * on a network (admission.ts), become replies. Per item: key settings (method, address) →
 * validate → (answer locally | forward with failover) → commit (charge, or refund if the client
 * left). The HTTP handler wraps the replies in a response with headers; the WebSocket endpoint
 * sends them as frames. Results a transport makes itself (a subscription's id) and subscription
 * events are charged here too. Pricing, validation, routing, the charging rule and the metric
 * outcome therefore cannot differ between the two.
 */

/** Returned instead of replies when the client left before they could be delivered (all refunded). */
export const CLIENT_LEFT = Symbol('tollgate.clientLeft');

export interface CallDispatcher {
  /**
   * One request object: its reply, `undefined` for a notification (not executed, no reply), or
   * {@link CLIENT_LEFT}.
   */
  answerOne(item: RequestItem, network: NetworkRuntime, auth: KeyWithTeam, ctx: RequestContext, deadline: number, rules: ItemRules | undefined): Promise<Reply | undefined | typeof CLIENT_LEFT>;
  /** A batch: the replies of its answered items in request order (notifications have none), or {@link CLIENT_LEFT}. */
  answerBatch(items: readonly RequestItem[], network: NetworkRuntime, auth: KeyWithTeam, ctx: RequestContext, deadline: number, rules: ItemRules | undefined): Promise<Reply[] | typeof CLIENT_LEFT>;
  /**
   * A result the transport made itself (`eth_subscribe`'s id, `eth_unsubscribe`'s answer): charged
   * against `subject` by the same commit as any answer, and recorded like any call; {@link CLIENT_LEFT}
   * (nothing charged) when the client can no longer be answered.
   */
  answerLocal(item: CallItem, ctx: RequestContext, subject: ChargeSubject, result: unknown): Promise<Reply | typeof CLIENT_LEFT>;
  /** A call the transport refused itself (a rule, its price, its params): the reply, recorded like any call's. */
  refuse(item: CallItem, ctx: RequestContext, error: GatewayError): Reply;
  /**
   * A subscription event's charge, made shortly before it is written (one ledger operation, like
   * a cache hit's), and its give-back when it was not written after all.
   */
  chargeEvent(subject: ChargeSubject): Promise<AdmissionResult>;
  giveBackEvent(subject: ChargeSubject): Promise<LedgerDone>;
}

/** Metrics outcome of one reply: `ok`, `upstream_error` (passed through), or the gateway error's code. */
function outcomeOf(reply: Reply): string {
  if ('result' in reply) return 'ok';
  return reply.gatewayError === undefined ? 'upstream_error' : reply.gatewayError.code.slice('TG_ERR_'.length).toLowerCase();
}

export function createCallDispatcher(deps: { executor: CallExecutor; meter: Pick<Meter, 'charge' | 'reverse'>; logger: Logger }): CallDispatcher {
  const { executor, meter, logger } = deps;

  /** The method label (`other` if not offered) and outcome of one answered call, for metrics. */
  function recordCall(item: RequestItem, reply: Reply, network: NetworkRuntime, ctx: RequestContext): void {
    recordLabelled(item.kind === 'call' && network.methods.has(item.method) ? item.method : 'other', reply, ctx);
  }

  function recordLabelled(method: string, reply: Reply, ctx: RequestContext): void {
    ctx.calls.push({ method, outcome: outcomeOf(reply) });
    if ('error' in reply) ctx.firstError ??= reply.error;
    // A bug met by one call is that call's -32603; the log keeps the error with its stack and cause.
    if ('error' in reply && reply.gatewayError?.code === 'TG_ERR_INTERNAL') {
      logger.error({ err: reply.gatewayError, requestId: ctx.requestId, method: methodForLog(method, method !== 'other') }, 'call failed unexpectedly');
    }
  }

  /** One item's pending reply; an unexpected failure becomes this item's -32603 and never its siblings'. */
  function executeItem(
    item: RequestItem,
    network: NetworkRuntime,
    auth: KeyWithTeam,
    ctx: RequestContext,
    deadline: number,
    rules: ItemRules | undefined,
  ): Promise<PendingReply | undefined> | PendingReply | undefined {
    switch (item.kind) {
      case 'notification':
        return undefined;
      case 'invalid':
        return { ledger: 'none', reply: errorReply(item.id, item.error) };
      case 'call':
        if (rules !== undefined) {
          // Method and address rules refuse the call alone (403 single, per item in a batch), uncharged.
          const rule = rules.check(item.method, item.params);
          if (rule !== undefined) {
            (ctx.ruleRejections ??= []).push(rule);
            return { ledger: 'none', reply: errorReply(item.id, rejected(rule)) };
          }
        }
        try {
          const pending = executor.execute(item, network, auth, ctx, deadline);
          if (!(pending instanceof Promise)) return pending;
          return pending.catch((error: unknown): PendingReply => ({ ledger: 'none', reply: errorReply(item.id, internalError(error)) }));
        } catch (error) {
          return { ledger: 'none', reply: errorReply(item.id, internalError(error)) };
        }
    }
  }

  return {
    async answerOne(item, network, auth, ctx, deadline, rules) {
      if (item.kind !== 'invalid') ctx.methods.push(methodForLog(item.method, network.methods.has(item.method)));
      const pending = executeItem(item, network, auth, ctx, deadline, rules);
      const executed = pending instanceof Promise ? await pending : pending;
      if (executed === undefined) return undefined; // a notification
      // Charged only if it can still be delivered; a client gone by now gets its credits back.
      const deliverable = !clientGone(ctx);
      const committed = executor.commit(executed, ctx, deliverable);
      const reply = committed instanceof Promise ? await committed : committed;
      if (!deliverable) return CLIENT_LEFT;
      recordCall(item, reply, network, ctx);
      return reply;
    },

    async answerBatch(items, network, auth, ctx, deadline, rules) {
      ctx.batchSize = items.length;
      for (const item of items) if (item.kind !== 'invalid') ctx.methods.push(methodForLog(item.method, network.methods.has(item.method)));
      const executing = items.map((item) => executeItem(item, network, auth, ctx, deadline, rules));
      // A batch of cache hits is answered synchronously: no promise per item to wait on.
      const executed = executing.some((pending) => pending instanceof Promise) ? await Promise.all(executing) : (executing as Array<PendingReply | undefined>);
      // Every item is committed at once, just before the one answer that carries them all.
      const deliverable = !clientGone(ctx);
      const committing = executor.commitAll(executed, ctx, deliverable);
      const replies = committing instanceof Promise ? await committing : committing;
      if (!deliverable) return CLIENT_LEFT;
      const answered: Reply[] = [];
      items.forEach((item, index) => {
        const reply = replies[index];
        if (reply === undefined) return;
        answered.push(reply);
        recordCall(item, reply, network, ctx);
      });
      return answered;
    },

    async answerLocal(item, ctx, subject, result) {
      const pending: PendingReply = { ledger: 'charge', reply: { id: item.id, result: JSON.stringify(result) }, subject };
      const deliverable = !clientGone(ctx);
      const reply = await executor.commit(pending, ctx, deliverable);
      if (!deliverable) return CLIENT_LEFT;
      // Methods the transport answers itself are its own (the HTTP method table does not list them).
      recordLabelled(item.method, reply, ctx);
      return reply;
    },

    refuse(item, ctx, error) {
      const reply = errorReply(item.id, error);
      recordLabelled(item.method, reply, ctx);
      return reply;
    },

    chargeEvent: (subject) => meter.charge(subject),
    giveBackEvent: (subject) => meter.reverse(subject),
  };
}
