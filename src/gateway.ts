import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { GatewayConfig } from './config/schema.js';
import { createAdminHandler, adminApiRoutes, type AdminRoute } from './admin/admin-server.js';
import { createAdminService } from './admin/admin-service.js';
import { createAuthenticator } from './auth/authenticator.js';
import { compileKeyPolicy, createJwtCache } from './auth/key-policy.js';
import { createBlockCache, createDisabledBlockCache } from './cache/block-cache.js';
import { collectConfigSecrets } from './config/secrets.js';
import { createLogger, logScrubber, type Logger } from './logging/logger.js';
import { createMeter } from './metering/meter.js';
import { createRequestRecorder } from './metrics/record.js';
import { createMetrics } from './metrics/metrics.js';
import { recordUpstreamState } from './metrics/upstream-state.js';
import { createCallExecutor } from './server/call-executor.js';
import { buildNetworkSet, type NetworkSet } from './server/network-runtime.js';
import { createRpcHandler, rpcServerOptions } from './server/rpc-handler.js';
import { openStore, type Store } from './store/index.js';

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
  const logger = options.logger ?? createLogger({ secrets: [...collectConfigSecrets(config), ...(config.admin.token ? [config.admin.token] : [])] });
  // Known secrets are scrubbed from error text and refused as request ids, whoever made the logger.
  logScrubber(logger).add([...collectConfigSecrets(config), ...(config.admin.token ? [config.admin.token] : [])]);
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
  const meter = createMeter(store, { now });
  const cache =
    config.cache.maxBytes > 0
      ? createBlockCache({ maxBytes: config.cache.maxBytes, onEvict: () => metrics.cacheEvictions.inc() })
      : createDisabledBlockCache();

  const buildNetworks = (source: GatewayConfig): NetworkSet =>
    buildNetworkSet(source, {
      now,
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
  let current = config;
  let lastStoreErrorLog = 0;
  let networks = buildNetworks(config);
  let draining = false;

  const rpcHandler = createRpcHandler({
    server: config.server,
    authenticator,
    executor: createCallExecutor({
      meter,
      cache,
      now,
      failOpen: config.store.driver === 'redis' && config.store.failOpen,
      onStoreError: (error) => {
        metrics.storeErrors.inc();
        // One log line per burst: a Redis outage would otherwise log every request.
        if (Date.now() - lastStoreErrorLog > STORE_ERROR_LOG_INTERVAL_MS) {
          lastStoreErrorLog = Date.now();
          logger.error({ err: error }, 'the store is unreachable; answering per the store failure policy');
        }
      },
      onCacheLookup: (network, hit) => metrics.cacheLookups.add(1, network, hit ? 'hit' : 'miss'),
    }),
    meter,
    now,
    logger,
    acquireNetworks: () => acquireNetworks(),
    // While draining, every response tells its keep-alive client to close, so the drain ends
    // with the last response rather than a keep-alive timeout.
    draining: () => draining,
    onFinished: (ctx, set) => {
      releaseNetworks(set);
      recordRequest(ctx);
    },
  });
  // Node's header and request timeouts, checked every second (docs/security.md), and a JSON-RPC
  // answer for bytes its HTTP parser refuses.
  const rpcServer = createServer(rpcServerOptions(config.server), rpcHandler);
  rpcServer.on('clientError', rpcHandler.clientError);
  rpcServer.on('checkContinue', rpcHandler.checkContinue);
  rpcServer.on('connection', rpcHandler.connection);

  // Each request holds the network set it started on. A set replaced by a reload is closed only
  // once the last request that started on it is done, so a request in flight keeps the pools of
  // the upstreams it has not tried yet (failover). Plain counters rather than a map lookup and a
  // gauge update per request (both on the cache-hit path); the gauge is set when scraped.
  /** Requests in flight that started on the current `networks`. */
  let requestsOnCurrentSet = 0;
  /** Sets replaced by a reload, with their requests still in flight. */
  const retiredSets = new Map<NetworkSet, number>();
  const requestsInFlight = (): number => {
    let count = requestsOnCurrentSet;
    for (const left of retiredSets.values()) count += left;
    return count;
  };
  const acquireNetworks = (): NetworkSet => {
    requestsOnCurrentSet += 1;
    return networks;
  };
  const releaseNetworks = (set: NetworkSet): void => {
    if (set === networks) {
      requestsOnCurrentSet -= 1;
      return;
    }
    const left = (retiredSets.get(set) ?? 1) - 1;
    if (left > 0) return void retiredSets.set(set, left);
    retiredSets.delete(set);
    void set.close();
  };

  async function reload(): Promise<void> {
    if (options.loadConfig === undefined) throw new Error('this gateway was started without a config file to reload');
    let next: GatewayConfig;
    try {
      next = options.loadConfig();
    } catch (error) {
      metrics.configReloads.inc({ result: 'rejected' });
      logger.error({ err: error }, 'config reload rejected; the running config stays');
      throw error;
    }
    // Only networks are swapped live; say so when other sections changed, rather than ignore them silently.
    const needRestart = (Object.keys(next) as Array<keyof GatewayConfig>).filter(
      (section) => section !== 'networks' && JSON.stringify(next[section]) !== JSON.stringify(current[section]),
    );
    if (needRestart.length > 0) logger.warn({ sections: needRestart }, 'these config sections change only at the next restart');
    const previous = networks;
    networks = buildNetworks(next);
    current = { ...current, networks: next.networks };
    logScrubber(logger).add(collectConfigSecrets(next));
    metrics.configReloads.inc({ result: 'ok' });
    logger.info({ networks: [...networks.byId.keys()] }, 'config reloaded: networks, upstreams and costs');
    // Requests already running hold the previous set; its pools close once they finish.
    if (requestsOnCurrentSet > 0) retiredSets.set(previous, requestsOnCurrentSet);
    else void previous.close();
    requestsOnCurrentSet = 0;
  }

  async function readiness(): Promise<{ ready: boolean; checks: Record<string, unknown> }> {
    let storeOk = true;
    try {
      await store.ping();
    } catch {
      storeOk = false;
    }
    const upstreams = Object.fromEntries([...networks.byId].map(([id, runtime]) => [id, runtime.forwarder.hasHealthyUpstream()]));
    const ready = !draining && storeOk && Object.values(upstreams).every(Boolean);
    return { ready, checks: { draining, store: storeOk, networks: upstreams } };
  }

  const operationalRoutes: AdminRoute[] = [
    { method: 'GET', path: '/healthz', public: true, handle: () => ({ body: { status: 'ok' } }) },
    {
      method: 'GET',
      path: '/readyz',
      public: true,
      handle: async () => {
        const { ready, checks } = await readiness();
        return { status: ready ? 200 : 503, body: { status: ready ? 'ready' : 'not ready', ...checks } };
      },
    },
    {
      method: 'GET',
      path: '/metrics',
      handle: async () => {
        const stats = cache.stats();
        metrics.cacheBytes.set(stats.bytes);
        metrics.cacheEntries.set(stats.entries);
        metrics.inFlight.set(requestsInFlight());
        recordUpstreamState(metrics, networks.byId);
        return { body: await metrics.registry.metrics(), contentType: metrics.registry.contentType };
      },
    },
    {
      method: 'POST',
      path: '/v1/reload',
      handle: async () => {
        try {
          await reload();
        } catch (error) {
          return { status: 400, body: { error: { code: 'invalid_config', message: (error as Error).message } } };
        }
        return { body: { reloaded: true, networks: [...networks.byId.keys()] } };
      },
    },
  ];
  const admin = createAdminService(store, { now, onChange: () => authenticator.clear() });
  const adminServer = createServer(
    createAdminHandler([...operationalRoutes, ...adminApiRoutes(admin, { defaultRotationGraceMs: config.auth.rotationGraceMs })], {
      token: config.admin.token,
      logger,
    }),
  );

  const rpcAddress = await listen(rpcServer, config.server.port, config.server.host);
  const adminAddress = await listen(adminServer, config.admin.port, config.admin.host);
  const rpcOrigin = originOf(rpcAddress);
  const adminOrigin = originOf(adminAddress);
  logger.info({ rpc: rpcOrigin, admin: adminOrigin, networks: [...networks.byId.keys()] }, 'gateway listening');

  let closing: Promise<void> | undefined;
  function close(): Promise<void> {
    closing ??= (async () => {
      clearInterval(sweep);
      rpcServer.closeAllConnections();
      await closeServer(rpcServer);
      await closeServer(adminServer);
      await meter.flush();
      meter.close();
      const sets = [networks, ...retiredSets.keys()];
      retiredSets.clear();
      await Promise.all(sets.map((set) => set.close()));
      if (ownsStore) await store.close();
    })();
    return closing;
  }

  return {
    get config() {
      return current;
    },
    store,
    logger,
    rpcOrigin,
    rpcPort: rpcAddress.port,
    adminOrigin,
    reload,
    async drain() {
      draining = true;
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
