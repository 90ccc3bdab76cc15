import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { WebSocket, WebSocketServer } from './ws-library.js';
import { GatewayError, toHttpStatus, toJsonRpcError } from '../errors.js';
import { errorReply, NULL_ID, parseBody, serialiseBatch, serialiseReply, type EnvelopeLimits, type Reply, type RequestItem } from '../jsonrpc/envelope.js';
import { checkNetworkAllowed, type AuthenticatedKey, type Authenticator } from '../auth/authenticator.js';
import { rejected, type ItemRules } from '../auth/key-policy.js';
import { compileIpRanges, compileOrigins } from '../auth/key-settings.js';
import { clientAddressOf } from '../auth/client-address.js';
import type { GatewayConfig } from '../config/schema.js';
import { bounded, methodForLog, type Logger } from '../logging/logger.js';
import type { Meter } from '../metering/meter.js';
import { utcDay } from '../metering/meter.js';
import type { ChargeSubject, KeyWithTeam } from '../store/index.js';
import { CLIENT_LEFT, type CallDispatcher } from '../server/call-dispatch.js';
import { refusal, type CallExecutor, type CallItem, type PendingReply } from '../server/call-executor.js';
import { clientGone, createRequestContext, CLIENT_CLOSED_REQUEST, requestLogFields, type RequestContext } from '../server/context.js';
import type { NetworkRuntime, NetworkSet } from '../server/network-runtime.js';
import type { RequestSpan } from '../tracing/tracing.js';
import type { SubscriptionHub, SubscriptionKind } from './subscription-hub.js';
import type { EventOutbox, OverflowScope } from './event-outbox.js';
import { createEventDelivery, type ClientSubscription, type DeliveryObserver, type QueuedEvent } from './event-delivery.js';
import { parseSubscribeParams, subscriptionMethodPrice, SUBSCRIPTION_METHODS } from './subscribe-params.js';

/**
 * The WebSocket endpoint `{base_url}/ws/v3/<API_KEY>` (docs/websocket.md), an HTTP upgrade on the
 * RPC listener. The stages:
 *   upgrade: resolve network → authenticate → network allow-list → key settings (secret / JWT,
 *            origin, user agent, IP) → connection bounds → accept
 *   message: parse → per item the HTTP request path (call-dispatch.ts: validate, price, route,
 *            charge) or, for eth_subscribe / eth_unsubscribe, the subscription hub → send → log
 *   event:   reserve its credits → send in order → settle (or refund when it was not sent);
 *            a refusal ends the connection with a final -32005 and close code 4402.
 * A refused upgrade gets the HTTP status and JSON-RPC body the HTTP path gives the same request.
 */

export interface WebSocketEndpointDeps {
  server: GatewayConfig['server'];
  acquireNetworks: () => NetworkSet;
  /** The current set, without holding it (the upgrade only resolves the network). */
  currentNetworks: () => NetworkSet;
  /** Pairs with `acquireNetworks` for one message; also records the message's metrics. */
  onFinished: (ctx: RequestContext, networks: NetworkSet) => void;
  /** Starts a message's trace span when tracing is on (each message is a request of its own). */
  startTrace?: (() => RequestSpan | undefined) | undefined;
  authenticator: Authenticator;
  calls: CallDispatcher;
  executor: CallExecutor;
  meter: Meter;
  hub: SubscriptionHub;
  now: () => number;
  logger: Logger;
  observe: WebSocketObserver;
}

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

export interface WebSocketEndpoint {
  /** Attaches the `upgrade` listener to the RPC listener. */
  attach(server: Server): void;
  /** Open connections. */
  connectionCount(): number;
  /** Closes every connection (1001 going away) and the upstream subscriptions. */
  close(): void;
}

/** Close codes: ours are in the private range 4000-4999 (402: payment required, as HTTP). */
const CLOSE_CREDITS_EXHAUSTED = 4402;
const CLOSE_TRY_AGAIN_LATER = 1013;
const CLOSE_POLICY = 1008;
const CLOSE_GOING_AWAY = 1001;
const CLOSE_SERVICE_RESTART = 1012;

/**
 * Messages one connection may have in progress; past it the gateway stops reading from that
 * client (TCP back-pressure) until some are answered, as HTTP pipelining does one at a time.
 */
const MAX_MESSAGES_IN_FLIGHT = 256;

/** ws 8's `pause()` / `resume()` (which the ws 7 type package hoisted beside it does not declare). */
/** Every frame the gateway writes is text (JSON); one options object for all of them. */
const TEXT_FRAME = { binary: false } as const;

/** Ends {@link corkForThisTurn}'s hold: the turn's frames go out in one write. */
function uncork(connection: { socket: Socket; corked: boolean }): void {
  connection.corked = false;
  connection.socket.uncork();
}

const flow = (ws: WebSocket) => ws as unknown as { pause(): void; resume(): void };

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  402: 'Payment Required',
  403: 'Forbidden',
  404: 'Not Found',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/** `{prefix}/ws/v3/<key>` → `{prefix}/v3/<key>` (what the network resolver reads), or undefined. */
export function httpPathOf(path: string): string | undefined {
  const queryStart = path.indexOf('?');
  const bare = queryStart === -1 ? path : path.slice(0, queryStart);
  const match = /^(.*)\/ws(\/v3(?:\/[^/]*)?\/?)$/.exec(bare);
  return match === null ? undefined : `${match[1]}${match[2]}`;
}

/** The parts of the upgrade request the key settings read (docs/keys.md). */
interface UpgradeFacts {
  origin: string | undefined;
  userAgent: string | undefined;
  authorization: string | undefined;
  clientAddress: string | undefined;
}

interface Connection {
  id: string;
  ws: WebSocket;
  socket: Socket;
  /**
   * What a message's context sees as its client's socket: gone once the connection is closing
   * (a close frame is queued), so the shared request path refunds answers that can no longer be
   * sent, as it does for an HTTP client that left.
   */
  view: Socket;
  /** The key as it came in the path: every message is authenticated again (revocations apply). */
  apiKey: string;
  auth: KeyWithTeam;
  /** What the key settings look at, as the upgrade request carried it: every message is admitted again. */
  facts: UpgradeFacts;
  networkId: string;
  openedAt: number;
  subscriptions: Map<string, ClientSubscription>;
  /** Its socket is corked until the end of this turn ({@link corkForThisTurn}). */
  corked: boolean;
  /** `eth_subscribe` calls being charged (they count against the subscription bound). */
  subscribing: number;
  /** Messages being answered. */
  inFlight: number;
  /** Events wait here for their reservations and for the client to read, so they go out in order, bounded. */
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

export function createWebSocketEndpoint(deps: WebSocketEndpointDeps): WebSocketEndpoint {
  const { logger, observe } = deps;
  const settings = deps.server.websocket;
  const limits: EnvelopeLimits = {
    maxBatchItems: deps.server.maxBatchItems,
    maxParamsDepth: deps.server.maxParamsDepth,
    maxParamsBytes: deps.server.maxParamsBytes,
  };
  const delivery = createEventDelivery<Connection>({
    limits: settings,
    meter: deps.meter,
    observe,
    subject(connection, price) {
      // One subject per connection, price and day, reused by every event (thousands a second).
      const cached = connection.eventSubject;
      const day = utcDay(deps.now());
      if (cached !== undefined && cached.cost === price && cached.day === day && connection.eventSubjectAuth === connection.auth) return cached;
      connection.eventSubjectAuth = connection.auth;
      return (connection.eventSubject = subjectFor(connection, connection.auth, 'eth_subscription', price, false));
    },
    send: (connection, text) => send(connection, text),
    refused(connection, result, subject) {
      if (result.reason !== 'daily_credits_exhausted') return;
      // The last thing this connection receives: the refusal, then close code 4402.
      send(connection, JSON.stringify({ jsonrpc: '2.0', id: null, error: toJsonRpcError(refusal(result, subject, deps.now())) }));
      closeConnection(connection, CLOSE_CREDITS_EXHAUSTED, 'credits_exhausted', 'daily credits exhausted');
    },
    overflowed: (connection, scope, events, bytes) => overflowed(connection, scope, events, bytes),
    giveBackFailed(connection, error) {
      logger.error({ err: error, connectionId: connection.id }, 'could not give back the charge of a subscription event that was not delivered');
    },
  });
  /** Subscriptions confirmed by a message's answer, armed once that answer is written. */
  const confirmedBy = new WeakMap<RequestContext, ClientSubscription[]>();
  const wss = new WebSocketServer({ noServer: true, maxPayload: settings.maxMessageBytes, perMessageDeflate: false, clientTracking: false });
  const connections = new Set<Connection>();
  const corsAllows = compileOrigins(deps.server.cors.allowedOrigins);
  const trustedProxies = deps.server.trustedProxies.length > 0 ? compileIpRanges(deps.server.trustedProxies) : undefined;

  /**
   * The key settings, as the HTTP path applies them: an origin the gateway does not serve, then
   * the key's secret or JWT, origin, user agent and IP rules (throws the 401/403 refusal). Returns
   * the per-call method and address rules.
   */
  async function admit(auth: AuthenticatedKey, facts: UpgradeFacts): Promise<ItemRules | undefined> {
    if (facts.origin !== undefined && !corsAllows(facts.origin)) throw rejected('origin');
    if (auth.policy === undefined) return undefined;
    const admitting = auth.policy.admit({ origin: facts.origin, userAgent: facts.userAgent, authorization: facts.authorization, clientAddress: () => facts.clientAddress });
    return (admitting instanceof Promise ? await admitting : admitting).items;
  }
  const perKey = new Map<string, number>();
  /** Connections open or being opened (handshake under way): what the process bound counts. */
  let admitted = 0;
  /** Set by `close` (drain, shutdown): no more upgrades. */
  let stopped = false;

  const idPrefix = `${randomBytes(6).toString('hex')}-ws-`;
  let counter = 0;
  const nextId = (): string => idPrefix + (counter++).toString(36);

  // --- upgrade ------------------------------------------------------------------------------

  function refuse(socket: Duplex, error: GatewayError, fields: Record<string, unknown> = {}): void {
    const status = toHttpStatus(error);
    observe.rejected(status);
    const body = serialiseReply(errorReply(NULL_ID, error));
    const headers = [`HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}`, 'content-type: application/json', `content-length: ${body.length}`, 'connection: close'];
    for (const [name, value] of Object.entries(error.headers ?? {})) headers.push(`${name}: ${value}`);
    if (socket.writable) socket.end(Buffer.concat([Buffer.from(`${headers.join('\r\n')}\r\n\r\n`, 'latin1'), body]));
    else socket.destroy();
    if (logger.isLevelEnabled('info')) logger.info({ transport: 'ws', status, error: error.code, ...fields }, 'websocket upgrade refused');
  }

  /**
   * An `Upgrade` to anything but WebSocket (`h2c` from `curl --http2`, say) is an ordinary HTTP
   * request that Node handed to the upgrade listener: it goes back to the HTTP server without
   * its upgrade headers, as if it had come that way.
   */
  function passToHttp(server: Server, req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const lines = [`${req.method ?? 'GET'} ${req.url ?? '/'} HTTP/${req.httpVersion}`];
    const raw = req.rawHeaders;
    for (let index = 0; index < raw.length; index += 2) {
      const name = raw[index]!.toLowerCase();
      if (name === 'upgrade' || name === 'http2-settings') continue;
      if (name === 'connection') {
        const tokens = raw[index + 1]!.split(',').map((token) => token.trim()).filter((token) => !/^(upgrade|http2-settings)$/i.test(token));
        if (tokens.length > 0) lines.push(`${raw[index]}: ${tokens.join(', ')}`);
        continue;
      }
      lines.push(`${raw[index]}: ${raw[index + 1]}`);
    }
    socket.unshift(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), head]));
    server.emit('connection', socket);
  }

  async function upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    if (stopped) return void socket.destroy();
    const host = req.headers.host;
    const path = httpPathOf(req.url ?? '/');
    if (path === undefined) return refuse(socket, new GatewayError('TG_ERR_NOT_FOUND', 'not found: expected {base_url}/ws/v3/<API_KEY>'));
    if (!settings.enabled) return refuse(socket, new GatewayError('TG_ERR_NOT_FOUND', 'not found: the WebSocket endpoint is disabled on this gateway'));
    if (host === undefined) return refuse(socket, new GatewayError('TG_ERR_BAD_HTTP', 'malformed HTTP request: an HTTP/1.1 request needs a Host header'));
    // Read, not held: each message of the connection holds the set it runs on.
    const resolved = deps.currentNetworks().resolver.resolve(host, path);
    if (resolved.kind === 'not-found') return refuse(socket, new GatewayError('TG_ERR_NOT_FOUND', resolved.reason.replace('{base_url}/v3/', '{base_url}/ws/v3/')));
    const network = resolved.kind === 'found' ? resolved.value.network : resolved.network;
    if (resolved.kind === 'missing-key' || resolved.value.apiKey === undefined) {
      return refuse(socket, new GatewayError('TG_ERR_MISSING_KEY', 'missing API key: use {base_url}/ws/v3/<API_KEY>'), { network: network.config.id });
    }
    const apiKey = resolved.value.apiKey;
    const fields: Record<string, unknown> = { network: network.config.id };
    const facts: UpgradeFacts = {
      origin: req.headers.origin,
      userAgent: req.headers['user-agent'],
      authorization: req.headers.authorization,
      clientAddress: clientAddressOf(req.socket.remoteAddress, req.headers['x-forwarded-for'], trustedProxies),
    };
    let auth: AuthenticatedKey;
    try {
      const authenticated = deps.authenticator.authenticate(apiKey);
      auth = authenticated instanceof Promise ? await authenticated : authenticated;
      fields.keyId = auth.key.id;
      checkNetworkAllowed(auth, network.config.id);
      await admit(auth, facts);
    } catch (error) {
      if (error instanceof GatewayError && error.code === 'TG_ERR_KEY_SETTINGS') fields.rule = (error.data as { rule: string }).rule;
      return refuse(socket, error instanceof GatewayError ? error : new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, error), fields);
    }
    const keyFields = { ...fields, keyId: auth.key.id, teamId: auth.team.id };
    if (admitted >= settings.maxConnections) {
      return refuse(socket, new GatewayError('TG_ERR_WS_SERVER_FULL', undefined, { reason: 'connection_limit', scope: 'process', limit: settings.maxConnections }), keyFields);
    }
    if ((perKey.get(auth.key.id) ?? 0) >= settings.maxConnectionsPerKey) {
      return refuse(socket, new GatewayError('TG_ERR_WS_KEY_CONNECTIONS', undefined, { reason: 'connection_limit', scope: 'key', limit: settings.maxConnectionsPerKey }), keyFields);
    }
    if (socket.destroyed) return;
    // Counted before the handshake completes, so concurrent upgrades cannot overshoot the bounds.
    perKey.set(auth.key.id, (perKey.get(auth.key.id) ?? 0) + 1);
    admitted += 1;
    const reserved = { released: false };
    const release = () => {
      if (reserved.released) return;
      reserved.released = true;
      admitted -= 1;
      const left = (perKey.get(auth.key.id) ?? 1) - 1;
      if (left > 0) perKey.set(auth.key.id, left);
      else perKey.delete(auth.key.id);
    };
    socket.once('close', release);
    wss.handleUpgrade(req, socket as Socket, head, (ws) => open(ws, socket as Socket, apiKey, auth, facts, network.config.id, release, req));
  }

  // --- connections ----------------------------------------------------------------------------

  function open(ws: WebSocket, socket: Socket, apiKey: string, auth: KeyWithTeam, facts: UpgradeFacts, networkId: string, release: () => void, req: IncomingMessage): void {
    const connection: Connection = {
      id: nextId(),
      ws,
      socket,
      view: socket,
      apiKey,
      auth,
      facts,
      networkId,
      openedAt: performance.now(),
      subscriptions: new Map(),
      corked: false,
      subscribing: 0,
      inFlight: 0,
      outbox: undefined as unknown as EventOutbox<QueuedEvent>,
      closing: false,
      reason: undefined,
      lastPingAt: Date.now(),
      awaitingPong: false,
      messages: 0,
      events: 0,
      eventCredits: 0,
    };
    connection.outbox = delivery.outbox(connection, socket);
    connection.view = {
      get destroyed() {
        return socket.destroyed || connection.closing;
      },
      get writable() {
        return socket.writable && !connection.closing;
      },
    } as Socket;
    connections.add(connection);
    observe.connections(networkId, 1);
    logger.info(
      { connectionId: connection.id, transport: 'ws', network: networkId, keyId: auth.key.id, teamId: auth.team.id, userAgent: bounded(req.headers['user-agent'] ?? '', 200) || undefined },
      'websocket open',
    );
    ws.on('pong', () => {
      connection.awaitingPong = false;
    });
    ws.on('message', (data: Buffer | ArrayBuffer | Buffer[]) => {
      const bytes = Buffer.isBuffer(data) ? data : Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data);
      connection.messages += 1;
      connection.inFlight += 1;
      if (connection.inFlight === MAX_MESSAGES_IN_FLIGHT) flow(ws).pause();
      void handleMessage(connection, bytes).finally(() => {
        connection.inFlight -= 1;
        // Resumed while closing too: the client's close frame must be read for the close to complete.
        if (connection.inFlight === MAX_MESSAGES_IN_FLIGHT - 1) flow(ws).resume();
      });
    });
    ws.on('error', (error: Error & { code?: string }) => {
      connection.reason ??= error.code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH' ? 'message_too_large' : 'error';
    });
    ws.on('close', (code: number) => {
      connections.delete(connection);
      release();
      connection.closing = true;
      connection.outbox.close();
      for (const subscription of connection.subscriptions.values()) {
        subscription.unhook();
        observe.subscriptions(networkId, subscription.kind, -1);
      }
      connection.subscriptions.clear();
      observe.connections(networkId, -1);
      const reason = connection.reason ?? 'client';
      observe.disconnected(reason);
      logger.info(
        {
          connectionId: connection.id,
          transport: 'ws',
          network: networkId,
          keyId: auth.key.id,
          teamId: auth.team.id,
          code,
          reason,
          messages: connection.messages,
          events: connection.events,
          eventCredits: connection.eventCredits,
          durationMs: Math.round(performance.now() - connection.openedAt),
        },
        'websocket close',
      );
    });
  }

  function closeConnection(connection: Connection, code: number, reason: DisconnectReason, text: string): void {
    if (connection.closing) return;
    connection.closing = true;
    connection.reason ??= reason;
    // Nothing queued will be sent: the waiting events give their reservations back now.
    connection.outbox.close();
    connection.ws.close(code, text);
    // A client that reads nothing never answers the close: ws destroys the socket after its own
    // close timeout; nothing more is queued for it meanwhile (`closing`).
  }

  /**
   * Sends one frame unless the connection is closing. A client whose unsent bytes pass the bound
   * is closed with 1013: nothing is ever buffered beyond `maxBufferedBytes` (plus this frame).
   */
  function send(connection: Connection, text: string | Buffer): boolean {
    if (connection.closing || connection.ws.readyState !== WebSocket.OPEN) return false;
    corkForThisTurn(connection);
    connection.ws.send(text, TEXT_FRAME);
    if (connection.ws.bufferedAmount > settings.maxBufferedBytes) {
      // The close frame waits behind what is buffered: a client that never reads again is cut
      // off by ws's close timeout (30 s), with nothing added to its buffer meanwhile.
      logger.warn({ connectionId: connection.id, keyId: connection.auth.key.id, bufferedBytes: connection.ws.bufferedAmount }, 'websocket client not reading: closing (1013)');
      closeConnection(connection, CLOSE_TRY_AGAIN_LATER, 'slow_client', 'send buffer full: client not reading');
    }
    return true;
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

  // --- messages -----------------------------------------------------------------------------

  async function handleMessage(connection: Connection, body: Buffer): Promise<void> {
    // A closing connection takes no more work: nothing it asks could be delivered.
    if (connection.closing) return;
    const ctx = createRequestContext(nextId(), connection.view);
    ctx.transport = 'ws';
    ctx.networkId = connection.networkId;
    if (deps.startTrace !== undefined) ctx.trace = deps.startTrace();
    const networks = deps.acquireNetworks();
    try {
      const network = networks.byId.get(connection.networkId);
      if (network === undefined) {
        return closeConnection(connection, CLOSE_SERVICE_RESTART, 'network_removed', 'network no longer served');
      }
      // Authenticated and admitted again (from the key cache): a revoked or expired key, changed
      // settings or an expired JWT stop being served.
      let auth: AuthenticatedKey;
      let itemRules: ItemRules | undefined;
      try {
        const authenticated = deps.authenticator.authenticate(connection.apiKey);
        auth = authenticated instanceof Promise ? await authenticated : authenticated;
        checkNetworkAllowed(auth, connection.networkId);
        itemRules = await admit(auth, connection.facts);
      } catch (error) {
        const gatewayError = error instanceof GatewayError ? error : new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, error);
        ctx.errorCode = gatewayError.code;
        if (gatewayError.code === 'TG_ERR_KEY_SETTINGS') (ctx.ruleRejections ??= []).push((gatewayError.data as { rule: string }).rule);
        send(connection, serialiseReply(errorReply(NULL_ID, gatewayError)));
        if (gatewayError.code !== 'TG_ERR_STORE_UNAVAILABLE') closeConnection(connection, CLOSE_POLICY, 'key_invalid', gatewayError.message);
        return;
      }
      connection.auth = auth;
      ctx.keyId = auth.key.id;
      ctx.teamId = auth.team.id;
      const parsed = parseBody(body, limits);
      if (parsed.kind === 'rejected') {
        ctx.errorCode = parsed.error.code;
        send(connection, serialiseReply(errorReply(NULL_ID, parsed.error)));
        return;
      }
      const deadline = deps.now() + network.config.requestTimeoutMs;
      if (parsed.kind === 'single') {
        const { item } = parsed;
        const reply = isSubscriptionCall(item) ? await answerSubscriptionCall(connection, item, network, auth, ctx, itemRules) : await deps.calls.answerOne(item, network, auth, ctx, deadline, itemRules);
        if (reply === undefined) return;
        if (reply === CLIENT_LEFT) return void (ctx.httpStatus = CLIENT_CLOSED_REQUEST);
        if ('error' in reply && reply.gatewayError !== undefined) ctx.errorCode = reply.gatewayError.code;
        if (!send(connection, serialiseReply(reply))) ctx.httpStatus = CLIENT_CLOSED_REQUEST;
        arm(ctx);
        return;
      }
      const replies = await answerBatch(connection, parsed.items, network, auth, ctx, deadline, itemRules);
      if (replies === CLIENT_LEFT) return void (ctx.httpStatus = CLIENT_CLOSED_REQUEST);
      if (replies.length > 0 && !send(connection, serialiseBatch(replies))) ctx.httpStatus = CLIENT_CLOSED_REQUEST;
      arm(ctx);
    } catch (error) {
      logger.error({ err: error, requestId: ctx.requestId }, 'websocket message failed unexpectedly');
      send(connection, serialiseReply(errorReply(NULL_ID, new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, error))));
    } finally {
      finish(connection, ctx, networks);
    }
  }

  /** A batch: subscription calls answered here, every other item by the shared path, replies in request order. */
  async function answerBatch(
    connection: Connection,
    items: RequestItem[],
    network: NetworkRuntime,
    auth: KeyWithTeam,
    ctx: RequestContext,
    deadline: number,
    rules: ItemRules | undefined,
  ): Promise<Reply[] | typeof CLIENT_LEFT> {
    const others = items.filter((item) => !isSubscriptionCall(item));
    if (others.length === items.length) return deps.calls.answerBatch(items, network, auth, ctx, deadline, rules);
    const answered = others.length > 0 ? await deps.calls.answerBatch(others, network, auth, ctx, deadline, rules) : [];
    if (answered === CLIENT_LEFT) return CLIENT_LEFT;
    ctx.batchSize = items.length;
    // The shared path answers its items in order, skipping notifications; merge by position.
    const replies: Reply[] = [];
    let next = 0;
    for (const item of items) {
      if (isSubscriptionCall(item)) {
        const reply = await answerSubscriptionCall(connection, item, network, auth, ctx, rules);
        if (reply === CLIENT_LEFT) return CLIENT_LEFT;
        replies.push(reply);
      } else if (item.kind !== 'notification') {
        replies.push(answered[next++]!);
      }
    }
    return replies;
  }

  function finish(connection: Connection, ctx: RequestContext, networks: NetworkSet): void {
    if (logger.isLevelEnabled('info')) {
      logger.info(
        {
          requestId: ctx.requestId,
          transport: 'ws',
          connectionId: connection.id,
          ...requestLogFields(ctx),
          durationMs: Math.round((performance.now() - ctx.startedAt) * 100) / 100,
        },
        'request',
      );
    }
    deps.onFinished(ctx, networks);
  }

  // --- subscriptions --------------------------------------------------------------------------

  function isSubscriptionCall(item: RequestItem): item is CallItem {
    return item.kind === 'call' && SUBSCRIPTION_METHODS.has(item.method);
  }

  function subjectFor(connection: Connection, auth: KeyWithTeam, method: string, cost: number, throughput: boolean): ChargeSubject {
    return {
      teamId: auth.team.id,
      keyId: auth.key.id,
      network: connection.networkId,
      method,
      cost,
      day: utcDay(deps.now()),
      teamDailyCredits: auth.team.dailyCredits,
      keyDailyCap: auth.key.dailyCap,
      // Events are driven by the chain, not by the client: the throughput limit applies to requests.
      teamCreditsPerSecond: throughput ? auth.team.creditsPerSecond : null,
    };
  }

  /** eth_subscribe / eth_unsubscribe: validated and priced like any call, charged through the executor's commit. */
  async function answerSubscriptionCall(
    connection: Connection,
    item: CallItem,
    network: NetworkRuntime,
    auth: KeyWithTeam,
    ctx: RequestContext,
    rules: ItemRules | undefined,
  ): Promise<Reply | typeof CLIENT_LEFT> {
    ctx.methods.push(methodForLog(item.method, true));
    const answer = (reply: Reply, outcome?: string): Reply => {
      ctx.calls.push({ method: item.method, outcome: outcome ?? ('result' in reply ? 'ok' : (reply.gatewayError?.code.slice('TG_ERR_'.length).toLowerCase() ?? 'upstream_error')) });
      return reply;
    };
    // The key's method rule applies to subscriptions as to any call (a key limited to eth_call cannot subscribe).
    const rule = rules?.check(item.method, item.params);
    if (rule !== undefined) {
      (ctx.ruleRejections ??= []).push(rule);
      return answer(errorReply(item.id, rejected(rule)));
    }
    const cost = subscriptionMethodPrice(network, item.method);
    if (cost instanceof GatewayError) return answer(errorReply(item.id, cost));
    if (item.paramsError !== undefined) return answer(errorReply(item.id, item.paramsError));
    const subject = subjectFor(connection, auth, item.method, cost, true);
    const commit = async (result: unknown): Promise<Reply | typeof CLIENT_LEFT> => {
      const pending: PendingReply = { ledger: 'charge', reply: { id: item.id, result: JSON.stringify(result) }, subject };
      const deliverable = !clientGone(ctx) && !connection.closing;
      const reply = await deps.executor.commit(pending, ctx, deliverable);
      if (!deliverable) return CLIENT_LEFT;
      return answer(reply);
    };

    if (item.method === 'eth_unsubscribe') {
      const id = Array.isArray(item.params) ? item.params[0] : undefined;
      if (typeof id !== 'string') return answer(errorReply(item.id, new GatewayError('TG_ERR_INVALID_PARAMS', 'invalid argument 0: expected a subscription id')));
      const subscription = connection.subscriptions.get(id);
      const reply = await commit(subscription !== undefined);
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
      return answer(errorReply(item.id, error as GatewayError));
    }
    // Subscriptions still being charged hold their place: two at once cannot both take the last one.
    if (connection.subscriptions.size + connection.subscribing >= settings.maxSubscriptionsPerConnection) {
      const limit = settings.maxSubscriptionsPerConnection;
      return answer(errorReply(item.id, new GatewayError('TG_ERR_WS_SUBSCRIPTION_LIMIT', undefined, { reason: 'subscription_limit', limit })));
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
      const hooked = deps.hub.subscribe(connection.networkId, request.kind, request.upstreamParams, (event) => delivery.deliver(connection, subscription, event));
      subscription.unhook = hooked.unsubscribe;
      try {
        await hooked.ready;
      } catch (error) {
        hooked.unsubscribe();
        return answer(errorReply(item.id, error instanceof GatewayError ? error : new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, error)));
      }
      reply = await commit(id);
    } finally {
      connection.subscribing -= 1;
    }
    if (reply === CLIENT_LEFT || !('result' in reply) || connection.closing) {
      subscription.unhook();
      return reply;
    }
    connection.subscriptions.set(id, subscription);
    observe.subscriptions(connection.networkId, request.kind, 1);
    // Armed as the answer is written (handleMessage): the client knows the id before its first event.
    const confirmed = confirmedBy.get(ctx);
    if (confirmed === undefined) confirmedBy.set(ctx, [subscription]);
    else confirmed.push(subscription);
    return reply;
  }

  /** After a message's answer is written: its new subscriptions start taking events. */
  function arm(ctx: RequestContext): void {
    const confirmed = confirmedBy.get(ctx);
    if (confirmed === undefined) return;
    confirmedBy.delete(ctx);
    for (const subscription of confirmed) subscription.armed = true;
  }

  /** A queue bound was passed: the connection is closed with 1013 (its queue is already dropped). */
  function overflowed(connection: Connection, scope: OverflowScope, events: number, bytes: number): void {
    if (connection.closing) return;
    connection.reason ??= 'slow_client';
    logger.warn(
      { connectionId: connection.id, keyId: connection.auth.key.id, scope, queuedEvents: events, queuedBytes: bytes, bufferedBytes: connection.ws.bufferedAmount },
      'websocket client not reading: closing (1013)',
    );
    closeConnection(connection, CLOSE_TRY_AGAIN_LATER, 'slow_client', scope === 'process' ? 'gateway event queues full: client reading slowest' : 'event queue full: client not reading');
  }

  // --- liveness -------------------------------------------------------------------------------

  /**
   * A connection that only listens sends no message to be re-checked on: with every ping its key
   * is authenticated and admitted again (a revoked key stops its events), and the team's limits
   * its events are charged against are refreshed.
   */
  async function recheckKey(connection: Connection): Promise<void> {
    try {
      const authenticated = deps.authenticator.authenticate(connection.apiKey);
      const auth = authenticated instanceof Promise ? await authenticated : authenticated;
      checkNetworkAllowed(auth, connection.networkId);
      await admit(auth, connection.facts);
      connection.auth = auth;
    } catch (error) {
      // The store being unreachable says nothing about the key: the connection stays.
      if (error instanceof GatewayError && error.code !== 'TG_ERR_STORE_UNAVAILABLE') closeConnection(connection, CLOSE_POLICY, 'key_invalid', error.message);
    }
  }

  const tickMs = Math.max(50, Math.min(1_000, Math.floor(Math.min(settings.pingIntervalMs, settings.pongTimeoutMs) / 2)));
  const ticker = setInterval(() => {
    const wall = Date.now();
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
        void recheckKey(connection);
      }
    }
  }, tickMs);
  ticker.unref();

  return {
    attach(server) {
      server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
        socket.on('error', () => socket.destroy());
        const isWebSocket = (req.headers.upgrade ?? '').toLowerCase() === 'websocket';
        if (!isWebSocket) return passToHttp(server, req, socket, head);
        upgrade(req, socket, head).catch((error: unknown) => {
          logger.error({ err: error }, 'websocket upgrade failed unexpectedly');
          socket.destroy();
        });
      });
    },
    connectionCount: () => connections.size,
    close() {
      stopped = true;
      clearInterval(ticker);
      for (const connection of connections) closeConnection(connection, CLOSE_GOING_AWAY, 'shutdown', 'gateway shutting down');
      deps.hub.close();
    },
  };
}
