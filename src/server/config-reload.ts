import type { GatewayConfig } from '../config/schema.js';
import { collectConfigSecrets } from '../config/secrets.js';
import { logScrubber, type Logger } from '../logging/logger.js';
import type { NetworkSet } from './network-runtime.js';
import type { NetworkSetHolder } from './network-sets.js';

/**
 * SIGHUP and `POST /v1/reload`: re-read the config, build the new networks and swap them in.
 * Only the `networks` section changes live; other sections that differ are named in a warning
 * (they take effect at the next restart) rather than ignored silently. An invalid config is
 * rejected and the running one stays.
 */
export interface ConfigReloader {
  /** The running config: the start-up one with the last accepted `networks`. */
  current(): GatewayConfig;
  /** Throws (after logging and counting) when the new config is invalid. */
  reload(): Promise<void>;
}

export interface ConfigReloaderDeps {
  initial: GatewayConfig;
  /** Re-reads the config file; without it reload is refused. */
  loadConfig: (() => GatewayConfig) | undefined;
  buildNetworks(config: GatewayConfig): NetworkSet;
  networkSets: NetworkSetHolder;
  logger: Logger;
  onReload(result: 'ok' | 'rejected'): void;
}

export function createConfigReloader(deps: ConfigReloaderDeps): ConfigReloader {
  let current = deps.initial;
  return {
    current: () => current,
    async reload() {
      const { loadConfig, logger } = deps;
      if (loadConfig === undefined) throw new Error('this gateway was started without a config file to reload');
      let next: GatewayConfig;
      try {
        next = loadConfig();
      } catch (error) {
        deps.onReload('rejected');
        logger.error({ err: error }, 'config reload rejected; the running config stays');
        throw error;
      }
      const needRestart = (Object.keys(next) as Array<keyof GatewayConfig>).filter(
        (section) => section !== 'networks' && JSON.stringify(next[section]) !== JSON.stringify(current[section]),
      );
      if (needRestart.length > 0) logger.warn({ sections: needRestart }, 'these config sections change only at the next restart');
      // Requests already running hold the previous set; its pools close once they finish.
      deps.networkSets.replace(deps.buildNetworks(next));
      current = { ...current, networks: next.networks };
      // Secrets of the new upstreams are scrubbed from error text from now on.
      logScrubber(logger).add(collectConfigSecrets(next));
      deps.onReload('ok');
      logger.info({ networks: [...deps.networkSets.current().byId.keys()] }, 'config reloaded: networks, upstreams and costs');
    },
  };
}
