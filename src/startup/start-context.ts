import type { GatewayConfig } from '../config/schema.js';
import type { DisposerStack } from '../lifecycle/disposer-stack.js';
import type { Logger } from '../logging/logger.js';
import type { GatewayMetrics } from '../metrics/metrics.js';
import type { Authenticator } from '../auth/authenticator.js';
import type { Meter } from '../metering/meter.js';
import type { ResponseCache } from '../cache/response-cache.js';
import type { Store } from '../store/index.js';
import type { SelfService } from '../portal/self-service.js';
import type { WebhookSenderOptions } from '../alerts/webhook-sender.js';

/**
 * What the start-up builders (gateway.ts and this folder) share: the options a gateway is started
 * with, the context every builder gets, and the timings more than one of them uses.
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

/** What every builder gets: the config, the clock, the logger, the metrics and the disposer stack. */
export interface StartContext {
  config: GatewayConfig;
  options: GatewayOptions;
  now: () => number;
  logger: Logger;
  metrics: GatewayMetrics;
  disposers: DisposerStack;
  /** Set once draining starts: every response tells its keep-alive client to close. */
  draining: { value: boolean };
}

/** Who may call (keys, JWTs), what it costs (the meter, quota alerts), and the response cache beside them. */
export interface Accounting {
  authenticator: Authenticator;
  selfService: SelfService;
  meter: Meter;
  cache: ResponseCache;
}

/** How often the same store error is logged at most (each one is counted). */
export const STORE_ERROR_LOG_INTERVAL_MS = 5_000;
/** How often provider spend totals are written to the store (one write for all calls meanwhile). */
export const PROVIDER_SPEND_FLUSH_MS = 2_000;
