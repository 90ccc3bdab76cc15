import type { UpstreamConfig } from '../config/schema.js';
import { PROVIDER_PRICE_TABLES, unitsOf } from './price-tables.js';

/**
 * What one call costs at an upstream, in the provider's own units (compute units, credits), and
 * optionally in money. Built once per upstream from its `price` config: a built-in provider
 * table (price-tables.ts) or the operator's own map with `"*"` for every method it does not list.
 */
export interface UpstreamPrice {
  unitsOf(method: string): number;
  /** Money per million units, when the operator gave it. */
  readonly usdPerMillion: number | undefined;
}

export function upstreamPriceOf(price: UpstreamConfig['price']): UpstreamPrice | undefined {
  if (price === undefined) return undefined;
  const { units, usdPerMillion } = price;
  if (typeof units === 'string') {
    const table = PROVIDER_PRICE_TABLES[units];
    return { unitsOf: (method) => unitsOf(table, method), usdPerMillion };
  }
  // Own keys only: a method named `constructor` must not find the object prototype.
  const otherwise = units['*']!;
  return { unitsOf: (method) => (Object.hasOwn(units, method) ? units[method]! : otherwise), usdPerMillion };
}

/** Money of `units` at `usdPerMillion`. */
export function usdOf(units: number, usdPerMillion: number): number {
  return (units * usdPerMillion) / 1_000_000;
}

/**
 * What one client call cost at the providers, filled in as its attempts are made: the units (and
 * money) of every attempt that reached a priced upstream, and the units an answer from the cache
 * saved. Recorded against the caller's team, key, network and method (docs/budgets.md).
 */
export interface ProviderSpend {
  units: number;
  usd: number;
  savedUnits: number;
}
