import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { GatewayConfig } from './config/schema.js';
import { createAdminHandler, adminApiRoutes } from './admin/admin-server.js';
import { createAdminService } from './admin/admin-service.js';
import { createAuthenticator } from './auth/authenticator.js';
import { compileKeyPolicy, createJwtCache } from './auth/key-policy.js';
import { createBlockCache, createDisabledBlockCache } from './cache/block-cache.js';
import { collectConfigSecrets } from './config/secrets.js';
import { createLogger, logScrubber, type Logger } from './logging/logger.js';
import { createMeter } from './metering/meter.js';
import { createRequestRecorder } from './metrics/record.js';
import { createFilterIds } from './routing/filter-ids.js';
import { createMetrics } from './metrics/metrics.js';
import { createScrape } from './metrics/scrape.js';
import { createThrottle } from './logging/throttle.js';
import { operationalRoutes } from './admin/operational-routes.js';
import { createConfigReloader } from './server/config-reload.js';
import { createNetworkSetHolder } from './server/network-sets.js';
import { createCallExecutor } from './server/call-executor.js';
import { createCallDispatcher } from './server/call-dispatch.js';
import { buildNetworkSet, type NetworkSet } from './server/network-runtime.js';
import { createRpcHandler, rpcServerOptions } from './server/rpc-handler.js';
import { jsonValidatorEngine } from './jsonrpc/envelope-scanner.js';
import { openStore, type Store } from './store/index.js';
import { createSubscriptionHub } from './websocket/subscription-hub.js';
import { connectUpstreamSocket } from './websocket/upstream-socket.js';
import { servesSubscriptions } from './websocket/subscribe-params.js';
import { createWebSocketEndpoint } from './websocket/ws-endpoint.js';
import { createSelfService } from './portal/self-service.js';
import type { WebhookSenderOptions } from './alerts/webhook-sender.js';

/**
 * The composition root: builds the parts from the config, wires them, starts the RPC and admin
 * listeners, and owns the lifecycle (reload, drain, close). Nothing else lives here.
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
}

export interface RunningGateway {
  config: GatewayConfig;
  store: Store;
  logger: Logger;
  /** `http://host:port` of the RPC listener. */
  rpcOrigin: string;
  rpcPort: number;
  /** `http://host:port` of the admin listener. */
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
}

/** How often reservations older than `credits.staleReservationMs` (or of dead processes) are looked for. */
const RESERVATION_SWEEP_INTERVAL_MS = 15_000;
const STORE_ERROR_LOG_INTERVAL_MS = 5_000;
/** How often the SQLite store's WAL is checkpointed off the event loop (sqlite-checkpointer.ts). */
const WAL_CHECKPOINT_INTERVAL_MS = 250;
/** Largest message accepted from an upstream's WebSocket (a back-filled block or a burst of logs fits easily). */
const UPSTREAM_WS_MAX_MESSAGE_BYTES = 64 * 1024 * 1024;
/** Name of the filter ids' HMAC key in the store, when `filters.idSecret` is not configured. */
const FILTER_ID_SECRET = 'filter-ids';

function listen(server: Server, port: number, host: string): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve(server.address() as AddressInfo);
    });
  });
}

function originOf(address: AddressInfo): string {
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const reachable = host === '0.0.0.0' ? '127.0.0.1' : host === '[::]' ? '[::1]' : host;
  return `http://${reachable}:${address.port}`;
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) return resolve();
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}

export async function startGateway(config: GatewayConfig, options: GatewayOptions = {}): Promise<RunningGateway> {
  const now = options.now ?? Date.now;
  const configSecrets = [...collectConfigSecrets(config), ...(config.admin.token ? [config.admin.token] : [])];
  const logger = options.logger ?? createLogger({ secrets: configSecrets });
  // Known secrets are scrubbed from error text and refused as request ids, whoever made the logger.
  logScrubber(logger).add(configSecrets);
  const ownsStore = options.store === undefined;
  const store =
    options.store ??
    (await openStore(config.store, {
      now,
      backgroundCheckpoints: {
        intervalMs: WAL_CHECKPOINT_INTERVAL_MS,
        onError: (error) => logger.error({ err: error }, 'the SQLite checkpoint thread failed; checkpoints run in the commits again'),
      },
    }));
  const metrics = createMetrics();
  const recordRequest = createRequestRecorder(metrics);

  // Credits held by requests of a process that died (kill -9) go back before serving.
  const recovered = await store.recoverReservations(config.credits.staleReservationMs);
  if (recovered > 0) logger.warn({ reservations: recovered }, 'refunded reservations of requests that never finished');
  const sweep = setInterval(() => {
    store.recoverReservations(config.credits.staleReservationMs).then(
      (count) => count > 0 && logger.warn({ reservations: count }, 'refunded stale reservations'),
      (error: unknown) => logger.error({ err: error }, 'reservation sweep failed'),
    );
  }, RESERVATION_SWEEP_INTERVAL_MS);
  sweep.unref();

  const jwtCache = createJwtCache(config.auth.jwtCacheMaxEntries);
  const authenticator = createAuthenticator(store, {
    ttlMs: config.auth.keyCacheTtlMs,
    maxEntries: config.auth.keyCacheMaxEntries,
    now,
    compilePolicy: (found) => compileKeyPolicy(found.key.settings, found.keySecretHash, { jwtCache, now }),
  });
  const selfService = createSelfService(config, store, { now, logger, metrics, webhookSleep: options.webhookSleep, defaultRotationGraceMs: config.auth.rotationGraceMs });
  const meter = createMeter(selfService.watchLedger(store), { now });
  const cache =
    config.cache.maxBytes > 0
      ? createBlockCache({ maxBytes: config.cache.maxBytes, onEvict: () => metrics.cacheEvictions.inc() })
      : createDisabledBlockCache();

  // Filter ids are checked with one secret on every replica (docs/routing.md#filters).
  const filterIds = createFilterIds(config.filters.idSecret ?? (await store.sharedSecret(FILTER_ID_SECRET, randomBytes(32).toString('hex'))));
  const buildNetworks = (source: GatewayConfig): NetworkSet =>
    buildNetworkSet(source, {
      now,
      filterIds,
      observe: {
        attempt(network, upstream, outcome) {
          const label = outcome.kind === 'failure' ? outcome.reason : outcome.kind === 'result' ? 'result' : 'rpc_error';
          metrics.upstreamRequests.add(1, network, upstream, label);
          metrics.upstreamDuration.observe(outcome.durationMs / 1000, network, upstream);
        },
        probe: (network, upstream, outcome) => metrics.upstreamProbes.add(1, network, upstream, outcome.kind === 'failure' ? outcome.reason : 'ok'),
        hedge: (network, result) => metrics.hedges.add(1, network, result),
        nullConfirmation: (network, result) => metrics.nullConfirmations.add(1, network, result),
      },
    });
  const networkSets = createNetworkSetHolder(buildNetworks(config));
  const reloader = createConfigReloader({
    initial: config,
    loadConfig: options.loadConfig,
    buildNetworks,
    networkSets,
    logger,
    onReload: (result) => metrics.configReloads.inc({ result }),
  });
  const shouldLogStoreError = createThrottle(STORE_ERROR_LOG_INTERVAL_MS, now);
  let draining = false;

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
      onCacheLookup: (network, hit) => metrics.cacheLookups.add(1, network, hit ? 'hit' : 'miss'),
  });
  const calls = createCallDispatcher({ executor, logger });
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
    draining: () => draining,
    onFinished: (ctx, set) => {
      networkSets.release(set);
      recordRequest(ctx);
    },
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
    onFinished: (ctx, set) => {
      networkSets.release(set);
      recordRequest(ctx);
    },
    authenticator,
    calls,
    executor,
    meter,
    now,
    logger,
    hub: createSubscriptionHub({
      network(networkId) {
        const runtime = networkSets.current().byId.get(networkId);
        if (runtime === undefined) return undefined;
        return {
          candidates() {
            const ordered = runtime.forwarder.selector.order().map((upstream) => upstream.id);
            const withWs = runtime.forwarder.upstreams.filter((upstream) => servesSubscriptions(upstream.config));
            // Healthy upstreams in routing order first, then those whose circuit is open.
            const rank = (id: string) => (ordered.includes(id) ? ordered.indexOf(id) : ordered.length);
            return withWs
              .sort((a, b) => rank(a.id) - rank(b.id))
              .map((upstream) => ({ id: upstream.id, wsUrl: upstream.config.wsUrl!, probedHead: () => upstream.health.head }));
          },
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
      logger,
      now,
      observe: {
        upstreamSubscriptions: (network, kind, delta) => metrics.wsUpstreamSubscriptions.inc({ network, type: kind }, delta),
        failover: (network, upstream, reason) => metrics.wsUpstreamFailovers.inc({ network, upstream, reason: reason.slice(0, 40) }),
      },
    }),
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

  const operational = operationalRoutes({
    store,
    networks: networkSets.current,
    draining: () => draining,
    scrape: createScrape(metrics, { cache, inFlight: networkSets.inFlight, networks: networkSets.current }),
    reload: reloader.reload,
  });
  const admin = createAdminService(store, { now, onChange: () => authenticator.clear(), onKeyRevoked: selfService.onKeyRevoked });
  const adminServer = createServer(
    createAdminHandler([...operational, ...adminApiRoutes(admin, { defaultRotationGraceMs: config.auth.rotationGraceMs }), ...selfService.adminRoutes(admin)], {
      token: config.admin.token,
      logger,
    }),
  );

  const rpcAddress = await listen(rpcServer, config.server.port, config.server.host);
  const adminAddress = await listen(adminServer, config.admin.port, config.admin.host);
  const rpcOrigin = originOf(rpcAddress);
  const adminOrigin = originOf(adminAddress);
  const portalOrigin = await selfService.start(admin);
  if (jsonValidatorEngine === 'wasm-simd') logger.info({ jsonValidator: jsonValidatorEngine }, 'upstream answers are validated by the WebAssembly SIMD JSON validator');
  else logger.warn({ jsonValidator: jsonValidatorEngine }, 'this Node has no WebAssembly SIMD: upstream answers are validated by the JavaScript JSON scan (about 3 times slower on large answers)');
  logger.info({ rpc: rpcOrigin, admin: adminOrigin, portal: portalOrigin, networks: [...networkSets.current().byId.keys()] }, 'gateway listening');

  let closing: Promise<void> | undefined;
  function close(): Promise<void> {
    closing ??= (async () => {
      clearInterval(sweep);
      webSocket.close();
      rpcServer.closeAllConnections();
      await closeServer(rpcServer);
      await closeServer(adminServer);
      await selfService.close();
      await meter.flush();
      meter.close();
      await networkSets.closeAll();
      if (ownsStore) await store.close();
    })();
    return closing;
  }

  return {
    get config() {
      return reloader.current();
    },
    store,
    logger,
    rpcOrigin,
    rpcPort: rpcAddress.port,
    adminOrigin,
    portalOrigin,
    webhooksIdle: () => selfService.alerting.sender.idle(),
    reload: reloader.reload,
    async drain() {
      draining = true;
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
  };
}
