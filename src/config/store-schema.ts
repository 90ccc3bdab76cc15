// The schema of the `store` section: the SQLite or Redis driver of the ledger, key directory and
// usage (docs/store.md). Separate because each driver has its own fields and checks.
import { z } from 'zod';
import { positiveInt } from './schema-fields.js';

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

export const storeSchema = z.discriminatedUnion('driver', [sqliteStoreSchema, redisStoreSchema]);
