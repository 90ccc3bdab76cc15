import { z } from 'zod';
import { methodSettingsIssues } from '../methods/catalogue.js';
import { networkSchema } from './network-schema.js';
import { port, positiveInt } from './schema-fields.js';
import { serverSchema } from './server-schema.js';
import { storeSchema } from './store-schema.js';

/**
 * The one schema of the gateway's YAML configuration. Types, defaults and validation all come
 * from here and the section schemas it assembles (server-schema.ts, store-schema.ts,
 * network-schema.ts with upstream-schema.ts); every object is strict, so a misspelt key fails
 * start-up with its path named.
 * Durations are milliseconds, sizes are bytes, unless the field name says otherwise.
 */

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

export const configSchema = z
  .strictObject({
    server: serverSchema.prefault({}),
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
