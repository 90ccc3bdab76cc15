import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { GatewayConfig } from './config/schema.js';
import { createAuthenticator } from './auth/authenticator.js';
import { createBlockCache, createDisabledBlockCache } from './cache/block-cache.js';
import { collectConfigSecrets } from './config/secrets.js';
import { createLogger, type Logger } from './logging/logger.js';
import { createMeter } from './metering/meter.js';
import { createCallExecutor } from './server/call-executor.js';
import { buildNetworkSet, type NetworkSet } from './server/network-runtime.js';
import { createRpcHandler } from './server/rpc-handler.js';
import { openStore, type Store } from './store/index.js';

/**
 * The composition root: reads the config, builds the parts, wires them, and starts listening.
 * Nothing else lives here.
 */

export interface GatewayOptions {
  logger?: Logger;
  /** Use this store instead of opening the configured one (the caller keeps ownership). */
  store?: Store;
  /** The clock of quotas, days and deadlines; tests inject one. */
  now?: () => number;
}

export interface RunningGateway {
  config: GatewayConfig;
  store: Store;
  logger: Logger;
  /** `http://host:port` of the RPC listener. */
  rpcOrigin: string;
  rpcPort: number;
  close(): Promise<void>;
}

/** How often reservations older than `credits.staleReservationMs` are looked for. */
const RESERVATION_SWEEP_INTERVAL_MS = 60_000;

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

export async function startGateway(config: GatewayConfig, options: GatewayOptions = {}): Promise<RunningGateway> {
  const now = options.now ?? Date.now;
  const logger = options.logger ?? createLogger({ secrets: collectConfigSecrets(config) });
  const ownsStore = options.store === undefined;
  const store = options.store ?? (await openStore(config.store, { now }));

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

  const authenticator = createAuthenticator(store, {
    ttlMs: config.auth.keyCacheTtlMs,
    maxEntries: config.auth.keyCacheMaxEntries,
    now,
  });
  const meter = createMeter(store, { now });
  const cache = config.cache.maxBytes > 0 ? createBlockCache({ maxBytes: config.cache.maxBytes }) : createDisabledBlockCache();
  const networks: NetworkSet = buildNetworkSet(config, { now });

  const rpcServer = createServer(
    {
      keepAliveTimeout: config.server.keepAliveTimeoutMs,
      // Bound slow clients: headers within 30 s, whole request within 60 s.
      headersTimeout: 30_000,
      requestTimeout: 60_000,
    },
    createRpcHandler({
      server: config.server,
      networks: () => networks,
      authenticator,
      executor: createCallExecutor({ meter, cache, now }),
      meter,
      now,
      logger,
    }),
  );
  const address = await listen(rpcServer, config.server.port, config.server.host);
  const rpcOrigin = originOf(address);
  logger.info({ rpc: rpcOrigin, networks: [...networks.byId.keys()] }, 'gateway listening');

  let closing: Promise<void> | undefined;
  return {
    config,
    store,
    logger,
    rpcOrigin,
    rpcPort: address.port,
    close() {
      closing ??= (async () => {
        clearInterval(sweep);
        await new Promise<void>((resolve) => {
          rpcServer.close(() => resolve());
          rpcServer.closeIdleConnections();
        });
        await meter.flush();
        await networks.close();
        if (ownsStore) await store.close();
      })();
      return closing;
    },
  };
}
