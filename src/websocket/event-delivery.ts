import type { Socket } from 'node:net';
import type { WebSocket } from './ws-library.js';
import type { AdmissionResult, ChargeSubject } from '../metering/ledger.js';
import type { CallDispatcher } from '../server/call-dispatch.js';
import type { KeyWithTeam } from '../store/index.js';
import type { HubEvent, SubscriptionKind } from './subscription-types.js';
import { createEventOutbox, createQueueBudget, type EventOutbox, type OverflowScope } from './event-outbox.js';

/**
 * Subscription events from the hub to one client connection: each is queued in the connection's
 * bounded outbox (event-outbox.ts), charged shortly before its turn (one ledger operation, like a
 * cache hit's: no reservation to settle), written in order, and its charge given back if it is
 * not written. Only events a client subscription was armed for are taken: a subscription is armed
 * as its `eth_subscribe` answer is written.
 */

/** Logs of one block already charged, remembered per client subscription. */
const CHARGED_BLOCKS_REMEMBERED = 512;

/** The end of every notification, after its result. */
const NOTIFICATION_END = Buffer.from('}}');

/**
 * Each event's JSON as bytes, made once for all its subscribers: a frame is then one copy of
 * bytes (prefix, result, end) into pooled memory, not a new string per subscriber.
 */
const eventBytes = new WeakMap<HubEvent, Buffer>();
function bytesOf(event: HubEvent): Buffer {
  let bytes = eventBytes.get(event);
  if (bytes === undefined) eventBytes.set(event, (bytes = Buffer.from(event.json)));
  return bytes;
}

export interface ClientSubscription {
  id: string;
  kind: SubscriptionKind;
  price: number;
  unhook: () => void;
  /** Logs: blocks whose events this subscription already paid for. */
  chargedBlocks: Set<string>;
  /** The notification's bytes up to its result. */
  prefix: Buffer;
  /**
   * Set as the `eth_subscribe` answer is written: events the hub hands over before that are not
   * the client's (they precede its confirmation), so its first event always follows the answer.
   */
  armed: boolean;
}

/** One event waiting in a connection's outbox; it is charged as its turn nears (unless it is free). */
export interface QueuedEvent {
  subscription: ClientSubscription;
  event: HubEvent;
  bytes: number;
  price: number;
  /** What the charge was asked for (the connection's shared subject of that day): a give-back reverses exactly it. */
  subject: ChargeSubject | undefined;
  charged: Promise<AdmissionResult> | undefined;
}

/** What delivery reads and counts on a connection. */
export interface DeliveryConnection {
  readonly id: string;
  readonly networkId: string;
  readonly auth: KeyWithTeam;
  readonly ws: WebSocket;
  readonly closing: boolean;
  /** Why it is closing, if it is. */
  readonly reason: string | undefined;
  outbox: EventOutbox<QueuedEvent>;
  events: number;
  eventCredits: number;
}

export interface DeliveryObserver {
  delivered(network: string, kind: SubscriptionKind): void;
  /** An event not sent to a subscriber: `closed`, `credits_exhausted`, `slow_client`, `store_error`. */
  dropped(network: string, kind: SubscriptionKind, reason: string): void;
  /** Credits charged for delivered events. */
  eventCredits(network: string, kind: SubscriptionKind, team: string, credits: number): void;
}

export interface EventDeliveryDeps<C extends DeliveryConnection> {
  limits: { maxQueuedEvents: number; maxBufferedBytes: number; maxProcessQueuedEvents: number; maxProcessQueuedBytes: number };
  /** Events are charged, and given back, by the call core, like the calls of the same connection. */
  charges: Pick<CallDispatcher, 'chargeEvent' | 'giveBackEvent'>;
  observe: DeliveryObserver;
  /** The charge of one event of this price (no throughput limit: events are paced by the chain). */
  subject(connection: C, price: number): ChargeSubject;
  /** Writes a frame unless the connection is closing. */
  send(connection: C, frame: string | Buffer): boolean;
  /** The team cannot pay for an event: the connection gets the refusal and is closed (4402). */
  refused(connection: C, result: Exclude<AdmissionResult, { ok: true }>, subject: ChargeSubject): void;
  /** A queue bound was passed: the connection is closed with 1013 (its queue is already dropped). */
  overflowed(connection: C, scope: OverflowScope, events: number, bytes: number): void;
  /** The charge of an event that was not written could not be given back (the store failed). */
  giveBackFailed(connection: C, error: unknown): void;
}

export interface EventDelivery<C extends DeliveryConnection> {
  /** The outbox of a new connection. */
  outbox(connection: C, socket: Socket): EventOutbox<QueuedEvent>;
  /** An event from the hub for one client subscription. */
  deliver(connection: C, subscription: ClientSubscription, event: HubEvent): void;
  /** Events and bytes waiting in every connection's outbox. */
  queued(): { events: number; bytes: number };
}

export function createEventDelivery<C extends DeliveryConnection>(deps: EventDeliveryDeps<C>): EventDelivery<C> {
  const { charges, observe, limits } = deps;
  const budget = createQueueBudget({ maxEvents: limits.maxProcessQueuedEvents, maxBytes: limits.maxProcessQueuedBytes });

  /** Why an event for a closing connection was not sent: the metric's few reasons. */
  function dropReason(connection: C): string {
    return connection.reason === 'slow_client' || connection.reason === 'credits_exhausted' ? connection.reason : 'closed';
  }

  /** A logs event that will not be paid for: the next of its block pays for the block. */
  function unchargeBlock(item: QueuedEvent): void {
    if (item.subscription.kind === 'logs' && item.price > 0 && item.event.blockHash !== undefined) item.subscription.chargedBlocks.delete(item.event.blockHash);
  }

  /** Gives back the charge of an event that was charged but not written. */
  function giveBack(connection: C, item: QueuedEvent): void {
    charges.giveBackEvent(item.subject!).catch((error: unknown) => deps.giveBackFailed(connection, error));
  }

  /** An event at the head of the queue: waits for its charge, writes it, or gives the charge back. */
  async function send(connection: C, item: QueuedEvent): Promise<void> {
    const network = connection.networkId;
    const { subscription } = item;
    const result = bytesOf(item.event);
    const frame = Buffer.concat([subscription.prefix, result, NOTIFICATION_END], subscription.prefix.length + result.length + NOTIFICATION_END.length);
    if (item.price === 0) {
      if (deps.send(connection, frame)) observe.delivered(network, subscription.kind);
      else observe.dropped(network, subscription.kind, dropReason(connection));
      return;
    }
    // The outbox asked for the charge before the event's turn (never sent uncharged).
    let admission: AdmissionResult;
    try {
      admission = await item.charged!;
    } catch {
      // The store is unreachable: the event cannot be charged, so it is not sent.
      unchargeBlock(item);
      return observe.dropped(network, subscription.kind, 'store_error');
    }
    if (!admission.ok) {
      unchargeBlock(item);
      observe.dropped(network, subscription.kind, 'credits_exhausted');
      if (!connection.closing) deps.refused(connection, admission, item.subject!);
      return;
    }
    if (!deps.send(connection, frame)) {
      observe.dropped(network, subscription.kind, dropReason(connection));
      giveBack(connection, item);
      return;
    }
    observe.delivered(network, subscription.kind);
    connection.events += 1;
    connection.eventCredits += item.price;
    observe.eventCredits(network, subscription.kind, connection.auth.team.id, item.price);
  }

  /** An event that will never be sent (its connection is closing): uncharged, its charge given back. */
  function drop(connection: C, item: QueuedEvent): void {
    observe.dropped(connection.networkId, item.subscription.kind, dropReason(connection));
    const { charged } = item;
    if (charged === undefined) return;
    charged.then(
      (result) => {
        if (result.ok) giveBack(connection, item);
      },
      () => undefined,
    );
  }

  return {
    outbox(connection, socket) {
      return createEventOutbox<QueuedEvent>({
        maxEvents: limits.maxQueuedEvents,
        maxBytes: limits.maxBufferedBytes,
        budget,
        unsent: () => connection.ws.bufferedAmount,
        drained: () =>
          new Promise<void>((resolve) => {
            if (socket.destroyed || socket.writableLength === 0) return resolve();
            const done = () => {
              socket.off('drain', done);
              socket.off('close', done);
              resolve();
            };
            socket.on('drain', done);
            socket.on('close', done);
          }),
        charge(item) {
          if (item.price === 0) return;
          item.subject = deps.subject(connection, item.price);
          item.charged = charges.chargeEvent(item.subject);
        },
        send: (item) => send(connection, item),
        drop: (item) => drop(connection, item),
        overflow: (scope, events, bytes) => deps.overflowed(connection, scope, events, bytes),
      });
    },
    deliver(connection, subscription, event) {
      if (!subscription.armed) return;
      if (connection.closing) return observe.dropped(connection.networkId, subscription.kind, dropReason(connection));
      let price = subscription.price;
      if (subscription.kind === 'logs' && event.blockHash !== undefined) {
        // One block's logs are one event to pay for, however many of them match.
        if (subscription.chargedBlocks.has(event.blockHash)) price = 0;
        else {
          subscription.chargedBlocks.add(event.blockHash);
          if (subscription.chargedBlocks.size > CHARGED_BLOCKS_REMEMBERED) subscription.chargedBlocks.delete(subscription.chargedBlocks.values().next().value!);
        }
      }
      connection.outbox.push({ subscription, event, bytes: subscription.prefix.length + event.bytes + 2, price, subject: undefined, charged: undefined });
    },
    queued: () => ({ events: budget.events, bytes: budget.bytes }),
  };
}
