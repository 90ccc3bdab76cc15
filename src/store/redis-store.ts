import { composeStore } from './compose-store.js';
import { PROCESS_OWNER_TAG } from './owner.js';
import { createRedisConnection, type RedisConnection } from './redis-client.js';
import { createRedisKeyDirectory } from './redis-key-directory.js';
import { createRedisKeyspace } from './redis-keyspace.js';
import { createRedisLedger } from './redis-ledger.js';
import { withProviderSpend } from './provider-spend.js';
import { createRedisRequestLog } from './redis-request-log.js';
import { createRedisUpstreamPermits, createRedisUpstreamQuotas } from './redis-upstream-permits.js';
import { createRedisTeamTokens } from './redis-team-tokens.js';
import { createRedisUsage } from './redis-usage.js';
import type { Store, StoreSnapshot, UsageQuery, UsageRow } from './types.js';

/**
 * The distributed store: several gateway replicas on several machines share teams, keys,
 * balances and throughput limits through one Redis (standalone or a primary with replicas) or
 * Redis Cluster. This file connects (redis-client.ts), keeps the process's heartbeat, and
 * composes the ledger (redis-ledger.ts), the key directory (redis-key-directory.ts), usage
 * (redis-usage.ts), team tokens and snapshots; every key name is in redis-keyspace.ts.
 *
 * Day counters and usage hashes expire `usageRetentionDays` after their day, so usage reports
 * cover that window. Each process keeps an `owner:<tag>` heartbeat; reservations whose owner's
 * heartbeat has expired (the process died) are refunded by any replica's sweep.
 */

export interface RedisStoreOptions {
  /** One Redis. */
  url?: string;
  /** Redis Cluster seed URLs (instead of `url`). */
  cluster?: readonly string[];
  keyPrefix: string;
  usageRetentionDays: number;
  /** Connection and command timeout: how long a request waits on an unreachable Redis. */
  commandTimeoutMs: number;
  /** Replica acknowledgements every ledger commit waits for (`WAIT`); 0: none. */
  waitReplicas?: number;
  now?: () => number;
}

const OWNER_HEARTBEAT_MS = 10_000;
const OWNER_TTL_MS = 30_000;
/** Redis Cluster: the ledger's per-node scripts need the `allow-cross-slot-keys` script flag. */
const CLUSTER_MIN_MAJOR_VERSION = 7;

export async function createRedisStore(options: RedisStoreOptions): Promise<Store> {
  const connection = await createRedisConnection({ url: options.url, cluster: options.cluster, commandTimeoutMs: options.commandTimeoutMs });
  try {
    return await storeOn(connection, options);
  } catch (error) {
    connection.close();
    throw error;
  }
}

async function storeOn(connection: RedisConnection, options: RedisStoreOptions): Promise<Store> {
  const now = options.now ?? Date.now;
  const redis = connection.client;
  if (connection.clustered) {
    const version = await connection.serverVersion();
    if (Number(version.split('.')[0]) < CLUSTER_MIN_MAJOR_VERSION) {
      throw new Error(`Redis Cluster ${version} is too old for the store: it needs Redis ${CLUSTER_MIN_MAJOR_VERSION}.0 or newer (script flag allow-cross-slot-keys)`);
    }
  }
  const keys = createRedisKeyspace(options.keyPrefix, connection.clustered);
  /** Seconds a day's counters live: until `usageRetentionDays` after the day ends (at least a minute). */
  const retentionSeconds = (day: string) =>
    Math.max(60, Math.ceil((Date.parse(`${day}T00:00:00Z`) + (options.usageRetentionDays + 1) * 86_400_000 - now()) / 1000));

  const directory = createRedisKeyDirectory(redis, { keys, now });
  const usageStore = createRedisUsage(redis, keys, retentionSeconds);
  const ledger = createRedisLedger(connection, {
    keys,
    now,
    retentionSeconds,
    teamIds: directory.teamIds,
    waitReplicas: options.waitReplicas ?? 0,
    commandTimeoutMs: options.commandTimeoutMs,
  });
  const portal = createRedisTeamTokens(redis, { keys, now });

  const beat = () => redis.set(keys.owner(PROCESS_OWNER_TAG), '1', 'PX', OWNER_TTL_MS).catch(() => undefined);
  await beat();
  const heartbeat = setInterval(beat, OWNER_HEARTBEAT_MS);
  heartbeat.unref();

  async function usage(query: UsageQuery): Promise<UsageRow[]> {
    const teamIds =
      query.teamId !== undefined
        ? [query.teamId]
        : query.keyId !== undefined
          ? [(await directory.findKey(query.keyId))?.teamId].filter((id): id is string => id !== undefined)
          : await directory.teamIds();
    const [charged, spend] = await Promise.all([usageStore.usageOf(teamIds, query), usageStore.spendOf(teamIds, query)]);
    return withProviderSpend(charged, spend);
  }

  return composeStore({
    ledger,
    directory,
    usage,
    async sharedSecret(name, candidate) {
      // NX: the first replica to start stores its candidate; every other one reads it back.
      await redis.set(keys.sharedSecret(name), candidate, 'NX');
      const value = await redis.get(keys.sharedSecret(name));
      if (value === null) throw new Error(`shared secret ${name} vanished from Redis`);
      return value;
    },
    async sharedSecrets() {
      const found = await connection.scan(keys.sharedSecretPattern);
      const start = keys.sharedSecretPattern.length - 1;
      const values = await Promise.all(found.map(async (key) => ({ name: key.slice(start), value: (await redis.get(key)) ?? '' })));
      return values.sort((a, b) => (a.name < b.name ? -1 : 1));
    },
    hourlyUsage: usageStore.hourlyUsage,
    requests: createRedisRequestLog(redis, keys),
    providerSpend: { addProviderSpend: usageStore.addProviderSpend },
    upstreamPermits: createRedisUpstreamPermits(redis, keys),
    upstreamQuotas: createRedisUpstreamQuotas(redis, keys),
    portal,
    async teamTokensWithHashes() {
      const hashKeys = await connection.scan(keys.teamTokenHash('*'));
      const start = keys.teamTokenHash('').length;
      const hashOf = new Map<string, string>();
      await Promise.all(hashKeys.map(async (key) => hashOf.set((await redis.get(key)) ?? '', key.slice(start))));
      const tokens = await portal.listTeamTokens();
      return tokens.flatMap((token) => {
        const tokenHash = hashOf.get(token.id);
        return tokenHash === undefined ? [] : [{ ...token, tokenHash }];
      });
    },
    async importSnapshot(snapshot: StoreSnapshot) {
      // The directory first, all or nothing (one MULTI; on Redis Cluster its keys share one slot),
      // after its team names were claimed; then usage, one MULTI per team.
      const multi = redis.multi();
      await directory.importEntries(snapshot, multi);
      for (const token of snapshot.teamTokens) portal.importTeamToken(token, multi);
      for (const { name, value } of snapshot.sharedSecrets) multi.set(keys.sharedSecret(name), value);
      await multi.exec();
      await Promise.all(snapshot.alertSettings.map(({ teamId, settings }) => portal.setAlertSettings(teamId, settings)));
      await usageStore.importUsage(snapshot.usage);
      await usageStore.importHourlyUsage(snapshot.hourlyUsage);
    },
    ping: () => connection.ping(),
    async close() {
      clearInterval(heartbeat);
      // The heartbeat is left to expire: other stores of this process share the owner tag.
      connection.close();
    },
  });
}
