import type { Socket } from 'node:net';
import { WebSocket } from './ws-library.js';
import type { Logger } from '../logging/logger.js';
import type { ChargeSubject, KeyWithTeam } from '../store/index.js';
import type { RequestFacts } from '../auth/key-policy.js';
import type { SubscriptionKind } from './subscription-types.js';
import type { EventOutbox } from './event-outbox.js';
import { createEventDelivery, type ClientSubscription, type DeliveryObserver, type EventDelivery, type EventDeliveryDeps, type QueuedEvent } from './event-delivery.js';
import { toJsonRpcError } from '../errors.js';
import type { CallDispatcher } from '../server/call-dispatch.js';
import { chargeSubject, refusal } from '../server/call-executor.js';
import { utcDay } from '../metering/meter.js';

/**
 * One client's WebSocket connection as the endpoint keeps it, and what is done to it whatever
 * the message or event: write a frame (bounded by what the client has not read), close it with
 * a code and a reason, and keep it alive (ping, pong, the key checked again).
 */

/** Close reasons, the `reason` label of the disconnect metric (a fixed set). */
export type DisconnectReason =
  | 'client'
  | 'credits_exhausted'
  | 'slow_client'
  | 'pong_timeout'
  | 'message_too_large'
  | 'key_invalid'
  | 'network_removed'
  | 'shutdown'
  | 'error';

export interface WebSocketObserver extends DeliveryObserver {
  connections(network: string, delta: number): void;
  subscriptions(network: string, kind: SubscriptionKind, delta: number): void;
  disconnected(reason: DisconnectReason): void;
  /** Upgrades refused, by HTTP status. */
  rejected(status: number): void;
}

/** Close codes: ours are in the private range 4000-4999 (402: payment required, as HTTP). */
export const CLOSE_CREDITS_EXHAUSTED = 4402;
export const CLOSE_TRY_AGAIN_LATER = 1013;
export const CLOSE_POLICY = 1008;
export const CLOSE_GOING_AWAY = 1001;
export const CLOSE_SERVICE_RESTART = 1012;

export interface Connection {
  id: string;
  ws: WebSocket;
  socket: Socket;
  /**
   * True once the connection is closed or closing (a close frame is queued): a message's answer
   * can no longer be sent, so the call core refunds it, as it does for an HTTP client that left.
   */
  left: () => boolean;
  /** The key as it came in the path: every message is authenticated again (revocations apply). */
  apiKey: string;
  auth: KeyWithTeam;
  /** What the key settings look at, as the upgrade request carried it: every message is admitted again. */
  facts: RequestFacts;
  networkId: string;
  openedAt: number;
  subscriptions: Map<string, ClientSubscription>;
  /** Its socket is corked until the end of this turn ({@link corkForThisTurn}). */
  corked: boolean;
  /** `eth_subscribe` calls being charged (they count against the subscription bound). */
  subscribing: number;
  /** Messages being answered. */
  inFlight: number;
  /** Events wait here for their charges and for the client to read, so they go out in order, bounded. */
  outbox: EventOutbox<QueuedEvent>;
  closing: boolean;
  reason: DisconnectReason | undefined;
  lastPingAt: number;
  awaitingPong: boolean;
  messages: number;
  events: number;
  eventCredits: number;
  /** The charge subject of its last event, and the key state it was made from. */
  eventSubject?: ChargeSubject;
  eventSubjectAuth?: KeyWithTeam;
}

/** Every frame the gateway writes is text (JSON); one options object for all of them. */
const TEXT_FRAME = { binary: false } as const;

/** Ends {@link corkForThisTurn}'s hold: the turn's frames go out in one write. */
function uncork(connection: Connection): void {
  connection.corked = false;
  connection.socket.uncork();
}

/**
 * Holds the connection's writes until the current turn's callbacks and promise continuations
 * have run: the frames one ledger batch released for it (events, answers) leave in one write
 * instead of one write request each, which under bursts of heads is most of the per-event
 * allocation outside the frame itself.
 */
function corkForThisTurn(connection: Connection): void {
  if (connection.corked) return;
  connection.corked = true;
  connection.socket.cork();
  process.nextTick(uncork, connection);
}

export function closeConnection(connection: Connection, code: number, reason: DisconnectReason, text: string): void {
  if (connection.closing) return;
  connection.closing = true;
  connection.reason ??= reason;
  // Nothing queued will be sent: the waiting events give their charges back now.
  connection.outbox.close();
  connection.ws.close(code, text);
  // A client that reads nothing never answers the close: ws destroys the socket after its own
  // close timeout; nothing more is queued for it meanwhile (`closing`).
}

/**
 * Sends one frame unless the connection is closing. A client whose unsent bytes pass
 * `maxBufferedBytes` is closed with 1013: nothing is ever buffered beyond it (plus this frame).
 */
export function createFrameSender(maxBufferedBytes: number, logger: Logger): (connection: Connection, frame: string | Buffer) => boolean {
  return (connection, frame) => {
    if (connection.closing || connection.ws.readyState !== WebSocket.OPEN) return false;
    corkForThisTurn(connection);
    connection.ws.send(frame, TEXT_FRAME);
    if (connection.ws.bufferedAmount > maxBufferedBytes) {
      // The close frame waits behind what is buffered: a client that never reads again is cut
      // off by ws's close timeout (30 s), with nothing added to its buffer meanwhile.
      logger.warn({ connectionId: connection.id, keyId: connection.auth.key.id, bufferedBytes: connection.ws.bufferedAmount }, 'websocket client not reading: closing (1013)');
      closeConnection(connection, CLOSE_TRY_AGAIN_LATER, 'slow_client', 'send buffer full: client not reading');
    }
    return true;
  };
}

/**
 * Pings every connection every `pingIntervalMs` and terminates one that has not answered within
 * `pongTimeoutMs`, both by `now`. A connection that only listens sends no message to be re-checked on: with every
 * ping its key is checked again (`recheck`). Returns the stop.
 */
export function startLiveness(
  connections: ReadonlySet<Connection>,
  settings: { pingIntervalMs: number; pongTimeoutMs: number },
  now: () => number,
  recheck: (connection: Connection) => void,
): () => void {
  const tickMs = Math.max(50, Math.min(1_000, Math.floor(Math.min(settings.pingIntervalMs, settings.pongTimeoutMs) / 2)));
  const ticker = setInterval(() => {
    // The gateway's clock, like every other deadline: the timer only decides how often to look.
    const wall = now();
    for (const connection of connections) {
      if (connection.closing) continue;
      if (connection.awaitingPong) {
        if (wall - connection.lastPingAt >= settings.pongTimeoutMs) {
          connection.reason = 'pong_timeout';
          connection.closing = true;
          connection.ws.terminate();
        }
        continue;
      }
      if (wall - connection.lastPingAt >= settings.pingIntervalMs) {
        connection.lastPingAt = wall;
        connection.awaitingPong = true;
        connection.ws.ping();
        recheck(connection);
      }
    }
  }, tickMs);
  ticker.unref();
  return () => clearInterval(ticker);
}

/**
 * Subscription events for the endpoint's connections (event-delivery.ts), with what a refusal or
 * an overflow does to a connection: a team out of credits gets the refusal and close code 4402,
 * a client not reading is closed with 1013.
 */
export function createConnectionEvents(deps: {
  settings: EventDeliveryDeps<Connection>['limits'];
  calls: CallDispatcher;
  observe: WebSocketObserver;
  send: (connection: Connection, frame: string | Buffer) => boolean;
  logger: Logger;
  now: () => number;
}): EventDelivery<Connection> {
  const { send, logger } = deps;
  return createEventDelivery<Connection>({
    limits: deps.settings,
    charges: deps.calls,
    observe: deps.observe,
    subject(connection, price) {
      // One subject per connection, price and day, reused by every event (thousands a second).
      const cached = connection.eventSubject;
      const now = deps.now();
      if (cached !== undefined && cached.cost === price && cached.day === utcDay(now) && connection.eventSubjectAuth === connection.auth) return cached;
      connection.eventSubjectAuth = connection.auth;
      // Events are driven by the chain, not by the client: the throughput limit applies to requests.
      return (connection.eventSubject = chargeSubject(connection.auth, connection.networkId, 'eth_subscription', price, now, false));
    },
    send,
    refused(connection, result, subject) {
      if (result.reason !== 'daily_credits_exhausted') return;
      // The last thing this connection receives: the refusal, then close code 4402.
      send(connection, JSON.stringify({ jsonrpc: '2.0', id: null, error: toJsonRpcError(refusal(result, subject, deps.now())) }));
      closeConnection(connection, CLOSE_CREDITS_EXHAUSTED, 'credits_exhausted', 'daily credits exhausted');
    },
    overflowed(connection, scope, events, bytes) {
      // A queue bound was passed: the connection is closed with 1013 (its queue is already dropped).
      if (connection.closing) return;
      connection.reason ??= 'slow_client';
      logger.warn(
        { connectionId: connection.id, keyId: connection.auth.key.id, scope, queuedEvents: events, queuedBytes: bytes, bufferedBytes: connection.ws.bufferedAmount },
        'websocket client not reading: closing (1013)',
      );
      closeConnection(connection, CLOSE_TRY_AGAIN_LATER, 'slow_client', scope === 'process' ? 'gateway event queues full: client reading slowest' : 'event queue full: client not reading');
    },
    giveBackFailed(connection, error) {
      logger.error({ err: error, connectionId: connection.id }, 'could not give back the charge of a subscription event that was not delivered');
    },
  });
}
