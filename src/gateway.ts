import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { GatewayConfig } from './config/schema.js';
import { createAdminHandler, adminApiRoutes } from './admin/admin-server.js';
import { createAdminService, type AdminService } from './admin/admin-service.js';
import { createAuthenticator } from './auth/authenticator.js';
import { compileKeyPolicy, createJwtCache } from './auth/key-policy.js';
import { createResponseCacheFor } from './cache/cache-setup.js';
import type { ResponseCache } from './cache/response-cache.js';
import { collectConfigSecrets } from './config/secrets.js';
import { createDisposerStack } from './lifecycle/disposer-stack.js';
import { createLogger, logScrubber, setLogLevel, type Logger } from './logging/logger.js';
import { createMeter } from './metering/meter.js';
import { startReservationSweep } from './metering/reservation-sweep.js';
import { usdOf } from './routing/upstream-price.js';
import { createQuotaTracker, type QuotaSetting } from './routing/upstream-quotas.js';
import { upstreamScope } from './routing/upstream.js';
import { createFilterIds } from './routing/filter-ids.js';
import { createMetrics } from './metrics/metrics.js';
import { createScrape } from './metrics/scrape.js';
import { createThrottle } from './logging/throttle.js';
import { operationalRoutes } from './admin/operational-routes.js';
import { createConfigReloader, type ConfigReloader } from './server/config-reload.js';
import { createNetworkSetHolder, type NetworkSetHolder } from './server/network-sets.js';
import { closeServer, listen, originOf } from './server/listener.js';
import { buildNetworkSet, type NetworkSet } from './server/network-runtime.js';
import { jsonValidatorEngine } from './jsonrpc/envelope-scanner.js';
import { openStore, type Store } from './store/index.js';
import type { WebSocketEndpoint } from './websocket/ws-endpoint.js';
import { createSelfService, type SelfService } from './portal/self-service.js';
import { groupWorkerHooks, type GroupWorkerHooks } from './cluster/group-worker-hooks.js';
import { buildRpcServer, buildTracing } from './startup/rpc-server.js';
import { PROVIDER_SPEND_FLUSH_MS, STORE_ERROR_LOG_INTERVAL_MS, type Accounting, type GatewayOptions, type StartContext } from './startup/start-context.js';

export type { GatewayOptions } from './startup/start-context.js';

/**
 * The composition root: builds the parts from the config, wires them, starts the RPC and admin
 * listeners, and owns the lifecycle (reload, drain, close). Nothing else lives here.
 *
 * Start-up is a row of small builders. Each one that opens something (the store, a timer, pools,
 * a listener) registers its undo on one disposer stack as soon as it has succeeded; if a later
 * step fails, the stack closes what is already open, last first, and the error goes to the
 * caller. Shutdown runs the same stack.
 */

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
  /** Resolves when every quota check started so far has ended, and every webhook delivery it or anything else started (tests, shutdown). */
  webhooksIdle(): Promise<void>;
  /** Re-reads the config and swaps networks, upstreams and costs in; throws (and keeps the old) if invalid. */
  reload(): Promise<void>;
  /** Stops accepting, lets in-flight requests finish (bounded by `server.drainTimeoutMs`), then closes. */
  drain(): Promise<void>;
  close(): Promise<void>;
  group: GroupWorkerHooks;
}

/** How often the SQLite store's WAL is checkpointed off the event loop (sqlite-checkpointer.ts). */
const WAL_CHECKPOINT_INTERVAL_MS = 250;
/** Name of the filter ids' HMAC key in the store, when `filters.idSecret` is not configured. */
const FILTER_ID_SECRET = 'filter-ids';


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
    logLevel: () => ctx.logger.level,
    setLogLevel: async (level) => setLogLevel(ctx.logger, level),
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
    async webhooksIdle() {
      // The quota alerts' claims first: a claim still in flight hands its event to the sender later.
      await parts.selfService.alerting.quota.idle();
      await parts.selfService.alerting.sender.idle();
    },
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
