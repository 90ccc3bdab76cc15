import { createServer, type Server } from 'node:http';
import { createCallExecutor, type CallExecutor } from '../server/call-executor.js';
import { createCallDispatcher } from '../server/call-dispatch.js';
import { createAdmitter } from '../server/admission.js';
import { createRpcHandler } from '../server/rpc-handler.js';
import { rpcServerOptions } from '../server/http-connections.js';
import { requestFacts, type RequestContext } from '../server/context.js';
import type { NetworkSetHolder } from '../server/network-sets.js';
import type { NetworkSet } from '../server/network-runtime.js';
import { compileOrigins } from '../auth/key-settings.js';
import { createRequestRecorder } from '../metrics/record.js';
import { createProviderSpendRecorder } from '../metering/provider-spend.js';
import { createThrottle } from '../logging/throttle.js';
import { logScrubber } from '../logging/logger.js';
import { createRequestExplorer, type RequestExplorer } from '../explorer/request-explorer.js';
import type { Tracing } from '../tracing/tracing.js';
import type { Store } from '../store/index.js';
import { rankSubscriptionUpstreams } from '../routing/subscription-upstreams.js';
import { createSubscriptionHub } from '../websocket/subscription-hub.js';
import type { SubscriptionHub } from '../websocket/subscription-types.js';
import { connectUpstreamSocket } from '../websocket/upstream-socket.js';
import { createWebSocketEndpoint, type WebSocketEndpoint } from '../websocket/ws-endpoint.js';
import { PROVIDER_SPEND_FLUSH_MS, STORE_ERROR_LOG_INTERVAL_MS, type Accounting, type StartContext } from './start-context.js';

/**
 * The RPC listener's builders: the call core (admission, executor, dispatcher) and its two
 * adapters, the HTTP handler and the WebSocket endpoint, on one server; the subscription hub, the
 * request explorer and tracing beside them.
 */

/** Largest message accepted from an upstream's WebSocket (a back-filled block or a burst of logs fits easily). */
const UPSTREAM_WS_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/** The upstream WebSocket feeds that carry subscriptions, tried in routing order; back-fills of logs over HTTP. */
function buildSubscriptionHub(ctx: StartContext, networkSets: NetworkSetHolder, executor: CallExecutor): SubscriptionHub {
  const { metrics } = ctx;
  return createSubscriptionHub({
    network(networkId) {
      const runtime = networkSets.current().byId.get(networkId);
      if (runtime === undefined) return undefined;
      return {
        candidates: () => rankSubscriptionUpstreams(runtime.forwarder),
        stallTimeoutMs: runtime.config.subscriptions.stallTimeoutMs,
        verification: runtime.config.verification,
        reconnectDelayMs: runtime.config.subscriptions.reconnectDelayMs,
        requestTimeoutMs: runtime.config.requestTimeoutMs,
      };
    },
    connect(networkId, candidate, onClose) {
      const upstream = networkSets.current().byId.get(networkId)?.forwarder.upstreams.find((entry) => entry.id === candidate.id);
      return connectUpstreamSocket({
        upstreamId: candidate.id,
        url: candidate.wsUrl,
        headers: upstream?.config.headers ?? {},
        connectTimeoutMs: upstream?.timeoutMs ?? 5_000,
        maxMessageBytes: UPSTREAM_WS_MAX_MESSAGE_BYTES,
        onClose,
      });
    },
    async getLogs(networkId, filter, fromBlock, toBlock) {
      // Held like a request's set: a reload during the back-fill does not close the pools it uses.
      const set = networkSets.acquire();
      try {
        const runtime = set.byId.get(networkId);
        if (runtime === undefined) throw new Error(`the network ${networkId} is no longer configured`);
        const outcome = await executor.internalLogs(runtime, filter, { from: fromBlock, to: toBlock }, ctx.now() + runtime.config.requestTimeoutMs);
        if (outcome.kind === 'failed') throw outcome.error;
        if (outcome.kind === 'rpc-error') throw new Error(`${outcome.upstream} answered eth_getLogs with ${outcome.error.code}: ${outcome.error.message}`);
        const logs: unknown = JSON.parse(outcome.resultBytes.toString('utf8'));
        if (!Array.isArray(logs)) throw new Error('the eth_getLogs answer of a back-fill is not an array');
        return logs;
      } finally {
        networkSets.release(set);
      }
    },
    upstreamFailed(networkId, upstreamId, reason) {
      // Ranked lower for calls too: an unverified block as the wrong answer it is, any other fault
      // of its socket as a socket fault (neither touches the circuit, which its HTTP calls decide).
      const health = networkSets.current().byId.get(networkId)?.forwarder.upstreams.find((entry) => entry.id === upstreamId)?.health;
      if (reason === 'unverified_block') health?.recordWrongAnswer();
      else health?.recordSocketFault();
    },
    logger: ctx.logger,
    now: ctx.now,
    observe: {
      upstreamSubscriptions: (network, kind, delta) => metrics.wsUpstreamSubscriptions.inc({ network, type: kind }, delta),
      failover: (network, upstream, reason) => metrics.wsUpstreamFailovers.inc({ network, upstream, reason: reason.slice(0, 40) }),
    },
  });
}

/** The request explorer's writer (off with `explorer.enabled: false`); what it holds is written before the store closes. */
function buildRequestExplorer(ctx: StartContext, store: Store): RequestExplorer | undefined {
  const { config, metrics } = ctx;
  if (!config.explorer.enabled) return undefined;
  const explorer = createRequestExplorer({
    store,
    now: ctx.now,
    scrubber: logScrubber(ctx.logger),
    logger: ctx.logger,
    flushIntervalMs: config.explorer.flushIntervalMs,
    observe: {
      flushed: (records) => {
        metrics.explorerWrites.inc();
        metrics.explorerRecords.inc(records);
      },
      dropped: (records) => metrics.explorerDropped.inc(records),
      superseded: (records) => metrics.explorerSuperseded.inc(records),
    },
  });
  ctx.disposers.defer('request explorer', () => explorer.close());
  return explorer;
}

/**
 * OpenTelemetry traces when `tracing` is configured; spans still buffered are exported on close.
 * The SDK is loaded only then: every CLI command starts faster without it.
 */
export async function buildTracing(ctx: StartContext): Promise<Tracing | undefined> {
  const settings = ctx.config.tracing;
  if (settings === undefined) return undefined;
  const { createTracing } = await import('../tracing/tracing.js');
  const tracing = createTracing(settings);
  ctx.disposers.defer('tracing', () => tracing.close());
  return tracing;
}

/** The RPC listener (not yet listening): HTTP JSON-RPC and the WebSocket endpoint on one server. */
export function buildRpcServer(
  ctx: StartContext,
  accounting: Accounting,
  networkSets: NetworkSetHolder,
  store: Store,
  tracing: Tracing | undefined,
): { rpcServer: Server; webSocket: WebSocketEndpoint } {
  const { config, now, logger, metrics } = ctx;
  const { authenticator, meter, cache } = accounting;
  const recordRequest = createRequestRecorder(metrics);
  const explorer = buildRequestExplorer(ctx, store);
  const shouldLogStoreError = createThrottle(STORE_ERROR_LOG_INTERVAL_MS, now);
  const providerSpend = createProviderSpendRecorder(store, {
    now,
    flushIntervalMs: PROVIDER_SPEND_FLUSH_MS,
    onError: (error) => {
      metrics.storeErrors.inc();
      if (shouldLogStoreError()) logger.error({ err: error }, 'could not write provider spend to the store; it is kept for the next write');
    },
  });
  ctx.disposers.defer('provider spend', () => providerSpend.close());
  // The request path both transports share (HTTP and WebSocket): validate, price, route, charge.
  const executor = createCallExecutor({
    meter,
    cache,
    now,
    failOpen: config.store.driver === 'redis' && config.store.failOpen,
    commitsWaitForReplicas: config.store.driver === 'redis' && (config.store.waitReplicas ?? 0) > 0,
    onStoreError: (error) => {
      metrics.storeErrors.inc();
      if (shouldLogStoreError()) logger.error({ err: error }, 'the store is unreachable; answering per the store failure policy');
    },
    onCacheLookup: (network, hit) => metrics.cacheLookups.add(1, network, 'eth_getBlockByHash', 'memory', hit ? 'hit' : 'miss'),
    onUpstreamCallSaved(network, method, reason) {
      metrics.cacheCallsSaved.add(1, network, method, reason);
      const saved = networkSets.current().byId.get(network)?.forwarder.savedBy(method);
      if (saved !== undefined) metrics.upstreamUnitsSaved.add(saved.units, network, saved.upstream);
    },
    onProviderSpend: (subject, spend) => providerSpend.add(subject, spend),
    onProviderSaved: (subject, savedUnits) => providerSpend.addSaved(subject, savedUnits),
    onLogsCall: (network, method, upstreamCalls) => metrics.logsUpstreamCalls.observe(upstreamCalls, network, method),
  });
  const calls = createCallDispatcher({ executor, meter, logger });
  // One admission for both transports: the same key, network and settings checks in the same order.
  const admitter = createAdmitter({
    authenticator,
    gatewayAllowsOrigin: compileOrigins(config.server.cors.allowedOrigins),
    trustedProxies: config.server.trustedProxies,
  });
  const onFinished = (request: RequestContext, set: NetworkSet): void => {
    networkSets.release(set);
    recordRequest(request);
    if (request.trace !== undefined) request.trace.end(requestFacts(request));
    explorer?.record(request);
  };
  const rpcHandler = createRpcHandler({
    server: config.server,
    admitter,
    calls,
    meter,
    now,
    logger,
    acquireNetworks: networkSets.acquire,
    // While draining, every response tells its keep-alive client to close, so the drain ends
    // with the last response rather than a keep-alive timeout.
    draining: () => ctx.draining.value,
    onFinished,
    startTrace: tracing === undefined ? undefined : (headers) => tracing.startRequest(headers, 'http'),
  });
  // Node's header and request timeouts, checked every second (docs/security.md), and a JSON-RPC
  // answer for bytes its HTTP parser refuses.
  const rpcServer = createServer(rpcServerOptions(config.server), rpcHandler);
  rpcServer.on('clientError', rpcHandler.clientError);
  rpcServer.on('checkContinue', rpcHandler.checkContinue);
  rpcServer.on('connection', rpcHandler.connection);
  const webSocket = createWebSocketEndpoint({
    server: config.server,
    acquireNetworks: networkSets.acquire,
    currentNetworks: networkSets.current,
    onFinished,
    admitter,
    calls,
    now,
    logger,
    hub: buildSubscriptionHub(ctx, networkSets, executor),
    startTrace: tracing === undefined ? undefined : () => tracing.startRequest(undefined, 'ws'),
    observe: {
      connections: (network, delta) => metrics.wsConnections.inc({ network }, delta),
      subscriptions: (network, kind, delta) => metrics.wsSubscriptions.inc({ network, type: kind }, delta),
      delivered: (network, kind) => metrics.wsEventsDelivered.add(1, network, kind),
      dropped: (network, kind, reason) => metrics.wsEventsDropped.add(1, network, kind, reason),
      disconnected: (reason) => metrics.wsDisconnects.inc({ reason }),
      eventCredits: (network, kind, team, credits) => metrics.creditsCharged.add(credits, network, 'eth_subscription', team),
      rejected: (status) => metrics.wsUpgradesRejected.inc({ status: String(status) }),
    },
  });
  webSocket.attach(rpcServer);
  return { rpcServer, webSocket };
}
