import type { WebhooksConfig } from '../config/schema.js';
import type { AlertStore } from '../store/index.js';
import type { WebhookTarget } from './webhook-sender.js';

/**
 * Where a team's events go and at which thresholds, as this process last read them: a team's
 * own settings (admin API) over the gateway's defaults (config `webhooks`). Read from the store
 * at most once per team per `ttlMs`, so the request path never waits for it.
 */

export interface TeamAlerting {
  thresholds: readonly number[];
  /** null: nowhere to send, so nothing is checked or claimed. */
  target: WebhookTarget | null;
}

export interface AlertTargets {
  /** The team's settings if known and fresh; otherwise undefined, and a read is started (`onLoaded` follows). */
  peek(teamId: string): TeamAlerting | undefined;
  /** Reads (or returns the fresh cached) settings. */
  get(teamId: string): Promise<TeamAlerting>;
  /** Forgets a team's settings (after they changed here). */
  forget(teamId: string): void;
}

const DEFAULT_TTL_MS = 30_000;

export function createAlertTargets(
  store: Pick<AlertStore, 'alertSettings'>,
  config: Pick<WebhooksConfig, 'url' | 'signingSecret' | 'thresholds'>,
  options: { now: () => number; ttlMs?: number; onLoaded?: (teamId: string) => void; onError?: (error: unknown) => void },
): AlertTargets {
  const ttlMs = options.ttlMs ?? DEFAULT_TTL_MS;
  const cache = new Map<string, { value: TeamAlerting; at: number }>();
  const loading = new Map<string, Promise<TeamAlerting>>();
  const fallback: WebhookTarget | null = config.url !== undefined && config.signingSecret !== undefined ? { url: config.url, secret: config.signingSecret } : null;

  function load(teamId: string): Promise<TeamAlerting> {
    const inFlight = loading.get(teamId);
    if (inFlight !== undefined) return inFlight;
    const pending = store
      .alertSettings(teamId)
      .then((settings) => {
        const own = settings?.webhookUrl != null && settings.signingSecret != null ? { url: settings.webhookUrl, secret: settings.signingSecret } : null;
        const value: TeamAlerting = { thresholds: settings?.thresholds ?? config.thresholds, target: own ?? fallback };
        cache.set(teamId, { value, at: options.now() });
        return value;
      })
      .finally(() => loading.delete(teamId));
    loading.set(teamId, pending);
    return pending;
  }

  return {
    peek(teamId) {
      const entry = cache.get(teamId);
      if (entry !== undefined && options.now() - entry.at < ttlMs) return entry.value;
      if (!loading.has(teamId)) {
        load(teamId).then(
          () => options.onLoaded?.(teamId),
          (error: unknown) => options.onError?.(error),
        );
      }
      // A stale value still answers while the fresh one loads.
      return entry?.value;
    },
    async get(teamId) {
      const entry = cache.get(teamId);
      if (entry !== undefined && options.now() - entry.at < ttlMs) return entry.value;
      return load(teamId);
    },
    forget(teamId) {
      cache.delete(teamId);
    },
  };
}
