import type { WebhooksConfig } from '../config/schema.js';
import type { Logger } from '../logging/logger.js';
import type { Store } from '../store/index.js';
import { createAlertTargets, type AlertTargets } from './alert-targets.js';
import { createKeyEvents, type KeyEvents } from './key-events.js';
import { createQuotaAlerts, type QuotaAlerts } from './quota-alerts.js';
import { createWebhookSender, type WebhookSender, type WebhookSenderOptions } from './webhook-sender.js';

/** Quota alerts, key events and their webhook sender, built together for the composition root. */
export interface Alerting {
  quota: QuotaAlerts;
  keys: KeyEvents;
  targets: AlertTargets;
  sender: WebhookSender;
  start(): void;
  close(): Promise<void>;
}

export function createAlerting(
  store: Store,
  config: WebhooksConfig,
  options: { now: () => number; logger?: Logger; sleep?: WebhookSenderOptions['sleep']; onAttempt?: WebhookSenderOptions['onAttempt'] },
): Alerting {
  const { now, logger } = options;
  // The targets tell the quota alerts when a team's settings arrive; both refer to each other.
  const late: { quota?: QuotaAlerts } = {};
  const targets = createAlertTargets(store, config, {
    now,
    onLoaded: (teamId) => late.quota?.settingsLoaded(teamId),
    onError: (error) => logger?.error({ err: error }, 'could not read a team’s alert settings'),
  });
  const sender = createWebhookSender({
    store,
    timeoutMs: config.timeoutMs,
    maxAttempts: config.maxAttempts,
    initialBackoffMs: config.initialBackoffMs,
    maxBackoffMs: config.maxBackoffMs,
    now,
    sleep: options.sleep,
    onAttempt: options.onAttempt,
    logger,
  });
  const quota = createQuotaAlerts({ store, targets, sender, now, logger });
  late.quota = quota;
  const keys = createKeyEvents({ store, targets, sender, expiringDays: config.keyExpiringDays, now, logger });
  return {
    quota,
    keys,
    targets,
    sender,
    start: () => keys.start(config.keyEventsIntervalMs),
    async close() {
      keys.stop();
      await sender.close();
    },
  };
}
