import { Cluster, Redis } from 'ioredis';

/**
 * One factory for every Redis connection the gateway makes: one Redis (standalone, or a primary
 * with replicas) from a URL, or Redis Cluster from seed URLs. The store and the shared response
 * cache take what it returns; both clients have the same command API, and {@link RedisConnection}
 * adds what differs: which node a key lives on, a readiness check that covers every master, and
 * SCAN over every master.
 */

export interface RedisConnectionOptions {
  /** One Redis: `redis://[user:password@]host:port[/db]` or `rediss://`. */
  url?: string;
  /** Redis Cluster: seed nodes (any reachable ones; the rest is discovered). */
  cluster?: readonly string[];
  /** Connect and command timeout: how long a caller waits on an unreachable node. */
  commandTimeoutMs: number;
}

export interface RedisConnection {
  client: Redis | Cluster;
  clustered: boolean;
  /** The master node a key lives on now (`host:port`); one Redis: always the same. */
  nodeOf(key: string): string;
  /** Resolves when every master serving slots answers (readiness); rejects otherwise. */
  ping(): Promise<void>;
  /** Every key matching `pattern` on every master (for `tollgate migrate`; never on a hot path). */
  scan(pattern: string): Promise<string[]>;
  /** Asks the cluster again which node serves which slot (after a failover); one Redis: nothing to do. */
  refreshSlots(): Promise<void>;
  /** A master's `redis_version`, e.g. `7.0.15`. */
  serverVersion(): Promise<string>;
  close(): void;
}

/** The URL without credentials, for error messages. */
export function redactRedisUrl(url: string): string {
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

/** The hash slot of a key, as Redis Cluster computes it (CRC16/XMODEM of the hash tag or the key, mod 16384). */
export function keySlot(key: string): number {
  let hashed = key;
  const open = key.indexOf('{');
  if (open !== -1) {
    const close = key.indexOf('}', open + 1);
    if (close > open + 1) hashed = key.slice(open + 1, close);
  }
  let crc = 0;
  for (const byte of Buffer.from(hashed, 'utf8')) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit += 1) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

function parseSeed(url: string): { host: string; port: number; username?: string; password?: string; tls: boolean } {
  const parsed = new URL(url);
  return {
    host: parsed.hostname,
    port: Number(parsed.port || 6379),
    username: parsed.username === '' ? undefined : decodeURIComponent(parsed.username),
    password: parsed.password === '' ? undefined : decodeURIComponent(parsed.password),
    tls: parsed.protocol === 'rediss:',
  };
}

function infoField(info: string, field: string): string | undefined {
  return new RegExp(`^${field}:(.*)$`, 'm').exec(info)?.[1]?.trim();
}

async function scanNode(node: Redis, pattern: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    found.push(...keys);
    cursor = next;
  } while (cursor !== '0');
  return found;
}

/** The masters serving slots now; throws when a slot has none or its master is not connected. */
function mastersServingSlots(cluster: Cluster): Redis[] {
  const keys = new Set<string>();
  for (let slot = 0; slot < 16384; slot += 1) {
    const owner = cluster.slots[slot]?.[0];
    if (owner === undefined) throw new Error(`Redis Cluster slot ${slot} has no master`);
    keys.add(owner);
  }
  const nodes = new Map(cluster.nodes('master').map((node) => [`${node.options.host}:${node.options.port}`, node]));
  return [...keys].map((key) => {
    const node = nodes.get(key);
    if (node === undefined) throw new Error(`Redis Cluster master ${key} is not connected`);
    return node;
  });
}

/** Resolves when `node` is ready for commands; rejects when it closes or `timeoutMs` passes first. */
function nodeReady(node: Redis, timeoutMs: number): Promise<void> {
  if (node.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const settle = (error?: Error) => {
      clearTimeout(timer);
      node.off('ready', onReady);
      node.off('end', onEnd);
      if (error === undefined) resolve();
      else reject(error);
    };
    const onReady = () => settle();
    const onEnd = () => settle(new Error(`node ${node.options.host}:${node.options.port} closed before it was ready`));
    const timer = setTimeout(() => settle(new Error(`node ${node.options.host}:${node.options.port} not ready within ${timeoutMs} ms`)), timeoutMs);
    node.once('ready', onReady);
    node.once('end', onEnd);
  });
}

export async function createRedisConnection(options: RedisConnectionOptions): Promise<RedisConnection> {
  const timeout = options.commandTimeoutMs;
  if (options.cluster === undefined || options.cluster.length === 0) {
    if (options.url === undefined) throw new Error('a Redis URL or cluster seed URLs are required');
    const redis = new Redis(options.url, {
      lazyConnect: true,
      connectTimeout: timeout,
      commandTimeout: timeout,
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
    return {
      client: redis,
      clustered: false,
      nodeOf: () => 'redis',
      ping: async () => void (await redis.ping()),
      scan: (pattern) => scanNode(redis, pattern),
      refreshSlots: async () => undefined,
      serverVersion: async () => infoField(await redis.info('server'), 'redis_version') ?? 'unknown',
      close: () => redis.disconnect(),
    };
  }

  const seeds = options.cluster.map(parseSeed);
  const first = seeds[0]!;
  const cluster = new Cluster(
    seeds.map(({ host, port }) => ({ host, port })),
    {
      lazyConnect: true,
      // A command to a master that went away fails at once (as with one Redis) instead of being
      // sent again: it may have run before the connection broke, and running a ledger commit
      // twice would charge twice. MOVED, ASK, TRYAGAIN and CLUSTERDOWN mean the command did not
      // run: those are retried (a slot moved, a failover is under way).
      retryDelayOnFailover: 0,
      retryDelayOnClusterDown: 100,
      retryDelayOnTryAgain: 100,
      maxRedirections: 16,
      enableOfflineQueue: false,
      // A promoted replica is found within a second even when no command is redirected to it.
      slotsRefreshInterval: 1_000,
      slotsRefreshTimeout: timeout,
      clusterRetryStrategy: (attempt) => Math.min(attempt * 200, 2_000),
      redisOptions: {
        connectTimeout: timeout,
        commandTimeout: timeout,
        maxRetriesPerRequest: 0,
        username: first.username,
        password: first.password,
        tls: first.tls ? {} : undefined,
      },
    },
  );
  cluster.on('error', () => undefined);
  const seedList = options.cluster.map(redactRedisUrl).join(', ');
  try {
    await cluster.connect();
    // Node connections are made lazily, and a command to a node still connecting would fail (no
    // offline queue): every node, replicas included, is connected as soon as it is known, so a
    // promoted replica is ready when its first command arrives. Only once the cluster is ready:
    // connecting a node while ioredis is still making its first connection can make it drop
    // every node and start over, and the promise of `connect()` then never settles.
    const connectEagerly = (node: Redis) => {
      node.on('error', () => undefined);
      if (node.status === 'wait') node.connect().catch(() => undefined);
    };
    for (const node of cluster.nodes('all')) connectEagerly(node);
    cluster.on('+node', connectEagerly);
    // Every master serving slots answers (a dead seed node is no reason not to start).
    await Promise.all(mastersServingSlots(cluster).map(async (node) => {
      await nodeReady(node, timeout);
      await node.ping();
    }));
  } catch (error) {
    cluster.disconnect();
    throw new Error(`cannot reach Redis Cluster at ${seedList}: ${(error as Error).message}`, { cause: error });
  }
  const masters = () => mastersServingSlots(cluster);
  return {
    client: cluster,
    clustered: true,
    nodeOf: (key) => cluster.slots[keySlot(key)]?.[0] ?? 'unknown',
    async ping() {
      const state = infoField(await cluster.cluster('INFO'), 'cluster_state');
      if (state !== 'ok') throw new Error(`Redis Cluster state is ${state ?? 'unknown'}`);
      await Promise.all(masters().map((node) => node.ping()));
    },
    async scan(pattern) {
      return (await Promise.all(masters().map((node) => scanNode(node, pattern)))).flat();
    },
    refreshSlots: () => new Promise((resolve) => cluster.refreshSlotsCache(() => resolve())),
    serverVersion: async () => infoField(await masters()[0]!.info('server'), 'redis_version') ?? 'unknown',
    close: () => cluster.disconnect(),
  };
}
