// The schema of the `server` section: the RPC listener's limits and timeouts, its CORS and its
// WebSocket endpoint. Separate from the root schema, which only places it.
import { z } from 'zod';
import { isIpRange } from '../auth/ip-matcher.js';
import { isOriginPattern } from '../auth/origin-matcher.js';
import { port, positiveInt } from './schema-fields.js';

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

export const serverSchema = z.strictObject({
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
});
