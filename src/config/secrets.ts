import type { GatewayConfig } from './schema.js';

/**
 * The secret strings a config carries (credentials and query values of upstream URLs, header
 * values, the filter ids' HMAC key, the trace collector's credentials), so the logger can scrub them from any message that happens to quote them.
 */
export function collectConfigSecrets(config: GatewayConfig): string[] {
  const secrets = new Set<string>();
  for (const network of config.networks) {
    for (const upstream of network.upstreams) {
      for (const address of upstream.wsUrl === undefined ? [upstream.url] : [upstream.url, upstream.wsUrl]) addUrlSecrets(address, secrets);
      for (const value of Object.values(upstream.headers)) secrets.add(value);
    }
  }
  if (config.filters.idSecret !== undefined) secrets.add(config.filters.idSecret);
  const shared = config.cache.shared;
  if (shared !== undefined) for (const address of [...(shared.url === undefined ? [] : [shared.url]), ...(shared.cluster ?? [])]) addUrlSecrets(address, secrets);
  if (config.tracing !== undefined) {
    addUrlSecrets(config.tracing.otlpUrl, secrets);
    for (const value of Object.values(config.tracing.headers)) secrets.add(value);
  }
  return [...secrets].filter((secret) => secret.length >= 8);
}

function addUrlSecrets(address: string, secrets: Set<string>): void {
  const url = new URL(address);
  if (url.password !== '') secrets.add(decodeURIComponent(url.password));
  if (url.username !== '') secrets.add(decodeURIComponent(url.username));
  for (const value of url.searchParams.values()) secrets.add(value);
  // Providers put keys in the path too (`/v2/<key>`): treat long path segments as secrets.
  for (const segment of url.pathname.split('/')) if (segment.length >= 16) secrets.add(segment);
}
