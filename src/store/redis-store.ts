import { Redis } from 'ioredis';
import { composeStore } from './compose-store.js';
import { PROCESS_OWNER_TAG } from './owner.js';
import { createRedisKeyDirectory } from './redis-key-directory.js';
import { createRedisLedger } from './redis-ledger.js';
import { createRedisTeamTokens } from './redis-team-tokens.js';
import type { Store, StoreSnapshot, UsageQuery, UsageRow } from './types.js';

/**
 * The distributed store: several gateway replicas on several machines share teams, keys,
 * balances and throughput limits through one Redis (standalone or a primary with replicas;
 * Redis Cluster is not supported because the ledger's scripts touch keys of several slots).
 * This file connects, keeps the process's heartbeat, and composes the ledger (redis-ledger.ts),
 * the key directory (redis-key-directory.ts), usage reports and snapshots; the key layout is in
 * redis-scripts.ts.
 *
 * Day counters and usage hashes expire `usageRetentionDays` after their day, so usage reports
 * cover that window. Each process keeps an `owner:<tag>` heartbeat; reservations whose owner's
 * heartbeat has expired (the process died) are refunded by any replica's sweep.
 */

export interface RedisStoreOptions {
  url: string;
  keyPrefix: string;
  usageRetentionDays: number;
  /** Connection and command timeout: how long a request waits on an unreachable Redis. */
  commandTimeoutMs: number;
  now?: () => number;
}

const OWNER_HEARTBEAT_MS = 10_000;
const OWNER_TTL_MS = 30_000;

/** The URL without credentials, for error messages. */
function redactRedisUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '' || parsed.username !== '') {
      parsed.username = '';
      parsed.password = '';
    }
    return parsed.toString();
  } catch {
    return 'redis://(unparseable url)';
  }
}

export async function createRedisStore(options: RedisStoreOptions): Promise<Store> {
  const now = options.now ?? Date.now;
  const p = options.keyPrefix;
  /** Seconds a day's counters live: until `usageRetentionDays` after the day ends (at least a minute). */
  const retentionSeconds = (day: string) =>
    Math.max(60, Math.ceil((Date.parse(`${day}T00:00:00Z`) + (options.usageRetentionDays + 1) * 86_400_000 - now()) / 1000));

  const redis = new Redis(options.url, {
    lazyConnect: true,
    connectTimeout: options.commandTimeoutMs,
    commandTimeout: options.commandTimeoutMs,
    // While Redis is down, commands fail at once instead of queueing: requests get a clear
    // answer (fail closed or open, per config) and the client keeps reconnecting in the background.
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: (attempt) => Math.min(attempt * 200, 2_000),
  });
  redis.on('error', () => undefined); // reported through failing commands; avoid unhandled 'error' events
  try {
    await redis.connect();
    await redis.ping();
  } catch (error) {
    redis.disconnect();
    throw new Error(`cannot reach Redis at ${redactRedisUrl(options.url)}: ${(error as Error).message}`, { cause: error });
  }
  const ledger = createRedisLedger(redis, { keyPrefix: p, now, retentionSeconds });
  const directory = createRedisKeyDirectory(redis, { keyPrefix: p, now });

  const beat = () => redis.set(`${p}owner:${PROCESS_OWNER_TAG}`, '1', 'PX', OWNER_TTL_MS).catch(() => undefined);
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
    const rows = await ledger.usageOf(teamIds, query);
    // Field by field in code-unit order, as SQLite's ORDER BY (localeCompare ignores the \u0000
    // separators and folds case, so 'eth-sepolia' sorted before 'eth').
    const fields = ['day', 'teamId', 'keyId', 'network', 'method'] as const;
    return rows.sort((a, b) => {
      for (const field of fields) if (a[field] !== b[field]) return a[field] < b[field] ? -1 : 1;
      return 0;
    });
  }

  return composeStore({
    ledger,
    directory,
    usage,
    async sharedSecret(name, candidate) {
      // NX: the first replica to start stores its candidate; every other one reads it back.
      await redis.set(`${p}shared-secret:${name}`, candidate, 'NX');
      const value = await redis.get(`${p}shared-secret:${name}`);
      if (value === null) throw new Error(`shared secret ${name} vanished from Redis`);
      return value;
    },
    hourlyUsage: ledger.hourlyUsage,
    portal: createRedisTeamTokens(redis, { keyPrefix: p, now }),
    async importSnapshot(snapshot: StoreSnapshot) {
      const multi = redis.multi();
      await directory.importEntries(snapshot, multi);
      ledger.importUsage(snapshot.usage, multi);
      await multi.exec();
    },
    async ping() {
      await redis.ping();
    },
    async close() {
      clearInterval(heartbeat);
      // The heartbeat is left to expire: other stores of this process share the owner tag.
      redis.disconnect();
    },
  });
}
