import { z } from 'zod';
import { methodSettingsIssues, NETWORK_KINDS } from '../methods/catalogue.js';
import { isIpRange } from '../auth/ip-matcher.js';
import { isOriginPattern } from '../auth/origin-matcher.js';
import { PROVIDER_NAMES } from '../routing/price-tables.js';

/**
 * The one schema of the gateway's YAML configuration. Types, defaults and validation all come
 * from here; every object is strict, so a misspelt key fails start-up with its path named.
 * Durations are milliseconds, sizes are bytes, unless the field name says otherwise.
 */

/** The longest deadline a network may give a request (its reservation is held that long). */
export const MAX_REQUEST_TIMEOUT_MS = 5 * 60_000;

const port = z.number().int().min(0).max(65535);
const positiveInt = z.number().int().positive();
const credits = z.number().int().min(0);

/** A JSON-RPC method name as it appears on the wire. */
const methodName = z.string().regex(/^[A-Za-z][A-Za-z0-9_]*$/, 'a JSON-RPC method name');
/** A method name or a glob of them: `*` matches any run of characters (`debug_*`). */
const methodGlob = z.string().regex(/^[A-Za-z0-9_*]+$/, 'a JSON-RPC method name or a glob such as debug_*');

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

const upstreamSchema = z.strictObject({
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

const networkSchema = z.strictObject({
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

const sqliteStoreSchema = z.strictObject({
  driver: z.literal('sqlite'),
  /** Database file; its directory is created if missing. `:memory:` for throw-away runs. */
  path: z.string().min(1).default('./data/tollgate.db'),
});

const redisStoreSchema = z
  .strictObject({
    driver: z.literal('redis'),
    /** One Redis: `redis://[user:password@]host:port[/db]` or `rediss://` for TLS; use `${ENV}` for the password. */
    url: z.string().regex(/^rediss?:\/\//, 'a redis:// or rediss:// URL').optional(),
    /**
     * Redis Cluster (7.0 or newer) instead of one Redis: URLs of seed nodes (any reachable ones;
     * the rest is discovered), their credentials and TLS used for every node (docs/scaling.md).
     */
    cluster: z.array(z.string().regex(/^rediss?:\/\//, 'a redis:// or rediss:// URL')).min(1).optional(),
    /** Prefix of every key, so several deployments can share one Redis. */
    keyPrefix: z.string().default('tollgate:'),
    /** Days that daily counters and usage are kept after their UTC day ends (the usage report window). */
    usageRetentionDays: positiveInt.default(35),
    /** Connect and command timeout: how long a request may wait on an unreachable Redis. */
    commandTimeoutMs: positiveInt.default(1_000),
    /**
     * Replica acknowledgements every ledger commit waits for (Redis `WAIT`, at most 80% of
     * `commandTimeoutMs`): a commit a failover could lose is not answered. Unset or 0: none;
     * docs/scaling.md measures what a failover loses and what waiting costs.
     */
    waitReplicas: z.number().int().min(0).max(10).optional(),
    /**
     * While Redis is unreachable: false (default) answers -32603 / HTTP 503 and charges nothing;
     * true serves requests of keys already known to this replica without charging them.
     */
    failOpen: z.boolean().default(false),
  })
  .superRefine((store, context) => {
    if ((store.url === undefined) === (store.cluster === undefined)) {
      context.addIssue({ code: 'custom', message: 'set exactly one of url (one Redis) and cluster (Redis Cluster seed URLs)', path: ['url'] });
    }
    if (store.cluster !== undefined && /[{}]/.test(store.keyPrefix)) {
      // The ledger's hash tags are the first {...} of a key: a brace in the prefix would put every key in one slot.
      context.addIssue({ code: 'custom', message: 'must not contain { or } with cluster (keys carry hash tags)', path: ['keyPrefix'] });
    }
  });

const websocketSchema = z.strictObject({
  /** Serve the WebSocket endpoint; false answers upgrades with 404. */
  enabled: z.boolean().default(true),
  /** Open connections per process; more get HTTP 503 at the upgrade. */
  maxConnections: positiveInt.default(10_000),
  /** Open connections per API key (per process); more get HTTP 429 at the upgrade. */
  maxConnectionsPerKey: positiveInt.default(100),
  /** Subscriptions one connection may hold; `eth_subscribe` beyond it is `-32005` (limit_exceeded). */
  maxSubscriptionsPerConnection: positiveInt.default(100),
  /** Largest message a client may send, in bytes; a larger one closes the connection (1009). */
  maxMessageBytes: positiveInt.default(1024 * 1024),
  /** The gateway pings every connection this often. */
  pingIntervalMs: positiveInt.default(30_000),
  /** A connection that has not answered a ping with a pong within this is closed (1001). */
  pongTimeoutMs: positiveInt.default(10_000),
  /**
   * Bytes that may wait for one connection: its queued subscription events plus its socket's
   * unsent bytes (a client not reading). Past it the connection is closed with 1013; its waiting
   * events are dropped, uncharged.
   */
  maxBufferedBytes: positiveInt.default(4 * 1024 * 1024),
  /** Subscription events that may wait for one connection (their charges reserved); past it, closed with 1013. */
  maxQueuedEvents: positiveInt.default(4_096),
  /**
   * Subscription events waiting for all connections of the process together, and their bytes:
   * past either, the connections with the most bytes waiting are closed with 1013 until under it.
   */
  maxProcessQueuedEvents: positiveInt.default(200_000),
  maxProcessQueuedBytes: positiveInt.default(256 * 1024 * 1024),
});

/** The team self-service page and team API (docs/portal.md). */
const portalSchema = z.strictObject({
  /** Off by default: `serve` starts the listener only when this is true (the devnet turns it on). */
  enabled: z.boolean().default(false),
  host: z.string().default('127.0.0.1'),
  port: port.default(8082),
  /** How long a sign-in lasts (the session cookie's Max-Age). */
  sessionTtlMs: positiveInt.default(12 * 3_600_000),
  /**
   * HMAC key of session cookies (use `${ENV}`, at least 32 characters). Set it when several
   * replicas serve the page; without it each process makes a random one (sign-ins end on restart).
   */
  sessionSecret: z.string().min(32).optional(),
  /** Mark the session cookie `Secure` (set it when the page is served over HTTPS, as it should be in production). */
  secureCookies: z.boolean().default(false),
});

/** Quota alerts and key events as signed webhooks (docs/webhooks.md). */
const webhooksSchema = z.strictObject({
  /** Gateway-wide receiver for teams without their own webhook URL; unset: only teams with one get events. */
  url: z.url({ protocol: /^https?$/ }).optional(),
  /** HMAC-SHA256 key of `url`'s signatures (use `${ENV}`). */
  signingSecret: z.string().min(16).optional(),
  /** Default quota thresholds, percent of the daily quota; a team's own list replaces it. */
  thresholds: z.array(z.number().int().min(1).max(100)).min(1).max(10).default([75, 90, 100]),
  /** Deadline of one delivery attempt; no answer by then counts as a failure. */
  timeoutMs: positiveInt.default(5_000),
  /** Attempts per event, the first included; non-2xx and timeouts are retried. */
  maxAttempts: z.number().int().min(1).max(20).default(6),
  /** Wait before the second attempt; doubles each attempt, up to `maxBackoffMs`. */
  initialBackoffMs: positiveInt.default(1_000),
  maxBackoffMs: positiveInt.default(5 * 60_000),
  /** How often keys are checked for `key.expiring` (and revocations made elsewhere, for `key.revoked`). */
  keyEventsIntervalMs: positiveInt.default(60_000),
  /** `key.expiring` is sent this many days before a key's expiry. */
  keyExpiringDays: positiveInt.default(7),
});

/** OpenTelemetry traces (docs/tracing.md): off unless this section is present. */
const tracingSchema = z.strictObject({
  /** The collector's full OTLP/HTTP traces endpoint, e.g. `http://collector:4318/v1/traces`. */
  otlpUrl: z.url({ protocol: /^https?$/ }),
  /** Share of requests traced (a trusted client's `traceparent` decides for its own requests). */
  sampleRatio: z.number().min(0).max(1).default(0.01),
  /** Continue the W3C `traceparent` a client sends. Only for clients inside your own tracing domain. */
  trustClientTraceparent: z.boolean().default(false),
  /** Send each upstream attempt's `traceparent` to the upstream. */
  propagateToUpstreams: z.boolean().default(false),
  serviceName: z.string().min(1).default('tollgate'),
  /** Headers of the export requests, such as a collector's token (use `${ENV}`). */
  headers: z.record(z.string(), z.string()).default({}),
  /** How long finished spans wait to be exported together. */
  batchDelayMs: positiveInt.default(5_000),
});

/** The request explorer (docs/explorer.md): each team's last 1,000 requests, kept in the store. */
const explorerSchema = z.strictObject({
  enabled: z.boolean().default(true),
  /**
   * Finished requests are written to the store in one batch per interval (at most the newest
   * 1,000 of each team), at most this long after they end. Longer: less store work for teams
   * busier than 1,000 requests per interval (docs/explorer.md).
   */
  flushIntervalMs: positiveInt.default(5_000),
});

const storeSchema = z.discriminatedUnion('driver', [sqliteStoreSchema, redisStoreSchema]);

export const configSchema = z
  .strictObject({
    server: z
      .strictObject({
        host: z.string().default('0.0.0.0'),
        port: port.default(8080),
        /** Request bodies larger than this get HTTP 413. */
        maxBodyBytes: positiveInt.default(1024 * 1024),
        /** Batches with more items than this get one `-32600` error. */
        maxBatchItems: positiveInt.default(100),
        /**
         * Deepest nesting of arrays and objects in one call's params (params itself is level 1);
         * deeper params get `-32602` naming the field. Keeps every input away from recursion limits.
         */
        maxParamsDepth: positiveInt.max(100_000).default(64),
        /** Largest params of one call (batch item) in bytes of JSON; larger get `-32602`. */
        maxParamsBytes: positiveInt.default(512 * 1024),
        /** A client must send its request line and headers within this (else 408 and the connection closes). */
        headersTimeoutMs: positiveInt.default(30_000),
        /** A client must send its whole request, headers and body, within this (else 408). At least `headersTimeoutMs`. */
        receiveTimeoutMs: positiveInt.default(60_000),
        /** Idle keep-alive connections are closed after this long. */
        keepAliveTimeoutMs: positiveInt.default(65_000),
        /** On SIGTERM, how long in-flight requests may take to finish before connections are cut. */
        drainTimeoutMs: positiveInt.default(25_000),
        /**
         * Processes serving the RPC port (node:cluster workers under one primary that holds the admin
         * listener, the portal and `/metrics`): a number, or `auto` for the host's available cores.
         * 1 serves everything from one process, as without the option.
         */
        workers: z.union([z.literal('auto'), positiveInt.max(1024)]).default(1),
        /**
         * Addresses or CIDR ranges of the reverse proxies in front of the gateway. `X-Forwarded-For`
         * is believed only from these (walked right to left, skipping them); the IP rule of a key
         * otherwise sees the connection's own address. Default: none.
         */
        trustedProxies: z.array(z.string().refine(isIpRange, 'an IPv4 or IPv6 address or CIDR range')).default([]),
        /** Browsers calling RPC paths from web pages (docs/keys.md). */
        cors: z
          .strictObject({
            /**
             * Origins whose pages may call the gateway and read its answers: `*` (any, the
             * default), or patterns as in a key's `allowedOrigins`. A key's own list narrows this.
             */
            allowedOrigins: z.array(z.string().refine((entry) => entry === '*' || isOriginPattern(entry), 'an origin pattern or *')).min(1).default(['*']),
            /** `Access-Control-Max-Age` of preflight answers, in seconds (Chromium caps it at 7200). */
            maxAgeSeconds: z.number().int().min(0).max(86_400).default(600),
          })
          .prefault({}),
        /** The WebSocket endpoint `{base_url}/ws/v3/<key>` on the RPC listener (docs/websocket.md). */
        websocket: websocketSchema.prefault({}),
      })
      .prefault({}),
    auth: z
      .strictObject({
        /**
         * How long a key lookup (found or not found) is remembered in memory. This is the bound
         * on how long a revoked key may still be accepted by a replica that did not revoke it.
         */
        keyCacheTtlMs: z.number().int().min(0).default(5_000),
        /** Most keys remembered at once; bounds memory under a flood of unknown keys. */
        keyCacheMaxEntries: positiveInt.default(100_000),
        /** How long a rotated-out secret keeps working when a rotation does not say. */
        rotationGraceMs: z.number().int().min(0).default(0),
        /** Verified JWTs remembered (until their `exp`) so a repeated token costs no signature check. */
        jwtCacheMaxEntries: positiveInt.default(10_000),
      })
      .prefault({}),
    store: storeSchema.prefault({ driver: 'sqlite' }),
    cache: z
      .strictObject({
        /**
         * Byte bound of the in-process response cache, every method and network together (answer
         * bytes plus per-entry overhead); 0 turns the in-process tier off. See docs/caching.md.
         */
        maxBytes: z.number().int().min(0).default(256 * 1024 * 1024),
        /** A response cache shared by every replica, in Redis; absent: none. */
        shared: z
          .strictObject({
            /** One Redis: `redis://[user:password@]host:port[/db]` or `rediss://` (the store's Redis or another); use `${ENV}` for a password. */
            url: z.string().regex(/^rediss?:\/\//, 'a redis:// or rediss:// URL').optional(),
            /** Redis Cluster: seed URLs (any reachable nodes; the rest is discovered). Each entry is one key, spread over every master. */
            cluster: z.array(z.string().regex(/^rediss?:\/\//, 'a redis:// or rediss:// URL')).min(1).optional(),
            /** How long an entry lives in Redis (answers of a `ttlSeconds` method live no longer than their own TTL). */
            ttlSeconds: positiveInt.max(30 * 86_400).default(86_400),
            /** Answers larger than this (before compression) are kept in process only. */
            maxItemBytes: positiveInt.max(64 * 1024 * 1024).default(1024 * 1024),
          })
          .superRefine((shared, context) => {
            if ((shared.url === undefined) === (shared.cluster === undefined)) {
              context.addIssue({ code: 'custom', message: 'set exactly one of url (one Redis) and cluster (Redis Cluster seed URLs)', path: ['url'] });
            }
          })
          .optional(),
      })
      .prefault({}),
    credits: z
      .strictObject({
        /**
         * A reservation older than this is refunded by the periodic sweep: its request can no
         * longer be running (requests are bounded by their network's deadline).
         */
        staleReservationMs: positiveInt.default(10 * 60_000),
      })
      .prefault({}),
    admin: z
      .strictObject({
        /** Admin listener (admin API, /metrics, /healthz, /readyz). Keep it on a private interface. */
        host: z.string().default('127.0.0.1'),
        port: port.default(8081),
        /**
         * Bearer token of the admin API and /metrics (use `${ENV}`). Without one, every admin
         * route answers 401; /healthz and /readyz stay open for probes.
         */
        token: z.string().min(16, 'use at least 16 characters').optional(),
      })
      .prefault({}),
    filters: z
      .strictObject({
        /**
         * Key of the HMAC that binds filter ids to their upstream and API key; every replica must
         * have the same (use `${ENV}`). Unset: one is generated once and kept in the store, so
         * replicas sharing a store agree (docs/routing.md#filters).
         */
        idSecret: z.string().min(32, 'use at least 32 characters').optional(),
      })
      .prefault({}),
    portal: portalSchema.prefault({}),
    webhooks: webhooksSchema.prefault({}),
    tracing: tracingSchema.optional(),
    explorer: explorerSchema.prefault({}),
    networks: z.array(networkSchema).min(1),
  })
  .superRefine((config, ctx) => {
    if (config.webhooks.url !== undefined && config.webhooks.signingSecret === undefined) {
      ctx.addIssue({ code: 'custom', path: ['webhooks', 'signingSecret'], message: 'required with webhooks.url (the receiver checks signatures with it)' });
    }
    if (config.server.headersTimeoutMs > config.server.receiveTimeoutMs) {
      ctx.addIssue({ code: 'custom', path: ['server', 'headersTimeoutMs'], message: 'must not exceed server.receiveTimeoutMs' });
    }
    const seen = new Set<string>();
    config.networks.forEach((network, index) => {
      if (seen.has(network.id)) {
        ctx.addIssue({ code: 'custom', path: ['networks', index, 'id'], message: `duplicate network id "${network.id}"` });
      }
      seen.add(network.id);
      const upstreamIds = new Set<string>();
      network.upstreams.forEach((upstream, upstreamIndex) => {
        if (upstreamIds.has(upstream.id)) {
          ctx.addIssue({
            code: 'custom',
            path: ['networks', index, 'upstreams', upstreamIndex, 'id'],
            message: `duplicate upstream id "${upstream.id}"`,
          });
        }
        upstreamIds.add(upstream.id);
      });
      if (network.requestTimeoutMs >= config.credits.staleReservationMs) {
        ctx.addIssue({
          code: 'custom',
          path: ['networks', index, 'requestTimeoutMs'],
          message: `must be shorter than credits.staleReservationMs (${config.credits.staleReservationMs}), or the sweep would refund a request still running`,
        });
      }
      for (const issue of methodSettingsIssues(network)) {
        ctx.addIssue({ code: 'custom', path: ['networks', index, ...issue.path], message: issue.message });
      }
      if (network.kind === 'evm' && network.chainId === undefined) {
        ctx.addIssue({ code: 'custom', path: ['networks', index, 'chainId'], message: 'EVM networks need a chainId' });
      }
    });
    const baseUrlOwners = new Map<string, string>();
    config.networks.forEach((network, index) => {
      network.baseUrls.forEach((url, urlIndex) => {
        const normalised = url.toLowerCase();
        const owner = baseUrlOwners.get(normalised);
        if (owner !== undefined) {
          ctx.addIssue({
            code: 'custom',
            path: ['networks', index, 'baseUrls', urlIndex],
            message: `base URL "${url}" is already used by network "${owner}"`,
          });
        }
        baseUrlOwners.set(normalised, network.id);
      });
    });
  });

export type GatewayConfig = z.output<typeof configSchema>;
export type NetworkConfig = GatewayConfig['networks'][number];
export type UpstreamConfig = NetworkConfig['upstreams'][number];
export type StoreConfig = GatewayConfig['store'];
export type PortalConfig = GatewayConfig['portal'];
export type WebhooksConfig = GatewayConfig['webhooks'];
export type { NetworkKind } from '../methods/catalogue.js';
