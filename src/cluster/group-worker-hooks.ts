import { readiness, type Readiness } from '../admin/operational-routes.js';
import type { Authenticator } from '../auth/authenticator.js';
import type { GatewayMetrics } from '../metrics/metrics.js';
import { createScrapeJson, type ScrapeSources } from '../metrics/scrape.js';
import type { SelfService } from '../portal/self-service.js';
import type { NetworkSet } from '../server/network-runtime.js';
import type { Store } from '../store/index.js';

/** What the primary of `serve --workers N` asks of one of its workers (worker-main.ts). */
export interface GroupWorkerHooks {
  /** This worker's metrics as JSON, scrape-time gauges set: its share of the group's /metrics. */
  metricsJson: ReturnType<typeof createScrapeJson>;
  readiness(): Promise<Readiness>;
  /** Keys or teams changed through the primary's admin API or portal. */
  forgetKeys(): void;
  /** A team's alert settings changed there. */
  forgetAlertTargets(teamId: string): void;
}

export function groupWorkerHooks(
  metrics: GatewayMetrics,
  parts: ScrapeSources & { store: Store; draining: () => boolean; authenticator: Authenticator; selfService: SelfService; networks: () => NetworkSet },
): GroupWorkerHooks {
  return {
    metricsJson: createScrapeJson(metrics, parts),
    readiness: () => readiness(parts),
    forgetKeys: () => parts.authenticator.clear(),
    forgetAlertTargets: (teamId) => parts.selfService.alerting.targets.forget(teamId),
  };
}
