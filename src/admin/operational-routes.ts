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
  networks: () => NetworkSet;
  draining: () => boolean;
  /** The exposition text and its content type, with scrape-time gauges refreshed. */
  scrape(): Promise<{ text: string; contentType: string }>;
  reload(): Promise<void>;
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
        return { body: { reloaded: true, networks: [...deps.networks().byId.keys()] } };
      },
    },
  ];
}
