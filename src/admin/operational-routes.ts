import type { Store } from '../store/index.js';
import type { NetworkSet } from '../server/network-runtime.js';
import type { AdminRoute } from './admin-server.js';

/**
 * The admin listener's operational routes: liveness, readiness, the Prometheus exposition and
 * the reload trigger. Documented in docs/admin-api.md.
 */

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
  ];
}
