import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { AdminService } from '../admin/admin-service.js';
import type { AdminRoute } from '../admin/admin-server.js';
import { createAlerting, type Alerting } from '../alerts/alerting.js';
import type { WebhookSenderOptions } from '../alerts/webhook-sender.js';
import type { GatewayConfig } from '../config/schema.js';
import type { Logger } from '../logging/logger.js';
import type { GatewayMetrics } from '../metrics/metrics.js';
import type { ApiKey, Ledger, Store } from '../store/index.js';
import { createSelfServiceAdmin, selfServiceAdminRoutes } from './admin-routes.js';
import { createPortalHandler } from './portal-server.js';

/**
 * Team self-service as one part for the composition root: quota alerts and key events (webhooks),
 * the operator's routes for team tokens, alert settings, deliveries and CSV usage, and the
 * `portal` listener with the page and the team API.
 */

export interface SelfService {
  alerting: Alerting;
  /** The ledger the meter should use: the same one, with quota thresholds checked on its answers. */
  watchLedger(ledger: Ledger): Ledger;
  onKeyRevoked(key: ApiKey): void;
  adminRoutes(admin: AdminService): AdminRoute[];
  /** Starts the key event checks and, when `portal.enabled`, the portal listener; returns its origin. */
  start(admin: AdminService): Promise<string | undefined>;
  close(): Promise<void>;
}

export function createSelfService(
  config: GatewayConfig,
  store: Store,
  options: {
    now: () => number;
    logger: Logger;
    metrics: GatewayMetrics;
    webhookSleep?: WebhookSenderOptions['sleep'];
    defaultRotationGraceMs: number;
    /** Also told when a team's alert settings change here (the primary of a worker group tells its workers). */
    onAlertSettingsChanged?: (teamId: string) => void;
  },
): SelfService {
  const { now, logger } = options;
  const alerting = createAlerting(store, config.webhooks, {
    now,
    logger,
    sleep: options.webhookSleep,
    onAttempt: (type, outcome) => options.metrics.webhookDeliveries.inc({ type, outcome }),
  });
  let server: Server | undefined;

  return {
    alerting,
    watchLedger: (ledger) => alerting.quota.watch(ledger),
    onKeyRevoked(key) {
      alerting.keys.keyRevoked(key).catch((error: unknown) => logger.error({ err: error, key: key.id }, 'key.revoked event failed'));
    },
    adminRoutes(admin) {
      const selfService = createSelfServiceAdmin(store, admin, {
        now,
        onAlertSettingsChanged: (teamId) => {
          alerting.targets.forget(teamId);
          options.onAlertSettingsChanged?.(teamId);
        },
      });
      return selfServiceAdminRoutes(selfService, admin, store);
    },
    async start(admin) {
      alerting.start();
      if (!config.portal.enabled) return undefined;
      const portal = config.portal;
      server = createServer(
        createPortalHandler({
          store,
          admin,
          now,
          logger,
          sessionTtlMs: portal.sessionTtlMs,
          sessionSecret: portal.sessionSecret,
          secureCookies: portal.secureCookies,
          defaultRotationGraceMs: options.defaultRotationGraceMs,
        }),
      );
      const listening = server;
      const address = await new Promise<AddressInfo>((resolve, reject) => {
        listening.once('error', reject);
        listening.listen(portal.port, portal.host, () => resolve(listening.address() as AddressInfo));
      });
      const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
      return `http://${host === '0.0.0.0' ? '127.0.0.1' : host === '[::]' ? '[::1]' : host}:${address.port}`;
    },
    async close() {
      const listening = server;
      if (listening?.listening) {
        await new Promise<void>((resolve) => {
          listening.close(() => resolve());
          listening.closeAllConnections();
        });
      }
      await alerting.close();
    },
  };
}
