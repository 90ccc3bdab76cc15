// The schema of one upstream (`networks[].upstreams[]`): its endpoints, limits and price. Separate
// from the network's schema because it is the part a provider's contract decides.
import { z } from 'zod';
import { PROVIDER_NAMES } from '../routing/price-tables.js';
import { methodGlob, methodName, positiveInt } from './schema-fields.js';

export const upstreamSchema = z.strictObject({
  /** Stable name used in logs, metrics and `-32603` attempt lists. Never the URL (it may hold a secret). */
  id: z.string().regex(/^[A-Za-z0-9_.-]+$/),
  /** http(s) URL of the provider endpoint; `${ENV}` placeholders are expanded before validation. */
  url: z.url({ protocol: /^https?$/ }),
  /**
   * ws(s) URL of the provider's WebSocket endpoint, for `eth_subscribe` over the gateway's
   * WebSocket endpoint (docs/websocket.md); `${ENV}` placeholders are expanded. Upstreams without
   * one are not used for subscriptions (requests over a client's socket still go over HTTP).
   */
  wsUrl: z.url({ protocol: /^wss?$/ }).optional(),
  /** Extra request headers (for example a provider's auth header); values may use `${ENV}`. */
  headers: z.record(z.string(), z.string()).default({}),
  /** Deadline of one attempt against this upstream, bounded by what is left of the request's deadline. */
  timeoutMs: positiveInt.default(5_000),
  /** Keep-alive connections the undici Pool may open to this upstream. */
  connections: positiveInt.default(64),
  /** Asset networks only: the param form this upstream accepts for DAS methods. */
  params: z.enum(['named', 'positional']).default('named'),
  /** Share of the first attempts this upstream gets under `selection: weighted` (0: only as a fallback). */
  weight: z.number().min(0).default(1),
  /**
   * A pruned node: it keeps state for its last N blocks, so state reads and traces at an older
   * block skip it. Absent: an archive (until it answers "missing trie node"). See docs/routing.md.
   */
  blockHistory: positiveInt.optional(),
  /** Methods this upstream does not serve (names or globs); routing skips it for them. See docs/methods.md. */
  methods: z.strictObject({ deny: z.array(methodGlob).default([]) }).prefault({}),
  /** `eth_getLogs` (docs/logs.md). */
  getLogs: z
    .strictObject({
      /**
       * Widest block range (toBlock − fromBlock + 1) this upstream answers; wider calls are split
       * into chunks aligned to multiples of the smallest such range among the network's upstreams.
       * Unset: no known cap (an upstream's "range too large" answer still bisects the chunk).
       */
      maxRange: positiveInt.optional(),
    })
    .prefault({}),
  /**
   * The provider's plan limit: the gateway never sends this upstream more than
   * `requestsPerSecond` calls in any one-second window, counted across every replica that shares
   * a Redis store (per process with SQLite). See docs/budgets.md.
   */
  rateLimit: z.strictObject({ requestsPerSecond: positiveInt }).optional(),
  /**
   * What one call costs at this provider, in the provider's own units: a built-in table
   * (docs/upstream-pricing.md) or a map of method to units with `"*"` for the rest; with
   * `usdPerMillion`, money per million units. Read by `selection: cheapest` and the provider spend
   * metrics (docs/budgets.md).
   */
  price: z
    .strictObject({
      units: z.union([
        z.enum(PROVIDER_NAMES),
        z
          .record(z.union([methodName, z.literal('*')]), z.number().min(0))
          .refine((map) => Object.hasOwn(map, '*'), 'a price map needs "*": the units of every method it does not list'),
      ]),
      usdPerMillion: z.number().min(0).optional(),
      /**
       * The plan's allowance in these units per UTC day or month, counted by every replica in
       * the store: once spent, the upstream is tried after the others (docs/budgets.md).
       */
      quota: z.strictObject({ units: z.number().positive(), per: z.enum(['day', 'month']) }).optional(),
    })
    .optional(),
});
