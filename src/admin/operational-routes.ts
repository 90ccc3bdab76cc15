import { z } from 'zod';
import { LOG_LEVELS, type LogLevel } from '../logging/logger.js';
import type { Store } from '../store/index.js';
import type { NetworkSet } from '../server/network-runtime.js';
import { parse, type AdminRoute } from './admin-server.js';

/**
 * The admin listener's operational routes: liveness, readiness, the Prometheus exposition, the
 * reload trigger and the log level. Documented in docs/admin-api.md.
 */

const logLevelBody = z.strictObject({ level: z.enum(LOG_LEVELS) });

export interface Readiness {
  ready: boolean;
  checks: { draining: boolean; store: boolean; networks: Record<string, boolean> };
}

export interface OperationalDeps {
  store: Pick<Store, 'ping'>;
  networks: () => Pick<NetworkSet, 'byId'>;
  draining: () => boolean;
  /** The exposition text and its content type, with scrape-time gauges refreshed. */
  scrape(): Promise<{ text: string; contentType: string }>;
  reload(): Promise<void>;
  /** The running log level (of the primary, with `serve --workers N`). */
  logLevel(): string;
  /** Sets the log level of the process, and of every worker with `serve --workers N`. */
  setLogLevel(level: LogLevel): Promise<void>;
  /**
   * Answers `/readyz` instead of {@link readiness} (the primary of `serve --workers N` asks its
   * workers), and names the networks a reload left running.
   */
  group?: { readiness(): Promise<Readiness & { workers: Record<string, boolean> }>; networkIds(): string[] };
}

/** Ready: not draining, the store answers, and every network has an upstream it may route to. */
export async function readiness(deps: Pick<OperationalDeps, 'store' | 'networks' | 'draining'>): Promise<Readiness> {
  let store = true;
  try {
    await deps.store.ping();
  } catch {
    store = false;
  }
  const networks = Object.fromEntries([...deps.networks().byId].map(([id, runtime]) => [id, runtime.forwarder.hasHealthyUpstream()]));
  const draining = deps.draining();
  return { ready: !draining && store && Object.values(networks).every(Boolean), checks: { draining, store, networks } };
}

export function operationalRoutes(deps: OperationalDeps): AdminRoute[] {
  return [
    { method: 'GET', path: '/healthz', public: true, handle: () => ({ body: { status: 'ok' } }) },
    {
      method: 'GET',
      path: '/readyz',
      public: true,
      handle: async () => {
        if (deps.group !== undefined) {
          const { ready, checks, workers } = await deps.group.readiness();
          return { status: ready ? 200 : 503, body: { status: ready ? 'ready' : 'not ready', ...checks, workers } };
        }
        const { ready, checks } = await readiness(deps);
        return { status: ready ? 200 : 503, body: { status: ready ? 'ready' : 'not ready', ...checks } };
      },
    },
    {
      method: 'GET',
      path: '/metrics',
      handle: async () => {
        const { text, contentType } = await deps.scrape();
        return { body: text, contentType };
      },
    },
    {
      method: 'POST',
      path: '/v1/reload',
      handle: async () => {
        try {
          await deps.reload();
        } catch (error) {
          return { status: 400, body: { error: { code: 'invalid_config', message: (error as Error).message } } };
        }
        const networks = deps.group?.networkIds() ?? [...deps.networks().byId.keys()];
        return { body: { reloaded: true, networks } };
      },
    },
    { method: 'GET', path: '/v1/log-level', handle: () => ({ body: { level: deps.logLevel() } }) },
    {
      method: 'PUT',
      path: '/v1/log-level',
      handle: async ({ body }) => {
        const { level } = parse(logLevelBody, body);
        await deps.setLogLevel(level);
        return { body: { level } };
      },
    },
  ];
}
