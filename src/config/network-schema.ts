// The schema of one network (`networks[]`): how it is selected, priced, routed, cached and
// subscribed to. Its upstreams' own schema is in upstream-schema.ts; the root schema (schema.ts)
// checks what spans networks (unique ids and base URLs, deadlines against the reservation sweep).
import { z } from 'zod';
import { NETWORK_KINDS } from '../methods/catalogue.js';
import { credits, methodGlob, methodName, positiveInt } from './schema-fields.js';
import { upstreamSchema } from './upstream-schema.js';

/** The longest deadline a network may give a request (its reservation is held that long). */
export const MAX_REQUEST_TIMEOUT_MS = 5 * 60_000;

/**
 * `host[:port][/prefix]` or `*[/prefix]`: which Host header and path prefix select a network.
 * The prefix never ends with a slash; the key path `/v3/<key>` follows it.
 */
const baseUrl = z
  .string()
  .regex(
    /^(\*|[A-Za-z0-9.-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?)(\/[A-Za-z0-9._~-]+)*$/,
    'host[:port][/prefix] or *[/prefix], without a scheme or a trailing slash',
  );

const circuitBreakerSchema = z.strictObject({
  /** Consecutive failed attempts that open an upstream's circuit (it is then skipped). */
  failureThreshold: positiveInt.default(5),
  /** How long an open circuit stays open before one trial (a probe or, with probes off, a request) is let through. */
  cooldownMs: positiveInt.default(5_000),
});

const healthCheckSchema = z.strictObject({
  /** Probe every upstream this often; 0 turns active health checks off. */
  intervalMs: z.number().int().min(0).default(2_000),
  /** Deadline of one probe. */
  timeoutMs: positiveInt.default(2_000),
  /**
   * The probe's JSON-RPC method (no params). Default: `eth_blockNumber` on EVM networks, `getSlot`
   * on asset networks. A numeric result is read as the upstream's head; any answer proves it is up.
   */
  method: methodName.optional(),
});

const hedgeSchema = z.strictObject({
  /** Send a slow read to the next upstream too, and take the first good answer. Never for writes. */
  enabled: z.boolean().default(true),
  /** A fixed hedge delay; without it the delay is `quantile` of the first upstream's recent latencies. */
  delayMs: positiveInt.optional(),
  /** Which quantile of recent latencies (0–1, exclusive) sets the delay. */
  quantile: z.number().gt(0).lt(1).default(0.95),
  /** Bounds of the quantile delay; `maxDelayMs` is also used until an upstream has 8 latency samples. */
  minDelayMs: positiveInt.default(50),
  maxDelayMs: positiveInt.default(1_000),
  /** Hedged attempts a call may start beside its first one. */
  maxHedges: z.number().int().min(1).max(4).default(1),
});

const subscriptionsSchema = z.strictObject({
  /**
   * Credits charged for each delivered event: one `newHeads` head, all of one block's `logs`
   * for one subscription (however many logs match), one `newPendingTransactions` hash.
   */
  eventCredits: z
    .strictObject({
      newHeads: credits.default(50),
      logs: credits.default(300),
      newPendingTransactions: credits.default(200),
    })
    .prefault({}),
  /**
   * An upstream that has sent no new head for this long while carrying a subscription has fallen
   * behind: its subscriptions move to another upstream (heads and logs are backfilled).
   */
  stallTimeoutMs: positiveInt.default(30_000),
  /** How long a failed upstream socket is left alone before it is tried again for subscriptions. */
  reconnectDelayMs: positiveInt.default(1_000),
});

/** The response cache's classes: each can be turned off per network (`cache.disable`); see docs/caching.md. */
export const CACHE_CLASSES = ['pinned', 'finalized', 'transaction', 'slot', 'realtime', 'ttl'] as const;

const networkCacheSchema = z.strictObject({
  /**
   * Realtime answers (`eth_blockNumber`, `eth_gasPrice`, `getSlot`, ...) are always shared by
   * identical concurrent calls; with a TTL above 0 they are also cached for this long. Default 0.
   */
  realtimeTtlMs: z.number().int().min(0).max(60_000).default(0),
  /** Method names or class names (pinned, finalized, transaction, slot, realtime, ttl) never cached on this network. */
  disable: z.array(z.union([z.enum(CACHE_CLASSES), methodName])).default([]),
  /**
   * Seconds an answer of this method is cached for. Turns caching on for methods whose answers
   * can change (the DAS methods, any other read); for the classes above it bounds an entry's life.
   */
  ttlSeconds: z.record(methodName, z.number().int().positive().max(7 * 86_400)).default({}),
});

export const networkSchema = z.strictObject({
  /** Name used in key allow-lists, usage reports, logs and metrics. */
  id: z.string().regex(/^[A-Za-z0-9_.-]+$/),
  kind: z.enum(NETWORK_KINDS),
  /** EVM networks: answered locally for `eth_chainId` (hex) and `net_version` (decimal). */
  chainId: z.number().int().positive().optional(),
  /** Host (and optional prefix) that selects this network; see docs/configuration.md. */
  baseUrls: z.array(baseUrl).min(1),
  upstreams: z.array(upstreamSchema).min(1),
  /**
   * Credits per method on this network: re-prices a catalogue method or adds one (forwarded
   * unvalidated); the key `"*"` prices every method neither listed here nor in the catalogue
   * (default 80). See docs/methods.md.
   */
  methods: z.record(z.union([methodName, z.literal('*')]), credits).default({}),
  /** Methods (names or globs) this network refuses with `-32601`, on top of the default-denied ones. */
  denyMethods: z.array(methodGlob).default([]),
  /** Default-denied methods (names or globs, e.g. `txpool_*`) this network serves after all. */
  allowMethods: z.array(methodGlob).default([]),
  /**
   * Deadline of a whole request (all failover attempts) on this network. At most 5 minutes, and
   * shorter than `credits.staleReservationMs`, so no request outlives its reservation.
   */
  requestTimeoutMs: positiveInt.max(MAX_REQUEST_TIMEOUT_MS).default(10_000),
  circuitBreaker: circuitBreakerSchema.prefault({}),
  /**
   * How much of an `eth_getBlockByHash` answer is checked before it is answered or cached:
   * `full` (header hash, transaction hashes, transaction and withdrawal roots; a non-hydrated miss
   * fetches the full block to check it), `header` (keccak256 of the RLP header only), `off` (the
   * `hash` field only). See docs/verification.md.
   */
  verification: z.enum(['full', 'header', 'off']).default('full'),
  /**
   * `fastest`: lowest latency (inflated by recent errors) first; `weighted`: first attempt drawn by
   * upstream weight; `cheapest`: the lowest `price` for the method among healthy upstreams with
   * rate-limit budget, ties by latency (docs/budgets.md).
   */
  selection: z.enum(['fastest', 'weighted', 'cheapest']).default('fastest'),
  /** An upstream this many blocks behind the best probed head is tried after the others. */
  maxBlockLag: z.number().int().min(0).default(5),
  healthCheck: healthCheckSchema.prefault({}),
  /**
   * How an upstream's finalized block is known (from the health probes): its
   * `eth_getBlockByNumber("finalized")`, or where an upstream does not support the tag, its head
   * minus `depth` blocks. Asset networks read `getSlot` at `finalized` commitment instead.
   */
  finality: z.strictObject({ depth: z.number().int().min(0).max(100_000).default(64) }).prefault({}),
  /** The response cache on this network (docs/caching.md). */
  cache: networkCacheSchema.prefault({}),
  hedge: hedgeSchema.prefault({}),
  /** Subscriptions over the WebSocket endpoint (`eth_subscribe`, docs/websocket.md); EVM networks. */
  subscriptions: subscriptionsSchema.prefault({}),
  /**
   * `eth_sendRawTransaction` goes to every available upstream at once and is answered with the
   * first success (errors only when none succeeds). Default: one upstream at a time, the next
   * only after an attempt failed (docs/routing.md#transactions).
   */
  broadcast: z.boolean().default(false),
  /** `eth_getLogs` and `eth_getFilterLogs` at any range (docs/logs.md). */
  getLogs: z
    .strictObject({
      /** Widest block range a client may ask for, tags resolved first; 0 = unlimited. Wider is `-32602`, uncharged. */
      maxRange: z.number().int().min(0).default(10_000),
      /** Most contract addresses one call may name; unset = no limit. More is `-32602`, uncharged. */
      maxAddresses: positiveInt.optional(),
      /** Most topic values one call may name, summed over the four positions (each alternative counts); unset = no limit. */
      maxTopics: positiveInt.optional(),
      /** Chunks of one split call under way at once. */
      concurrency: positiveInt.max(64).default(4),
    })
    .prefault({}),
});
