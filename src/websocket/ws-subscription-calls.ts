import { randomBytes } from 'node:crypto';
import { GatewayError } from '../errors.js';
import type { Reply, RequestItem } from '../jsonrpc/envelope.js';
import { rejected, type ItemRules } from '../auth/key-policy.js';
import { methodForLog } from '../logging/logger.js';
import type { KeyWithTeam } from '../store/index.js';
import { CLIENT_LEFT, type CallDispatcher } from '../server/call-dispatch.js';
import { chargeSubject, type CallItem } from '../server/call-executor.js';
import type { RequestContext } from '../server/context.js';
import type { NetworkRuntime } from '../server/network-runtime.js';
import type { HubEvent, SubscriptionHub } from './subscription-types.js';
import type { ClientSubscription } from './event-delivery.js';
import { parseSubscribeParams, subscriptionMethodPrice, SUBSCRIPTION_METHODS } from './subscribe-params.js';
import type { Connection, WebSocketObserver } from './ws-connection.js';

/**
 * `eth_subscribe` and `eth_unsubscribe`, the two calls only a WebSocket connection answers. They
 * go through the key's method rule, are priced by the catalogue, and their answers are charged
 * and recorded by the call core like any call's; only what they do (hook a subscription in the
 * hub, remove one) is here. A batch mixing them with other calls is answered in request order.
 */

export interface SubscriptionCallsDeps {
  calls: CallDispatcher;
  hub: SubscriptionHub;
  /** Hands one hub event for a client subscription to event delivery. */
  deliver(connection: Connection, subscription: ClientSubscription, event: HubEvent): void;
  observe: Pick<WebSocketObserver, 'subscriptions'>;
  maxSubscriptionsPerConnection: number;
  now: () => number;
}

export interface SubscriptionCalls {
  /** Answers one call: a subscription call here, any other by the call core. */
  answerOne(connection: Connection, item: RequestItem, network: NetworkRuntime, auth: KeyWithTeam, ctx: RequestContext, deadline: number, rules: ItemRules | undefined): Promise<Reply | undefined | typeof CLIENT_LEFT>;
  /** A batch: subscription calls answered here, every other item by the call core, replies in request order. */
  answerBatch(connection: Connection, items: RequestItem[], network: NetworkRuntime, auth: KeyWithTeam, ctx: RequestContext, deadline: number, rules: ItemRules | undefined): Promise<Reply[] | typeof CLIENT_LEFT>;
  /** After a message's answer is written: the subscriptions it confirmed start taking events. */
  arm(ctx: RequestContext): void;
}

function isSubscriptionCall(item: RequestItem): item is CallItem {
  return item.kind === 'call' && SUBSCRIPTION_METHODS.has(item.method);
}

export function createSubscriptionCalls(deps: SubscriptionCallsDeps): SubscriptionCalls {
  const { calls, hub, observe } = deps;
  /** Subscriptions confirmed by a message's answer, armed once that answer is written. */
  const confirmedBy = new WeakMap<RequestContext, ClientSubscription[]>();

  async function answer(connection: Connection, item: CallItem, network: NetworkRuntime, auth: KeyWithTeam, ctx: RequestContext, rules: ItemRules | undefined): Promise<Reply | typeof CLIENT_LEFT> {
    ctx.methods.push(methodForLog(item.method, true));
    // The key's method rule applies to subscriptions as to any call (a key limited to eth_call cannot subscribe).
    const rule = rules?.check(item.method, item.params);
    if (rule !== undefined) {
      (ctx.ruleRejections ??= []).push(rule);
      return calls.refuse(item, ctx, rejected(rule));
    }
    const cost = subscriptionMethodPrice(network, item.method);
    if (cost instanceof GatewayError) return calls.refuse(item, ctx, cost);
    if (item.paramsError !== undefined) return calls.refuse(item, ctx, item.paramsError);
    const subject = chargeSubject(auth, connection.networkId, item.method, cost, deps.now());

    if (item.method === 'eth_unsubscribe') {
      const id = Array.isArray(item.params) ? item.params[0] : undefined;
      if (typeof id !== 'string') return calls.refuse(item, ctx, new GatewayError('TG_ERR_INVALID_PARAMS', 'invalid argument 0: expected a subscription id'));
      const subscription = connection.subscriptions.get(id);
      const reply = await calls.answerLocal(item, ctx, subject, subscription !== undefined);
      // Removed once the answer is charged: a refused unsubscribe leaves the subscription as it was.
      if (subscription !== undefined && reply !== CLIENT_LEFT && 'result' in reply && connection.subscriptions.delete(id)) {
        subscription.unhook();
        observe.subscriptions(connection.networkId, subscription.kind, -1);
      }
      return reply;
    }

    let request: ReturnType<typeof parseSubscribeParams>;
    try {
      request = parseSubscribeParams(network, item.params);
    } catch (error) {
      return calls.refuse(item, ctx, error as GatewayError);
    }
    // Subscriptions still being charged hold their place: two at once cannot both take the last one.
    const limit = deps.maxSubscriptionsPerConnection;
    if (connection.subscriptions.size + connection.subscribing >= limit) {
      return calls.refuse(item, ctx, new GatewayError('TG_ERR_WS_SUBSCRIPTION_LIMIT', undefined, { reason: 'subscription_limit', limit }));
    }
    const id = `0x${randomBytes(16).toString('hex')}`;
    const subscription: ClientSubscription = {
      id,
      kind: request.kind,
      price: network.config.subscriptions.eventCredits[request.kind],
      unhook: () => undefined,
      chargedBlocks: new Set(),
      prefix: Buffer.from(`{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"${id}","result":`),
      armed: false,
    };
    connection.subscribing += 1;
    let reply: Reply | typeof CLIENT_LEFT;
    try {
      // Confirmed only once its events are assured from then on: the upstream subscription (or an
      // identical shared one) exists. Hooked first, so the hub holds the subscription meanwhile.
      const hooked = hub.subscribe(connection.networkId, request.kind, request.upstreamParams, (event) => deps.deliver(connection, subscription, event));
      subscription.unhook = hooked.unsubscribe;
      try {
        await hooked.ready;
      } catch (error) {
        hooked.unsubscribe();
        return calls.refuse(item, ctx, error instanceof GatewayError ? error : new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, error));
      }
      reply = await calls.answerLocal(item, ctx, subject, id);
    } finally {
      connection.subscribing -= 1;
    }
    if (reply === CLIENT_LEFT || !('result' in reply) || connection.closing) {
      subscription.unhook();
      return reply;
    }
    connection.subscriptions.set(id, subscription);
    observe.subscriptions(connection.networkId, request.kind, 1);
    // Armed as the answer is written (`arm`): the client knows the id before its first event.
    const confirmed = confirmedBy.get(ctx);
    if (confirmed === undefined) confirmedBy.set(ctx, [subscription]);
    else confirmed.push(subscription);
    return reply;
  }

  return {
    answerOne(connection, item, network, auth, ctx, deadline, rules) {
      if (isSubscriptionCall(item)) return answer(connection, item, network, auth, ctx, rules);
      return calls.answerOne(item, network, auth, ctx, deadline, rules);
    },

    async answerBatch(connection, items, network, auth, ctx, deadline, rules) {
      const others = items.filter((item) => !isSubscriptionCall(item));
      if (others.length === items.length) return calls.answerBatch(items, network, auth, ctx, deadline, rules);
      const answered = others.length > 0 ? await calls.answerBatch(others, network, auth, ctx, deadline, rules) : [];
      if (answered === CLIENT_LEFT) return CLIENT_LEFT;
      ctx.batchSize = items.length;
      // The call core answers its items in order, skipping notifications; merge by position.
      const replies: Reply[] = [];
      let next = 0;
      for (const item of items) {
        if (isSubscriptionCall(item)) {
          const reply = await answer(connection, item, network, auth, ctx, rules);
          if (reply === CLIENT_LEFT) return CLIENT_LEFT;
          replies.push(reply);
        } else if (item.kind !== 'notification') {
          replies.push(answered[next++]!);
        }
      }
      return replies;
    },

    arm(ctx) {
      const confirmed = confirmedBy.get(ctx);
      if (confirmed === undefined) return;
      confirmedBy.delete(ctx);
      for (const subscription of confirmed) subscription.armed = true;
    },
  };
}
