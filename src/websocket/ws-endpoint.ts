import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { WebSocketServer, type WebSocket } from './ws-library.js';
import { GatewayError } from '../errors.js';
import { errorReply, NULL_ID, parseBody, returnCopiedResults, serialiseBatch, serialiseReply, type EnvelopeLimits } from '../jsonrpc/envelope.js';
import type { RequestFacts } from '../auth/key-policy.js';
import type { GatewayConfig } from '../config/schema.js';
import { bounded, logRequest, type Logger } from '../logging/logger.js';
import type { KeyWithTeam } from '../store/index.js';
import type { Admitter } from '../server/admission.js';
import { CLIENT_LEFT, type CallDispatcher } from '../server/call-dispatch.js';
import { createRequestContext, CLIENT_CLOSED_REQUEST, requestLogFields, type RequestContext } from '../server/context.js';
import type { NetworkSet } from '../server/network-runtime.js';
import type { RequestSpan } from '../tracing/tracing.js';
import type { SubscriptionHub } from './subscription-types.js';
import type { EventOutbox } from './event-outbox.js';
import type { QueuedEvent } from './event-delivery.js';
import { httpPathOf, passToHttp, refuseUpgrade } from './ws-upgrade.js';
import { createSubscriptionCalls } from './ws-subscription-calls.js';
import {
  closeConnection,
  createConnectionEvents,
  createFrameSender,
  startLiveness,
  CLOSE_GOING_AWAY,
  CLOSE_POLICY,
  CLOSE_SERVICE_RESTART,
  type Connection,
  type WebSocketObserver,
} from './ws-connection.js';

/**
 * The WebSocket endpoint `{base_url}/ws/v3/<API_KEY>` (docs/websocket.md), an HTTP upgrade on the
 * RPC listener, and an adapter of the call core like the HTTP handler. The stages:
 *   upgrade: resolve network → admit (admission.ts: key, network allow-list, key settings) →
 *            connection bounds → accept
 *   message: admit again → parse → per item the call core (call-dispatch.ts: validate, price,
 *            route, charge), eth_subscribe / eth_unsubscribe in ws-subscription-calls.ts → send → log
 *   event:   charged by the call core shortly before its turn → sent in order → given back when
 *            it was not sent; a refusal ends the connection with a final -32005 and close code 4402.
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
  /** Who may call: the same decision the HTTP handler takes, on the upgrade and on every message. */
  admitter: Admitter;
  calls: CallDispatcher;
  hub: SubscriptionHub;
  now: () => number;
  logger: Logger;
  observe: WebSocketObserver;
}

export interface WebSocketEndpoint {
  /** Attaches the `upgrade` listener to the RPC listener. */
  attach(server: Server): void;
  /** Open connections. */
  connectionCount(): number;
  /** Closes every connection (1001 going away) and the upstream subscriptions. */
  close(): void;
}

/**
 * Messages one connection may have in progress; past it the gateway stops reading from that
 * client (TCP back-pressure) until some are answered, as HTTP pipelining does one at a time.
 */
const MAX_MESSAGES_IN_FLIGHT = 256;

/** ws 8's `pause()` / `resume()` (which the ws 7 type package hoisted beside it does not declare). */
const flow = (ws: WebSocket) => ws as unknown as { pause(): void; resume(): void };

export function createWebSocketEndpoint(deps: WebSocketEndpointDeps): WebSocketEndpoint {
  const { logger, observe, admitter } = deps;
  const settings = deps.server.websocket;
  const limits: EnvelopeLimits = {
    maxBatchItems: deps.server.maxBatchItems,
    maxParamsDepth: deps.server.maxParamsDepth,
    maxParamsBytes: deps.server.maxParamsBytes,
  };
  const send = createFrameSender(settings.maxBufferedBytes, logger);
  const delivery = createConnectionEvents({ settings, calls: deps.calls, observe, send, logger, now: deps.now });
  const subscriptionCalls = createSubscriptionCalls({
    calls: deps.calls,
    hub: deps.hub,
    deliver: (connection, subscription, event) => delivery.deliver(connection, subscription, event),
    observe,
    maxSubscriptionsPerConnection: settings.maxSubscriptionsPerConnection,
    now: deps.now,
  });
  const wss = new WebSocketServer({ noServer: true, maxPayload: settings.maxMessageBytes, perMessageDeflate: false, clientTracking: false });
  const connections = new Set<Connection>();
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
    observe.rejected(refuseUpgrade(socket, error, logger, fields));
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
    // Read once: every message is admitted again on what the upgrade request carried.
    const clientAddress = admitter.clientAddress(req.socket.remoteAddress, req.headers['x-forwarded-for']);
    const facts: RequestFacts = {
      origin: req.headers.origin,
      userAgent: req.headers['user-agent'],
      authorization: req.headers.authorization,
      clientAddress: () => clientAddress,
    };
    let admission;
    try {
      admission = await admitter.admit(apiKey, network.config.id, facts);
    } catch (error) {
      return refuse(socket, new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, error), fields);
    }
    if (admission.auth !== undefined) fields.keyId = admission.auth.key.id;
    if (admission.kind === 'refused') {
      if (admission.rule !== undefined) fields.rule = admission.rule;
      return refuse(socket, admission.error, fields);
    }
    const { auth } = admission;
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

  function open(ws: WebSocket, socket: Socket, apiKey: string, auth: KeyWithTeam, facts: RequestFacts, networkId: string, release: () => void, req: IncomingMessage): void {
    const connection: Connection = {
      id: nextId(),
      ws,
      socket,
      left: () => socket.destroyed || !socket.writable || connection.closing,
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
      lastPingAt: deps.now(),
      awaitingPong: false,
      messages: 0,
      events: 0,
      eventCredits: 0,
    };
    connection.outbox = delivery.outbox(connection, socket);
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

  // --- messages -----------------------------------------------------------------------------

  async function handleMessage(connection: Connection, body: Buffer): Promise<void> {
    // A closing connection takes no more work: nothing it asks could be delivered.
    if (connection.closing) return;
    const ctx = createRequestContext(nextId(), undefined, undefined, connection.left);
    ctx.transport = 'ws';
    ctx.networkId = connection.networkId;
    if (deps.startTrace !== undefined) ctx.trace = deps.startTrace();
    const networks = deps.acquireNetworks();
    try {
      const network = networks.byId.get(connection.networkId);
      if (network === undefined) {
        return closeConnection(connection, CLOSE_SERVICE_RESTART, 'network_removed', 'network no longer served');
      }
      // Admitted again (from the key cache): a revoked or expired key, changed settings or an
      // expired JWT stop being served.
      const admitting = admitter.admit(connection.apiKey, connection.networkId, connection.facts);
      const admission = admitting instanceof Promise ? await admitting : admitting;
      if (admission.kind === 'refused') {
        ctx.errorCode = admission.error.code;
        if (admission.rule !== undefined) (ctx.ruleRejections ??= []).push(admission.rule);
        send(connection, serialiseReply(errorReply(NULL_ID, admission.error)));
        if (admission.error.code !== 'TG_ERR_STORE_UNAVAILABLE') closeConnection(connection, CLOSE_POLICY, 'key_invalid', admission.error.message);
        return;
      }
      const { auth, rules } = admission;
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
        const reply = await subscriptionCalls.answerOne(connection, parsed.item, network, auth, ctx, deadline, rules);
        if (reply === undefined) return;
        if (reply === CLIENT_LEFT) return void (ctx.httpStatus = CLIENT_CLOSED_REQUEST);
        if ('error' in reply && reply.gatewayError !== undefined) ctx.errorCode = reply.gatewayError.code;
        if (!send(connection, serialiseReply(reply))) ctx.httpStatus = CLIENT_CLOSED_REQUEST;
        returnCopiedResults([reply]);
        subscriptionCalls.arm(ctx);
        return;
      }
      const replies = await subscriptionCalls.answerBatch(connection, parsed.items, network, auth, ctx, deadline, rules);
      if (replies === CLIENT_LEFT) return void (ctx.httpStatus = CLIENT_CLOSED_REQUEST);
      if (replies.length > 0 && !send(connection, serialiseBatch(replies))) ctx.httpStatus = CLIENT_CLOSED_REQUEST;
      returnCopiedResults(replies);
      subscriptionCalls.arm(ctx);
    } catch (error) {
      logger.error({ err: error, requestId: ctx.requestId }, 'websocket message failed unexpectedly');
      send(connection, serialiseReply(errorReply(NULL_ID, new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, error))));
    } finally {
      finish(connection, ctx, networks);
    }
  }

  function finish(connection: Connection, ctx: RequestContext, networks: NetworkSet): void {
    if (logger.isLevelEnabled('info')) {
      logRequest(logger, requestLogFields(ctx, undefined, connection.id, undefined));
    }
    deps.onFinished(ctx, networks);
  }

  // --- liveness -------------------------------------------------------------------------------

  /**
   * With every ping the key of a connection that only listens is admitted again (a revoked key
   * stops its events), and the team's limits its events are charged against are refreshed.
   */
  async function recheckKey(connection: Connection): Promise<void> {
    const admission = await admitter.admit(connection.apiKey, connection.networkId, connection.facts);
    if (admission.kind === 'admitted') {
      connection.auth = admission.auth;
      return;
    }
    // The store being unreachable says nothing about the key: the connection stays.
    if (admission.error.code !== 'TG_ERR_STORE_UNAVAILABLE') closeConnection(connection, CLOSE_POLICY, 'key_invalid', admission.error.message);
  }

  const stopLiveness = startLiveness(connections, settings, deps.now, (connection) => {
    recheckKey(connection).catch((error: unknown) => logger.error({ err: error, connectionId: connection.id }, 'websocket key re-check failed unexpectedly'));
  });

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
      stopLiveness();
      for (const connection of connections) closeConnection(connection, CLOSE_GOING_AWAY, 'shutdown', 'gateway shutting down');
      deps.hub.close();
    },
  };
}
