import { Cluster, Redis } from 'ioredis';
import { promisify } from 'node:util';
import { deflateRaw, inflateRaw } from 'node:zlib';
import type { StoredAnswer } from './memory-tier.js';

/**
 * The shared tier of the response cache: entries in Redis, so that every replica, and a process
 * that restarted, answers what any of them fetched. It takes any ioredis client (a `Redis`, or a
 * `Cluster`: each entry is one key, so keys need no hash tag). Nothing here ever fails a call: a
 * Redis that is slow, down or full turns lookups into misses and drops writes, and the in-process
 * tier goes on alone; lookups are bounded by {@link SHARED_TIER_TIMEOUT_MS}.
 *
 * An entry is one binary string: a flag byte (bit 0: the answer is deflate-compressed), the
 * length of a small JSON header (anchor, expiry) as 4 bytes, the header, then the answer's bytes.
 * Answers over {@link COMPRESS_ABOVE_BYTES} are compressed; answers over `maxItemBytes` are not
 * shared at all. Entries live `ttlSeconds`, or less when their own expiry comes first.
 */

export interface SharedTier {
  /** The entry under a key, or undefined (also when Redis cannot be reached). */
  get(key: string): Promise<StoredAnswer | undefined>;
  /** Writes in the background; false when the answer is not shared (too large, Redis unavailable). */
  set(key: string, answer: StoredAnswer): boolean;
  /** Resolves once connected, or once the first connection attempt failed or took too long (never rejects). */
  connected(): Promise<void>;
  close(): Promise<void>;
}

export interface SharedTierOptions {
  ttlSeconds: number;
  maxItemBytes: number;
  /** Prefix of every key (one Redis may serve several deployments, or also be the store). */
  keyPrefix?: string;
  now?: () => number;
  /** Told of each Redis error (the gateway logs them, throttled, and counts them). */
  onError?: (error: unknown) => void;
}

/** How long a lookup may wait on Redis before it is a miss (loopback or same-zone Redis answers in well under 1 ms). */
export const SHARED_TIER_TIMEOUT_MS = 250;
export const COMPRESS_ABOVE_BYTES = 1024;
const COMPRESSED = 1;
const deflate = promisify(deflateRaw);
const inflate = promisify(inflateRaw);

type Client = Redis | Cluster;

/** Where the shared tier lives: one Redis, or Redis Cluster seed URLs (exactly one of them). */
export interface SharedTierTarget {
  url?: string;
  cluster?: readonly string[];
}

/**
 * Opens a client for `cache.shared` that never queues commands while Redis is down (they fail
 * at once) and never sends one again: a lookup that cannot be answered at once is a miss.
 */
export function openSharedTierClient(target: SharedTierTarget): Client {
  const nodeOptions = {
    connectTimeout: SHARED_TIER_TIMEOUT_MS * 4,
    commandTimeout: SHARED_TIER_TIMEOUT_MS,
    maxRetriesPerRequest: 0,
  };
  if (target.cluster !== undefined && target.cluster.length > 0) {
    const seeds = target.cluster.map((url) => new URL(url));
    const first = seeds[0]!;
    return new Cluster(
      seeds.map((seed) => ({ host: seed.hostname, port: Number(seed.port || 6379) })),
      {
        enableOfflineQueue: false,
        // A moved slot (MOVED, ASK) is followed; a master that went away is a miss until the
        // cluster has promoted its replica (found by the periodic slot refresh).
        retryDelayOnFailover: 0,
        retryDelayOnClusterDown: 0,
        slotsRefreshInterval: 1_000,
        clusterRetryStrategy: (attempt) => Math.min(attempt * 200, 2_000),
        redisOptions: {
          ...nodeOptions,
          username: first.username === '' ? undefined : decodeURIComponent(first.username),
          password: first.password === '' ? undefined : decodeURIComponent(first.password),
          tls: first.protocol === 'rediss:' ? {} : undefined,
        },
      },
    );
  }
  if (target.url === undefined) throw new Error('cache.shared needs a url or cluster seed URLs');
  return new Redis(target.url, { ...nodeOptions, enableOfflineQueue: false, retryStrategy: (attempt) => Math.min(attempt * 200, 2_000) });
}

export function createSharedTier(client: Client, options: SharedTierOptions): SharedTier {
  const prefix = options.keyPrefix ?? 'tollgate:cache:';
  const now = options.now ?? Date.now;
  // Errors arrive through failing commands; an 'error' event without a listener would crash the process.
  client.on('error', (error: unknown) => options.onError?.(error));

  async function encode(answer: StoredAnswer): Promise<Buffer> {
    const header = Buffer.from(
      JSON.stringify({ a: answer.anchor === undefined ? undefined : [answer.anchor.number, answer.anchor.hash], e: answer.expiresAt }),
    );
    const compress = answer.bytes.length > COMPRESS_ABOVE_BYTES;
    const body = compress ? await deflate(answer.bytes) : answer.bytes;
    const prelude = Buffer.alloc(5);
    prelude[0] = compress ? COMPRESSED : 0;
    prelude.writeUInt32BE(header.length, 1);
    return Buffer.concat([prelude, header, body]);
  }

  async function decode(value: Buffer): Promise<StoredAnswer | undefined> {
    if (value.length < 5) return undefined;
    const headerEnd = 5 + value.readUInt32BE(1);
    if (headerEnd > value.length) return undefined;
    const header = JSON.parse(value.toString('utf8', 5, headerEnd)) as { a?: [number, string]; e?: number };
    const body = value.subarray(headerEnd);
    const bytes = value[0] === COMPRESSED ? await inflate(body) : Buffer.from(body);
    const answer: StoredAnswer = { bytes };
    // Another process's anchor: its generation means nothing here, only the block it names.
    if (header.a !== undefined) answer.anchor = { number: header.a[0], hash: header.a[1], generation: -1 };
    if (header.e !== undefined) answer.expiresAt = header.e;
    return answer;
  }

  return {
    async get(key) {
      try {
        const value = await client.getBuffer(prefix + key);
        return value === null ? undefined : await decode(value);
      } catch (error) {
        options.onError?.(error);
        return undefined;
      }
    },
    set(key, answer) {
      if (answer.bytes.length > options.maxItemBytes || client.status !== 'ready') return false;
      const seconds = answer.expiresAt === undefined ? options.ttlSeconds : Math.min(options.ttlSeconds, Math.ceil((answer.expiresAt - now()) / 1000));
      if (seconds <= 0) return false;
      encode(answer)
        .then((value) => client.set(prefix + key, value, 'EX', seconds))
        .catch((error: unknown) => options.onError?.(error));
      return true;
    },
    connected() {
      if (client.status === 'ready') return Promise.resolve();
      return new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          client.off('ready', done);
          client.off('error', done);
          resolve();
        };
        const timer = setTimeout(done, SHARED_TIER_TIMEOUT_MS * 4);
        client.once('ready', done);
        client.once('error', done);
      });
    },
    async close() {
      client.disconnect();
    },
  };
}
