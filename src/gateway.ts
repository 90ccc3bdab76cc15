import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { GatewayConfig } from './config/schema.js';
import { createAdminHandler, adminApiRoutes } from './admin/admin-server.js';
import { createAdminService, type AdminService } from './admin/admin-service.js';
import { createAuthenticator, type Authenticator } from './auth/authenticator.js';
import { compileKeyPolicy, createJwtCache } from './auth/key-policy.js';
import { createResponseCacheFor } from './cache/cache-setup.js';
import type { ResponseCache } from './cache/response-cache.js';
import { collectConfigSecrets } from './config/secrets.js';
import { createDisposerStack, type DisposerStack } from './lifecycle/disposer-stack.js';
import { createLogger, logScrubber, type Logger } from './logging/logger.js';
import { createMeter, type Meter } from './metering/meter.js';
import { startReservationSweep } from './metering/reservation-sweep.js';
import { createRequestRecorder } from './metrics/record.js';
import { usdOf } from './routing/upstream-price.js';
import { createProviderSpendRecorder } from './metering/provider-spend.js';
import { createQuotaTracker, type QuotaSetting } from './routing/upstream-quotas.js';
import { upstreamScope } from './routing/upstream.js';
import { createFilterIds } from './routing/filter-ids.js';
import { rankSubscriptionUpstreams } from './routing/subscription-upstreams.js';
import { createMetrics, type GatewayMetrics } from './metrics/metrics.js';
import { createScrape } from './metrics/scrape.js';
import { createThrottle } from './logging/throttle.js';
import { operationalRoutes } from './admin/operational-routes.js';
import { createConfigReloader, type ConfigReloader } from './server/config-reload.js';
import { createNetworkSetHolder, type NetworkSetHolder } from './server/network-sets.js';
import { createCallExecutor, type CallExecutor } from './server/call-executor.js';
import { createCallDispatcher } from './server/call-dispatch.js';
import { closeServer, listen, originOf } from './server/listener.js';
import { buildNetworkSet, type NetworkSet } from './server/network-runtime.js';
import { createRpcHandler, rpcServerOptions } from './server/rpc-handler.js';
import { requestFacts, type RequestContext } from './server/context.js';
import { createRequestExplorer, type RequestExplorer } from './explorer/request-explorer.js';
import type { Tracing } from './tracing/tracing.js';
import { jsonValidatorEngine } from './jsonrpc/envelope-scanner.js';
import { openStore, type Store } from './store/index.js';
import { createSubscriptionHub, type SubscriptionHub } from './websocket/subscription-hub.js';
import { connectUpstreamSocket } from './websocket/upstream-socket.js';
import { createWebSocketEndpoint, type WebSocketEndpoint } from './websocket/ws-endpoint.js';
import { createSelfService, type SelfService } from './portal/self-service.js';
import type { WebhookSenderOptions } from './alerts/webhook-sender.js';
import { groupWorkerHooks, type GroupWorkerHooks } from './cluster/group-worker-hooks.js';

/**
 * The composition root: builds the parts from the config, wires them, starts the RPC and admin
 * listeners, and owns the lifecycle (reload, drain, close). Nothing else lives here.
 *
 * Start-up is a row of small builders. Each one that opens something (the store, a timer, pools,
 * a listener) registers its undo on one disposer stack as soon as it has succeeded; if a later
 * step fails, the stack closes what is already open, last first, and the error goes to the
 * caller. Shutdown runs the same stack.
 */

export interface GatewayOptions {
  logger?: Logger;
  /** Use this store instead of opening the configured one (the caller keeps ownership). */
  store?: Store;
  /** The clock of quotas, days and deadlines; tests inject one. */
  now?: () => number;
  /** Re-reads the config for a reload (SIGHUP or the admin route); without it reload is refused. */
  loadConfig?: () => GatewayConfig;
  /** The wait between webhook retries; tests inject one that does not sleep. */
  webhookSleep?: WebhookSenderOptions['sleep'];
  /** One worker of `serve --workers N`: RPC only; the primary has the admin listener, portal, checkpoints (src/cluster/). */
  groupWorker?: boolean;
  /** How many workers the group runs (N), for what each must hold alone: its share of an upstream's rate limit without Redis. */
  groupSize?: number;
}

export interface RunningGateway {
  config: GatewayConfig;
  store: Store;
  logger: Logger;
  /** `http://host:port` of the RPC listener. */
  rpcOrigin: string;
  rpcPort: number;
  /** `http://host:port` of the admin listener ('' in a group's worker: the primary has it). */
  adminOrigin: string;
  /** `http://host:port` of the portal listener, when `portal.enabled`. */
  portalOrigin: string | undefined;
  /** Resolves when every webhook delivery started so far has ended (tests, shutdown). */
  webhooksIdle(): Promise<void>;
  /** Re-reads the config and swaps networks, upstreams and costs in; throws (and keeps the old) if invalid. */
  reload(): Promise<void>;
  /** Stops accepting, lets in-flight requests finish (bounded by `server.drainTimeoutMs`), then closes. */
  drain(): Promise<void>;
  close(): Promise<void>;
  group: GroupWorkerHooks;
}

const STORE_ERROR_LOG_INTERVAL_MS = 5_000;
/** How often provider spend totals are written to the store (one write for all calls meanwhile). */
const PROVIDER_SPEND_FLUSH_MS = 2_000;
/** How often the SQLite store's WAL is checkpointed off the event loop (sqlite-checkpointer.ts). */
const WAL_CHECKPOINT_INTERVAL_MS = 250;
/** Largest message accepted from an upstream's WebSocket (a back-filled block or a burst of logs fits easily). */
const UPSTREAM_WS_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/** Name of the filter ids' HMAC key in the store, when `filters.idSecret` is not configured. */
const FILTER_ID_SECRET = 'filter-ids';

/** What every builder gets: the config, the clock, the logger, the metrics and the disposer stack. */
interface StartContext {
  config: GatewayConfig;
  options: GatewayOptions;
  now: () => number;
  logger: Logger;
  metrics: GatewayMetrics;
  disposers: DisposerStack;
  /** Set once draining starts: every response tells its keep-alive client to close. */
  draining: { value: boolean };
}

/** The configured store (or the caller's, which the caller closes), with stale reservations refunded and swept. */
async function openGatewayStore(ctx: StartContext): Promise<Store> {
  const { config, logger, disposers } = ctx;
  let store = ctx.options.store;
  if (store === undefined) {
    const opened = await openStore(config.store, {
      now: ctx.now,
      checkpointedElsewhere: ctx.options.groupWorker,
      backgroundCheckpoints: ctx.options.groupWorker ? undefined : {
        intervalMs: WAL_CHECKPOINT_INTERVAL_MS,
        onError: (error) => logger.error({ err: error }, 'the SQLite checkpoint thread failed; checkpoints run in the commits again'),
      },
    });
    disposers.defer('store', () => opened.close());
    store = opened;
  }
  disposers.defer('reservation sweep', await startReservationSweep(store, config.credits.staleReservationMs, logger));
  return store;
}

/** The response cache (in process, and in Redis with `cache.shared`), its shared tier connected (or given up on) before serving. */
async function buildResponseCache(ctx: StartContext): Promise<ResponseCache> {
  const cache = createResponseCacheFor(ctx.config.cache, { now: ctx.now, logger: ctx.logger, metrics: ctx.metrics });
  ctx.disposers.defer('response cache', () => cache.close());
  await cache.connected();
  return cache;
}

/** Every upstream quota (`price.quota`) of a config. */
function quotaSettingsOf(config: GatewayConfig): QuotaSetting[] {
  return config.networks.flatMap((network) =>
    network.upstreams.flatMap((upstream) => (upstream.price?.quota === undefined ? [] : [{ scope: upstreamScope(network.id, upstream.id), ...upstream.price.quota }])),
  );
}

/** The networks (upstream pools, health probes) behind a holder that reloads swap. */
async function buildNetworks(ctx: StartContext, store: Store, cache: ResponseCache): Promise<{ networkSets: NetworkSetHolder; reloader: ConfigReloader }> {
  const { config, metrics } = ctx;
  // Filter ids are checked with one secret on every replica (docs/routing.md#filters).
  const filterIds = createFilterIds(config.filters.idSecret ?? (await store.sharedSecret(FILTER_ID_SECRET, randomBytes(32).toString('hex'))));
  const shouldLogPermitError = createThrottle(STORE_ERROR_LOG_INTERVAL_MS, ctx.now);
  // Upstream quotas (`price.quota`), counted by every replica in the store (docs/budgets.md).
  const quotas = createQuotaTracker(store, {
    now: ctx.now,
    syncIntervalMs: PROVIDER_SPEND_FLUSH_MS,
    onError: (error) => {
      metrics.storeErrors.inc();
      if (shouldLogPermitError()) ctx.logger.warn({ err: error }, 'could not count upstream quotas in the store; the totals are kept for the next try');
    },
  });
  ctx.disposers.defer('upstream quotas', () => quotas.close());
  const build = (source: GatewayConfig): NetworkSet => {
    quotas.configure(quotaSettingsOf(source));
    return buildNetworkSet(source, {
      now: ctx.now,
      filterIds,
      // Finalized headers the probes read feed the cache's canonical chain (reorgs below finality).
      onFinalized: (network, _upstream, header, fetchHeader) => cache.chain(network).observe(header, fetchHeader),
      observe: {
        attempt(network, upstream, outcome) {
          const label = outcome.kind === 'failure' ? outcome.reason : outcome.kind === 'result' ? 'result' : 'rpc_error';
          metrics.upstreamRequests.add(1, network, upstream, label);
          metrics.upstreamDuration.observe(outcome.durationMs / 1000, network, upstream);
        },
        probe: (network, upstream, outcome) => metrics.upstreamProbes.add(1, network, upstream, outcome.kind === 'failure' ? outcome.reason : 'ok'),
        hedge: (network, result) => metrics.hedges.add(1, network, result),
        nullConfirmation: (network, result) => metrics.nullConfirmations.add(1, network, result),
        archiveSkip: (network, upstream) => metrics.upstreamArchiveSkips.add(1, network, upstream),
        overBudget: (network, upstream) => metrics.upstreamOverBudget.add(1, network, upstream),
        upstreamSpend(network, upstream, _method, units, usdPerMillion) {
          metrics.upstreamUnits.add(units, network, upstream);
          quotas.add(network, upstream, units);
          if (usdPerMillion !== undefined) metrics.upstreamUsd.add(usdOf(units, usdPerMillion), network, upstream);
        },
      },
      // Rate-limit windows every replica shares, with a Redis store (docs/budgets.md).
      sharedPermits: store.takeUpstreamPermit === undefined ? undefined : { takeUpstreamPermit: store.takeUpstreamPermit },
      onSharedPermitsError(error) {
        metrics.storeErrors.inc();
        if (shouldLogPermitError()) ctx.logger.warn({ err: error }, 'the shared upstream rate-limit windows are unreachable; each process counts alone meanwhile');
      },
      quotaSpent: (scope) => quotas.spent(scope),
      // Without shared windows (SQLite), each of N workers holds 1/N of a declared limit, so the machine holds it all.
      rateLimitShare: store.takeUpstreamPermit === undefined ? 1 / Math.max(1, ctx.options.groupSize ?? 1) : 1,
    });
  };
  const networkSets = createNetworkSetHolder(build(config));
  ctx.disposers.defer('networks', () => networkSets.closeAll());
  const reloader = createConfigReloader({
    initial: config,
    loadConfig: ctx.options.loadConfig,
    buildNetworks: build,
    networkSets,
    logger: ctx.logger,
    onReload: (result) => ctx.options.groupWorker || metrics.configReloads.inc({ result }), // a group's primary counts them
  });
  return { networkSets, reloader };
}

interface Accounting {
  authenticator: Authenticator;
  selfService: SelfService;
  meter: Meter;
  cache: ResponseCache;
}

/** Who may call (keys, JWTs), what it costs (the meter, quota alerts), and the response cache beside them. */
function buildAccounting(ctx: StartContext, store: Store, cache: ResponseCache): Accounting {
  const { config, now, metrics } = ctx;
  const jwtCache = createJwtCache(config.auth.jwtCacheMaxEntries);
  const authenticator = createAuthenticator(store, {
    ttlMs: config.auth.keyCacheTtlMs,
    maxEntries: config.auth.keyCacheMaxEntries,
    now,
    compilePolicy: (found) => compileKeyPolicy(found.key.settings, found.keySecretHash, { jwtCache, now }),
  });
  const selfService = createSelfService(config, store, {
    now,
    logger: ctx.logger,
    metrics,
    webhookSleep: ctx.options.webhookSleep,
    defaultRotationGraceMs: config.auth.rotationGraceMs,
  });
  const meter = createMeter(selfService.watchLedger(store), { now });
  // Charges still buffered are written before the networks and the store close.
  ctx.disposers.defer('meter', async () => {
    await meter.flush();
    meter.close();
  });
  // Key event checks and the portal listener (started once the admin listener is up); closing also ends webhook deliveries.
  ctx.disposers.defer('self-service', () => selfService.close());
  return { authenticator, selfService, meter, cache };
}

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
async function buildTracing(ctx: StartContext): Promise<Tracing | undefined> {
  const settings = ctx.config.tracing;
  if (settings === undefined) return undefined;
  const { createTracing } = await import('./tracing/tracing.js');
  const tracing = createTracing(settings);
  ctx.disposers.defer('tracing', () => tracing.close());
  return tracing;
}

/** The RPC listener (not yet listening): HTTP JSON-RPC and the WebSocket endpoint on one server. */
function buildRpcServer(
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
  const calls = createCallDispatcher({ executor, logger });
  const onFinished = (request: RequestContext, set: NetworkSet): void => {
    networkSets.release(set);
    recordRequest(request);
    if (request.trace !== undefined) request.trace.end(requestFacts(request));
    explorer?.record(request);
  };
  const rpcHandler = createRpcHandler({
    server: config.server,
    authenticator,
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
    authenticator,
    calls,
    executor,
    meter,
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

/** The admin listener (not yet listening): operational routes, the admin API, self-service routes. */
function buildAdminServer(
  ctx: StartContext,
  parts: { store: Store; accounting: Accounting; networkSets: NetworkSetHolder; reloader: ConfigReloader },
): { admin: AdminService; adminServer: Server } {
  const { config } = ctx;
  const { store, accounting, networkSets } = parts;
  const operational = operationalRoutes({
    store,
    networks: networkSets.current,
    draining: () => ctx.draining.value,
    scrape: createScrape(ctx.metrics, { cache: accounting.cache, inFlight: networkSets.inFlight, networks: networkSets.current }),
    reload: parts.reloader.reload,
  });
  const admin = createAdminService(store, {
    now: ctx.now,
    onChange: () => accounting.authenticator.clear(),
    onKeyRevoked: accounting.selfService.onKeyRevoked,
  });
  const routes = [
    ...operational,
    ...adminApiRoutes(admin, { defaultRotationGraceMs: config.auth.rotationGraceMs }),
    ...accounting.selfService.adminRoutes(admin),
  ];
  const adminServer = createServer(createAdminHandler(routes, { token: config.admin.token, logger: ctx.logger }));
  return { admin, adminServer };
}

export async function startGateway(config: GatewayConfig, options: GatewayOptions = {}): Promise<RunningGateway> {
  const configSecrets = [...collectConfigSecrets(config), ...(config.admin.token ? [config.admin.token] : [])];
  const logger = options.logger ?? createLogger({ secrets: configSecrets });
  // Known secrets are scrubbed from error text and refused as request ids, whoever made the logger.
  logScrubber(logger).add(configSecrets);
  const disposers = createDisposerStack((name, error) => logger.error({ err: error, part: name }, 'closing a part of the gateway failed'));
  const ctx: StartContext = { config, options, now: options.now ?? Date.now, logger, metrics: createMetrics(), disposers, draining: { value: false } };

  try {
    const store = await openGatewayStore(ctx);
    const cache = await buildResponseCache(ctx);
    const { networkSets, reloader } = await buildNetworks(ctx, store, cache);
    const accounting = buildAccounting(ctx, store, cache);
    const { rpcServer, webSocket } = buildRpcServer(ctx, accounting, networkSets, store, await buildTracing(ctx));
    const { admin, adminServer } = buildAdminServer(ctx, { store, accounting, networkSets, reloader });

    // Listeners last, each closed (with its connections) before anything it uses.
    const rpcAddress = await listen(rpcServer, config.server.port, config.server.host);
    disposers.defer('rpc listener', async () => {
      webSocket.close();
      rpcServer.closeAllConnections();
      await closeServer(rpcServer);
    });
    const adminAddress = options.groupWorker ? undefined : await listen(adminServer, config.admin.port, config.admin.host);
    disposers.defer('admin listener', () => closeServer(adminServer));
    const portalOrigin = options.groupWorker ? undefined : await accounting.selfService.start(admin);

    const rpcOrigin = originOf(rpcAddress);
    const adminOrigin = adminAddress === undefined ? '' : originOf(adminAddress);
    if (jsonValidatorEngine === 'wasm-simd') logger.info({ jsonValidator: jsonValidatorEngine }, 'upstream answers are validated by the WebAssembly SIMD JSON validator');
    else logger.warn({ jsonValidator: jsonValidatorEngine }, 'this Node has no WebAssembly SIMD: upstream answers are validated by the JavaScript JSON scan (about 3 times slower on large answers)');
    logger.info({ rpc: rpcOrigin, admin: adminOrigin, portal: portalOrigin, networks: [...networkSets.current().byId.keys()] }, options.groupWorker ? 'worker listening' : 'gateway listening');
    const group = groupWorkerHooks(ctx.metrics, { ...accounting, store, inFlight: networkSets.inFlight, networks: networkSets.current, draining: () => ctx.draining.value });
    return runningGateway(ctx, { store, reloader, rpcServer, webSocket, selfService: accounting.selfService, rpcOrigin, rpcPort: rpcAddress.port, adminOrigin, portalOrigin, group });
  } catch (error) {
    await disposers.disposeAll();
    throw error;
  }
}

function runningGateway(
  ctx: StartContext,
  parts: {
    store: Store;
    reloader: ConfigReloader;
    rpcServer: Server;
    webSocket: WebSocketEndpoint;
    selfService: SelfService;
    rpcOrigin: string;
    rpcPort: number;
    adminOrigin: string;
    portalOrigin: string | undefined;
    group: GroupWorkerHooks;
  },
): RunningGateway {
  const { config, logger, disposers } = ctx;
  const { reloader, rpcServer, webSocket } = parts;
  const close = (): Promise<void> => disposers.disposeAll();
  return {
    get config() {
      return reloader.current();
    },
    store: parts.store,
    logger,
    rpcOrigin: parts.rpcOrigin,
    rpcPort: parts.rpcPort,
    adminOrigin: parts.adminOrigin,
    portalOrigin: parts.portalOrigin,
    webhooksIdle: () => parts.selfService.alerting.sender.idle(),
    reload: reloader.reload,
    async drain() {
      ctx.draining.value = true;
      // WebSocket clients are told to go (1001) at once: a stream has no end to wait for.
      webSocket.close();
      logger.info({ graceMs: config.server.drainTimeoutMs }, 'draining: refusing new connections, finishing in-flight requests');
      const drained = closeServer(rpcServer);
      const timer = setTimeout(() => {
        logger.warn('drain grace period over: closing remaining connections');
        rpcServer.closeAllConnections();
      }, config.server.drainTimeoutMs);
      await drained;
      clearTimeout(timer);
      await close();
    },
    close,
    group: parts.group,
  };
}
