import { availableParallelism } from 'node:os';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { GatewayConfig } from '../config/schema.js';
import { createAdminHandler, adminApiRoutes } from '../admin/admin-server.js';
import { createAdminService } from '../admin/admin-service.js';
import { operationalRoutes, type Readiness } from '../admin/operational-routes.js';
import { collectConfigSecrets } from '../config/secrets.js';
import { createLogger, logScrubber, setLogLevel, type Logger, type LogLevel } from '../logging/logger.js';
import { createMetrics, createWorkerGroupMetrics } from '../metrics/metrics.js';
import { createSelfService } from '../portal/self-service.js';
import { openStore } from '../store/index.js';
import { createGroupMetrics } from './group-metrics.js';
import type { MetricsJson } from './worker-messages.js';
import { createWorkerSupervisor } from './worker-supervisor.js';

/**
 * `tollgate serve --workers N`: the primary of a node:cluster group. The workers (worker-main.ts)
 * share the RPC port, HTTP and WebSocket upgrades alike; Node's primary accepts its connections
 * and hands them to the workers in turn. The primary serves no RPC itself. It holds what the
 * group has once: the admin listener (with the one `/metrics` of the group), the portal, the
 * key-event checks and the SQLite WAL checkpointer; it validates a reload before any worker sees
 * it, and it restarts a worker that dies.
 *
 * Why the primary and not worker 1: the primary is the one process that outlives every worker,
 * so the admin API, the portal and the scrape stay up while a worker restarts; prom-client's
 * AggregatorRegistry merges worker metrics in the process that holds them all; and a reload is
 * all-or-none only if one process decides before any worker changes. Its cost is a store
 * connection of its own and a few IPC messages: key changes made through the admin API or the
 * portal are passed to every worker so none serves a cached key for `auth.keyCacheTtlMs` longer.
 */

export interface WorkerGroupOptions {
  /** Worker count (at least 1), already resolved from `auto`. */
  workers: number;
  logger?: Logger;
  /** Re-reads the config for a reload (SIGHUP or `POST /v1/reload`); without it reload is refused. */
  loadConfig?: () => GatewayConfig;
  /** Where the workers write their log lines: stdout (default) or stderr (the devnet keeps stdout for itself). */
  workerLogFd?: 1 | 2;
}

export interface RunningWorkerGroup {
  readonly config: GatewayConfig;
  logger: Logger;
  rpcOrigin: string;
  rpcPort: number;
  adminOrigin: string;
  portalOrigin: string | undefined;
  /** Validates the config file here, then every worker applies it; an invalid file changes no worker. */
  reload(): Promise<void>;
  /** Every worker finishes its in-flight requests and exits, then the primary closes. */
  drain(): Promise<void>;
  close(): Promise<void>;
}

/** `server.workers` (or `--workers`) as a count: `auto` is the cores this process may use. */
export function resolveWorkerCount(workers: GatewayConfig['server']['workers']): number {
  return workers === 'auto' ? availableParallelism() : workers;
}

/** How long a scrape or readiness check waits for a worker before going on without it. */
const WORKER_ANSWER_TIMEOUT_MS = 2_000;
/** A reload waits this long for every worker to swap its networks in. */
const WORKER_RELOAD_TIMEOUT_MS = 10_000;
/** Beyond `server.drainTimeoutMs` (each worker's own bound): the time to close and exit. */
const DRAIN_MARGIN_MS = 5_000;
const WAL_CHECKPOINT_INTERVAL_MS = 250;

function originOf(address: AddressInfo): string {
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const reachable = host === '0.0.0.0' ? '127.0.0.1' : host === '[::]' ? '[::1]' : host;
  return `http://${reachable}:${address.port}`;
}

export async function startWorkerGroup(config: GatewayConfig, options: WorkerGroupOptions): Promise<RunningWorkerGroup> {
  const configSecrets = [...collectConfigSecrets(config), ...(config.admin.token ? [config.admin.token] : [])];
  const logger = options.logger ?? createLogger({ secrets: configSecrets });
  logScrubber(logger).add(configSecrets);
  const now = Date.now;
  // The primary's connection runs the file's one WAL checkpointer; workers only write.
  const store = await openStore(config.store, {
    now,
    backgroundCheckpoints: {
      intervalMs: WAL_CHECKPOINT_INTERVAL_MS,
      onError: (error) => logger.error({ err: error }, 'the SQLite checkpoint thread failed; the workers checkpoint in their commits past their safety limit'),
    },
  });
  const metrics = createMetrics();
  const groupMetrics = createWorkerGroupMetrics(metrics.registry);
  const merged = createGroupMetrics(metrics.registry);
  let current = config;
  let draining = false;

  const supervisor = createWorkerSupervisor({
    count: options.workers,
    config,
    logFd: options.workerLogFd ?? 1,
    logger,
    onUnexpectedExit(slot, reason) {
      groupMetrics.workerRestarts.inc({ reason });
      void merged.retire(slot);
      // The dead worker's reservations go back now, not when its successor starts.
      store.recoverReservations(current.credits.staleReservationMs).then(
        (count) => count > 0 && logger.warn({ reservations: count, slot }, 'refunded the reservations of a worker that died'),
        (error: unknown) => logger.error({ err: error }, 'refunding a dead worker’s reservations failed'),
      );
    },
    onListeningCount: (count) => groupMetrics.workers.set(count),
  });

  let rpc: { rpcOrigin: string; rpcPort: number };
  try {
    rpc = await supervisor.start();
  } catch (error) {
    await store.close();
    throw error;
  }

  async function askEveryWorker<T>(ask: (slot: number) => Promise<T>): Promise<Array<{ slot: number; result: PromiseSettledResult<T> }>> {
    const slots = supervisor.listeningSlots();
    const results = await Promise.allSettled(slots.map(ask));
    return slots.map((slot, index) => ({ slot, result: results[index]! }));
  }

  /**
   * A worker that could not take what the others now run (a reloaded config, a log level) is
   * replaced by one that starts from it.
   */
  function restartWorkersThatFailed(answers: ReadonlyArray<{ slot: number; result: PromiseSettledResult<unknown> }>, message: string): void {
    for (const { slot, result } of answers) {
      if (result.status === 'fulfilled') continue;
      logger.error({ slot, err: result.reason }, message);
      supervisor.kill(slot);
    }
  }

  async function scrape(): Promise<{ text: string; contentType: string }> {
    const answers = await askEveryWorker((slot) => supervisor.ask(slot, { op: 'metrics' }, WORKER_ANSWER_TIMEOUT_MS));
    const reports = answers.map(({ slot, result }) => ({ slot, report: result.status === 'fulfilled' ? (result.value as MetricsJson) : undefined }));
    for (const { slot, result } of answers) if (result.status === 'rejected') logger.warn({ slot, err: result.reason }, 'a worker missed the scrape; its last counts stand in');
    return merged.exposition(reports);
  }

  /** Ready while not draining, the store answers, and every listening worker (at least one) is ready. */
  async function readiness(): Promise<Readiness & { workers: Record<string, boolean> }> {
    let storeUp = true;
    await store.ping().catch(() => (storeUp = false));
    const answers = await askEveryWorker((slot) => supervisor.ask(slot, { op: 'readiness' }, WORKER_ANSWER_TIMEOUT_MS));
    const workers: Record<string, boolean> = {};
    const networks: Record<string, boolean> = {};
    for (const network of current.networks) networks[network.id] = answers.length > 0;
    for (const { slot, result } of answers) {
      workers[slot] = result.status === 'fulfilled' && result.value.ready;
      for (const id of Object.keys(networks)) networks[id] = networks[id]! && result.status === 'fulfilled' && result.value.checks.networks[id] === true;
    }
    const ready = !draining && storeUp && answers.length > 0 && Object.values(workers).every(Boolean);
    return { ready, checks: { draining, store: storeUp, networks }, workers };
  }

  async function reload(): Promise<void> {
    if (options.loadConfig === undefined) throw new Error('this gateway was started without a config file to reload');
    let next: GatewayConfig;
    try {
      next = options.loadConfig();
    } catch (error) {
      metrics.configReloads.inc({ result: 'rejected' });
      logger.error({ err: error }, 'config reload rejected; no worker changed');
      throw error;
    }
    // From here on a worker that (re)starts gets the new config, whatever happens below.
    current = { ...current, networks: next.networks };
    supervisor.setConfig(current);
    logScrubber(logger).add(collectConfigSecrets(next));
    const answers = await askEveryWorker((slot) => supervisor.ask(slot, { op: 'reload', config: current }, WORKER_RELOAD_TIMEOUT_MS));
    restartWorkersThatFailed(answers, 'a worker did not apply the reloaded config; restarting it');
    metrics.configReloads.inc({ result: 'ok' });
    logger.info({ networks: current.networks.map((network) => network.id), workers: answers.length }, 'config reloaded in every worker: networks, upstreams and costs');
  }

  /** The primary's level, then every listening worker's; a worker (re)started later is given it at start. */
  async function changeLogLevel(level: LogLevel): Promise<void> {
    setLogLevel(logger, level);
    supervisor.setLogLevel(level);
    const answers = await askEveryWorker((slot) => supervisor.ask(slot, { op: 'log-level', level }, WORKER_ANSWER_TIMEOUT_MS));
    restartWorkersThatFailed(answers, 'a worker did not take the new log level; restarting it');
  }

  const selfService = createSelfService(config, store, {
    now,
    logger,
    metrics,
    defaultRotationGraceMs: config.auth.rotationGraceMs,
    onAlertSettingsChanged: (teamId) => supervisor.broadcast({ type: 'forget-alert-targets', teamId }),
  });
  const admin = createAdminService(store, {
    now,
    onChange: () => supervisor.broadcast({ type: 'forget-keys' }),
    onKeyRevoked: selfService.onKeyRevoked,
  });
  const operational = operationalRoutes({
    store,
    networks: () => ({ byId: new Map() }),
    draining: () => draining,
    scrape,
    reload,
    logLevel: () => logger.level,
    setLogLevel: changeLogLevel,
    group: { readiness, networkIds: () => current.networks.map((network) => network.id) },
  });
  const adminServer: Server = createServer(
    createAdminHandler([...operational, ...adminApiRoutes(admin, { defaultRotationGraceMs: config.auth.rotationGraceMs }), ...selfService.adminRoutes(admin)], {
      token: config.admin.token,
      logger,
    }),
  );
  const adminAddress = await new Promise<AddressInfo>((resolve, reject) => {
    adminServer.once('error', reject);
    adminServer.listen(config.admin.port, config.admin.host, () => resolve(adminServer.address() as AddressInfo));
  });
  const adminOrigin = originOf(adminAddress);
  const portalOrigin = await selfService.start(admin);
  logger.info(
    { rpc: rpc.rpcOrigin, admin: adminOrigin, portal: portalOrigin, workers: options.workers, pids: supervisor.listeningSlots().map(supervisor.pidOf), networks: config.networks.map((network) => network.id) },
    'gateway listening',
  );

  let closing: Promise<void> | undefined;
  function shutDown(graceMs: number): Promise<void> {
    closing ??= (async () => {
      draining = true;
      await supervisor.drain(graceMs);
      await new Promise<void>((resolve) => {
        adminServer.close(() => resolve());
        adminServer.closeAllConnections();
      });
      await selfService.close();
      await store.close();
    })();
    return closing;
  }

  return {
    get config() {
      return current;
    },
    logger,
    rpcOrigin: rpc.rpcOrigin,
    rpcPort: rpc.rpcPort,
    adminOrigin,
    portalOrigin,
    reload,
    drain: () => {
      logger.info({ graceMs: config.server.drainTimeoutMs }, 'draining every worker: refusing new connections, finishing in-flight requests');
      return shutDown(config.server.drainTimeoutMs + DRAIN_MARGIN_MS);
    },
    close: () => shutDown(DRAIN_MARGIN_MS),
  };
}

/** `tollgate serve` with more than one worker: SIGTERM drains every worker then exits 0, SIGHUP reloads all or none. */
export async function serveWorkerGroup(config: GatewayConfig, options: WorkerGroupOptions & { onStarted?: (logger: Logger) => void }): Promise<void> {
  const { onStarted } = options;
  const group = await startWorkerGroup(config, options);
  onStarted?.(group.logger);
  process.once('SIGTERM', () => {
    group.drain().then(
      () => group.logger.flush(() => process.exit(0)),
      (error: unknown) => {
        group.logger.error({ err: error }, 'drain failed');
        group.logger.flush(() => process.exit(1));
      },
    );
  });
  process.once('SIGINT', () => void group.close().then(() => process.exit(0)));
  // A rejected reload is logged (and counted) by the primary and changes no worker.
  process.on('SIGHUP', () => void group.reload().catch(() => undefined));
}
