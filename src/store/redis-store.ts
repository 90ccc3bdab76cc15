import { Redis } from 'ioredis';
import { newId } from './ids.js';
import { isLocalOwnerDead, PROCESS_OWNER_TAG } from './owner.js';
import { CHARGE_SCRIPT, FINISH_SCRIPT, RESERVE_SCRIPT } from './redis-scripts.js';
import {
  StoreConflictError,
  type ApiKey,
  type KeyPatch,
  type KeyWithTeam,
  type LedgerOp,
  type LedgerResult,
  type NewKey,
  type NewTeam,
  type Store,
  type Team,
  type TeamPatch,
  type UsageRow,
  type StoreSnapshot,
  type ChargeSubject,
} from './types.js';

/**
 * The distributed store: several gateway replicas on several machines share teams, keys,
 * balances and throughput limits through one Redis (standalone or a primary with replicas;
 * Redis Cluster is not supported because the ledger scripts touch keys of several slots).
 * Ledger operations are Lua scripts (see redis-scripts.ts); a batch of them is one pipeline.
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

interface RedisWithScripts extends Redis {
  tgCharge(...args: Array<string | number>): Promise<unknown[]>;
  tgReserve(...args: Array<string | number>): Promise<unknown[]>;
  tgFinish(...args: Array<string | number>): Promise<unknown[]>;
}

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

function teamFromHash(hash: Record<string, string>): Team | null {
  if (hash.id === undefined) return null;
  return {
    id: hash.id,
    name: hash.name!,
    dailyCredits: Number(hash.dailyCredits),
    creditsPerSecond: hash.creditsPerSecond === '' || hash.creditsPerSecond === undefined ? null : Number(hash.creditsPerSecond),
    createdAt: Number(hash.createdAt),
  };
}

function keyFromHash(hash: Record<string, string>): ApiKey | null {
  if (hash.id === undefined) return null;
  const nullableNumber = (value: string | undefined) => (value === undefined || value === '' ? null : Number(value));
  return {
    id: hash.id,
    teamId: hash.teamId!,
    label: hash.label === undefined || hash.label === '' ? null : hash.label,
    dailyCap: nullableNumber(hash.dailyCap),
    allowedNetworks: hash.allowedNetworks === undefined || hash.allowedNetworks === '' ? null : (JSON.parse(hash.allowedNetworks) as string[]),
    expiresAt: nullableNumber(hash.expiresAt),
    revokedAt: nullableNumber(hash.revokedAt),
    createdAt: Number(hash.createdAt),
  };
}

function dayRange(fromDay: string, toDay: string): string[] {
  const days: string[] = [];
  for (let at = Date.parse(`${fromDay}T00:00:00Z`); at <= Date.parse(`${toDay}T00:00:00Z`); at += 86_400_000) {
    days.push(new Date(at).toISOString().slice(0, 10));
  }
  return days;
}

function toLedgerResult(reply: unknown[]): LedgerResult {
  const [status, teamUsed] = reply as [number, number, ...unknown[]];
  if (status === 1) return { ok: true, teamUsed };
  if (status === 3) return { ok: true, teamUsed: 0 }; // settle/refund of a reservation already swept
  if (status === 2) return { ok: false, reason: 'rate_limited', retryAfterMs: Number(reply[2]), teamUsed };
  return {
    ok: false,
    reason: 'daily_credits_exhausted',
    scope: reply[2] === 'key' ? 'key' : 'team',
    limit: Number(reply[3]),
    used: Number(reply[4]),
    teamUsed,
  };
}

/** Charges that may share one script call: the same subject, priced and limited the same way. */
function sameCharge(op: LedgerOp, subject: ChargeSubject): boolean {
  if (op.type !== 'charge') return false;
  const other = op.subject;
  return (
    other.teamId === subject.teamId &&
    other.keyId === subject.keyId &&
    other.day === subject.day &&
    other.network === subject.network &&
    other.method === subject.method &&
    other.cost === subject.cost &&
    other.teamDailyCredits === subject.teamDailyCredits &&
    other.keyDailyCap === subject.keyDailyCap &&
    other.teamCreditsPerSecond === subject.teamCreditsPerSecond
  );
}

/** One result per charge of a shared call: the first `admitted` succeeded, the rest met the refusal. */
function chargeResults(reply: unknown[], count: number, cost: number): LedgerResult[] {
  const admitted = Number(reply[0]);
  const lastUsed = Number(reply[1]);
  const results: LedgerResult[] = [];
  for (let index = 0; index < admitted; index += 1) results.push({ ok: true, teamUsed: lastUsed - (admitted - 1 - index) * cost });
  if (admitted < count) {
    const refusal = toLedgerResult(reply.slice(2));
    for (let index = admitted; index < count; index += 1) results.push(refusal);
  }
  return results;
}

function utcDayOf(epochMs: number): string {
  return new Date(epochMs).toISOString().slice(0, 10);
}

export async function createRedisStore(options: RedisStoreOptions): Promise<Store> {
  const now = options.now ?? Date.now;
  const p = options.keyPrefix;
  const owner = PROCESS_OWNER_TAG;
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
  }) as RedisWithScripts;
  redis.on('error', () => undefined); // reported through failing commands; avoid unhandled 'error' events
  try {
    await redis.connect();
    await redis.ping();
  } catch (error) {
    redis.disconnect();
    throw new Error(`cannot reach Redis at ${redactRedisUrl(options.url)}: ${(error as Error).message}`, { cause: error });
  }
  redis.defineCommand('tgCharge', { numberOfKeys: 5, lua: CHARGE_SCRIPT });
  redis.defineCommand('tgReserve', { numberOfKeys: 5, lua: RESERVE_SCRIPT });
  redis.defineCommand('tgFinish', { numberOfKeys: 2, lua: FINISH_SCRIPT });

  const beat = () => redis.set(`${p}owner:${owner}`, '1', 'PX', OWNER_TTL_MS).catch(() => undefined);
  await beat();
  const heartbeat = setInterval(beat, OWNER_HEARTBEAT_MS);
  heartbeat.unref();

  async function readTeam(id: string): Promise<Team | null> {
    return teamFromHash(await redis.hgetall(`${p}team:${id}`));
  }
  async function readKey(id: string): Promise<ApiKey | null> {
    return keyFromHash(await redis.hgetall(`${p}key:${id}`));
  }


  const store: Store = {
    async createTeam(team: NewTeam) {
      const id = newId('team');
      const claimed = await redis.set(`${p}team-name:${team.name}`, id, 'NX');
      if (claimed === null) throw new StoreConflictError(`a team named "${team.name}" already exists`);
      const created: Team = { id, name: team.name, dailyCredits: team.dailyCredits, creditsPerSecond: team.creditsPerSecond ?? null, createdAt: now() };
      await redis
        .multi()
        .hset(`${p}team:${id}`, {
          id,
          name: created.name,
          dailyCredits: created.dailyCredits,
          creditsPerSecond: created.creditsPerSecond ?? '',
          createdAt: created.createdAt,
        })
        .zadd(`${p}teams`, created.createdAt, id)
        .exec();
      return created;
    },
    async findTeam(idOrName) {
      const byId = await readTeam(idOrName);
      if (byId !== null) return byId;
      const id = await redis.get(`${p}team-name:${idOrName}`);
      return id === null ? null : readTeam(id);
    },
    async listTeams() {
      const ids = await redis.zrange(`${p}teams`, '0', '-1');
      const teams = await Promise.all(ids.map(readTeam));
      return teams.filter((team): team is Team => team !== null);
    },
    async updateTeam(id, patch: TeamPatch) {
      if ((await readTeam(id)) === null) return null;
      const fields: Record<string, string | number> = {};
      if (patch.dailyCredits !== undefined) fields.dailyCredits = patch.dailyCredits;
      if (patch.creditsPerSecond !== undefined) fields.creditsPerSecond = patch.creditsPerSecond ?? '';
      if (Object.keys(fields).length > 0) await redis.hset(`${p}team:${id}`, fields);
      return readTeam(id);
    },
    async createKey(key: NewKey) {
      const id = newId('key');
      const createdAt = now();
      await redis
        .multi()
        .hset(`${p}key:${id}`, {
          id,
          teamId: key.teamId,
          label: key.label ?? '',
          dailyCap: key.dailyCap ?? '',
          allowedNetworks: key.allowedNetworks == null ? '' : JSON.stringify(key.allowedNetworks),
          expiresAt: key.expiresAt ?? '',
          revokedAt: '',
          createdAt,
        })
        .hset(`${p}secret:${key.secretHash}`, { keyId: id, validUntil: '' })
        .sadd(`${p}key-secrets:${id}`, key.secretHash)
        .zadd(`${p}keys`, createdAt, id)
        .zadd(`${p}team-keys:${key.teamId}`, createdAt, id)
        .exec();
      return (await readKey(id))!;
    },
    async findKeyBySecretHash(secretHash): Promise<KeyWithTeam | null> {
      const secret = await redis.hgetall(`${p}secret:${secretHash}`);
      if (secret.keyId === undefined) return null;
      const key = await readKey(secret.keyId);
      if (key === null) return null;
      const team = await readTeam(key.teamId);
      if (team === null) return null;
      return { key, team, secretValidUntil: secret.validUntil === '' || secret.validUntil === undefined ? null : Number(secret.validUntil) };
    },
    async listKeys(filter = {}) {
      const ids = await redis.zrange(filter.teamId === undefined ? `${p}keys` : `${p}team-keys:${filter.teamId}`, '0', '-1');
      const keys = await Promise.all(ids.map(readKey));
      return keys.filter((key): key is ApiKey => key !== null);
    },
    findKey: readKey,
    async revokeKey(id, at) {
      const key = await readKey(id);
      if (key === null) return false;
      if (key.revokedAt === null) await redis.hset(`${p}key:${id}`, 'revokedAt', at);
      return true;
    },
    async updateKey(id, patch: KeyPatch) {
      if ((await readKey(id)) === null) return null;
      const fields: Record<string, string | number> = {};
      if (patch.label !== undefined) fields.label = patch.label ?? '';
      if (patch.dailyCap !== undefined) fields.dailyCap = patch.dailyCap ?? '';
      if (patch.allowedNetworks !== undefined) fields.allowedNetworks = patch.allowedNetworks === null ? '' : JSON.stringify(patch.allowedNetworks);
      if (patch.expiresAt !== undefined) fields.expiresAt = patch.expiresAt ?? '';
      if (Object.keys(fields).length > 0) await redis.hset(`${p}key:${id}`, fields);
      return readKey(id);
    },
    async rotateKey(id, newSecretHash, previousValidUntil) {
      if ((await readKey(id)) === null) return false;
      const hashes = await redis.smembers(`${p}key-secrets:${id}`);
      const multi = redis.multi();
      for (const hash of hashes) {
        const current = await redis.hget(`${p}secret:${hash}`, 'validUntil');
        const until = current === null || current === '' ? previousValidUntil : Math.min(Number(current), previousValidUntil);
        multi.hset(`${p}secret:${hash}`, 'validUntil', until);
      }
      multi.hset(`${p}secret:${newSecretHash}`, { keyId: id, validUntil: '' }).sadd(`${p}key-secrets:${id}`, newSecretHash);
      await multi.exec();
      return true;
    },
    async applyLedger(ops) {
      const pipeline = redis.pipeline() as ReturnType<Redis['pipeline']> & {
        tgCharge(...args: Array<string | number>): unknown;
        tgReserve(...args: Array<string | number>): unknown;
        tgFinish(...args: Array<string | number>): unknown;
      };
      // Each pipelined command answers `count` operations (consecutive identical charges share one).
      const counts: number[] = [];
      const ttlOfDay = new Map<string, number>();
      const ttl = (day: string): number => {
        let seconds = ttlOfDay.get(day);
        if (seconds === undefined) ttlOfDay.set(day, (seconds = retentionSeconds(day)));
        return seconds;
      };
      // The KEYS[1..3] and ARGV[1..6] of the scripts' shared admission (redis-scripts.ts).
      const admissionKeys = (s: ChargeSubject) => [`${p}used:team:${s.teamId}:${s.day}`, `${p}used:key:${s.keyId}:${s.day}`, `${p}bucket:${s.teamId}`];
      const admissionArgs = (s: ChargeSubject, nowMs: number) => [s.cost, s.teamDailyCredits, s.keyDailyCap ?? '', s.teamCreditsPerSecond ?? '', nowMs, ttl(s.day)];
      for (let index = 0; index < ops.length; index += 1) {
        const op = ops[index]!;
        switch (op.type) {
          case 'peek':
            pipeline.get(`${p}used:team:${op.teamId}:${op.day}`);
            counts.push(1);
            break;
          case 'charge': {
            const s = op.subject;
            let count = 1;
            while (index + count < ops.length && sameCharge(ops[index + count]!, s)) count += 1;
            index += count - 1;
            pipeline.tgCharge(
              ...admissionKeys(s),
              `${p}usage:c:${s.teamId}:${s.day}`,
              `${p}usage:r:${s.teamId}:${s.day}`,
              ...admissionArgs(s, op.nowMs),
              `${s.keyId}\t${s.network}\t${s.method}`,
              count,
            );
            counts.push(count);
            break;
          }
          case 'reserve': {
            const s = op.subject;
            pipeline.tgReserve(
              ...admissionKeys(s),
              `${p}resv:${op.reservationId}`,
              `${p}reservations`,
              ...admissionArgs(s, op.nowMs),
              op.reservationId,
              s.teamId,
              s.keyId,
              s.day,
              s.network,
              s.method,
              owner,
            );
            counts.push(1);
            break;
          }
          case 'settle':
          case 'refund':
            pipeline.tgFinish(`${p}resv:${op.reservationId}`, `${p}reservations`, p, op.reservationId, ttl(utcDayOf(now())), op.type);
            counts.push(1);
            break;
        }
      }
      const replies = (await pipeline.exec()) ?? [];
      const results: LedgerResult[] = [];
      replies.forEach(([error, reply], command) => {
        if (error) throw error;
        const op = ops[results.length]!;
        if (op.type === 'peek') results.push({ ok: true, teamUsed: Number(reply ?? 0) });
        else if (op.type === 'charge') results.push(...chargeResults(reply as unknown[], counts[command]!, op.subject.cost));
        else results.push(toLedgerResult(reply as unknown[]));
      });
      return results;
    },
    async usage(query) {
      const teamIds =
        query.teamId !== undefined
          ? [query.teamId]
          : query.keyId !== undefined
            ? [(await readKey(query.keyId))?.teamId].filter((id): id is string => id !== undefined)
            : await redis.zrange(`${p}teams`, '0', '-1');
      const rows: UsageRow[] = [];
      for (const day of dayRange(query.fromDay, query.toDay)) {
        for (const teamId of teamIds) {
          const [credits, requests] = await Promise.all([redis.hgetall(`${p}usage:c:${teamId}:${day}`), redis.hgetall(`${p}usage:r:${teamId}:${day}`)]);
          for (const [field, value] of Object.entries(credits)) {
            const [keyId, network, method] = field.split('\t') as [string, string, string];
            if (query.keyId !== undefined && keyId !== query.keyId) continue;
            rows.push({ day, teamId, keyId, network, method, credits: Number(value), requests: Number(requests[field] ?? 0) });
          }
        }
      }
      // Field by field in code-unit order, as SQLite's ORDER BY (localeCompare ignores the \u0000
      // separators and folds case, so 'eth-sepolia' sorted before 'eth').
      const fields = ['day', 'teamId', 'keyId', 'network', 'method'] as const;
      return rows.sort((a, b) => {
        for (const field of fields) if (a[field] !== b[field]) return a[field] < b[field] ? -1 : 1;
        return 0;
      });
    },
    async recoverReservations(olderThanMs) {
      const ids = await redis.zrange(`${p}reservations`, '0', '-1');
      let refunded = 0;
      const liveOwners = new Map<string, boolean>();
      for (const id of ids) {
        const [reservationOwner, createdAt] = await redis.hmget(`${p}resv:${id}`, 'owner', 'createdAt');
        let stale = reservationOwner === null || Number(createdAt) < now() - olderThanMs;
        if (!stale && reservationOwner !== owner) {
          let alive = liveOwners.get(reservationOwner!);
          if (alive === undefined) {
            // A process of this host that is gone is known dead at once (a restart after kill -9);
            // another host's process is dead once its heartbeat has expired.
            alive = !isLocalOwnerDead(reservationOwner!) && (await redis.exists(`${p}owner:${reservationOwner}`)) === 1;
            liveOwners.set(reservationOwner!, alive);
          }
          stale = !alive;
        }
        if (!stale) continue;
        const reply = (await redis.tgFinish(`${p}resv:${id}`, `${p}reservations`, p, id, 60, 'refund')) as unknown[];
        if (reply[0] === 1) refunded += 1;
      }
      return refunded;
    },
    async exportSnapshot(day) {
      const keys = await store.listKeys();
      const withSecrets = await Promise.all(
        keys.map(async (key) => {
          const hashes = await redis.smembers(`${p}key-secrets:${key.id}`);
          const secrets = await Promise.all(
            hashes.map(async (hash) => {
              const validUntil = await redis.hget(`${p}secret:${hash}`, 'validUntil');
              return { hash, validUntil: validUntil === null || validUntil === '' ? null : Number(validUntil) };
            }),
          );
          return { ...key, secrets };
        }),
      );
      return { teams: await store.listTeams(), keys: withSecrets, day, usage: await store.usage({ fromDay: day, toDay: day }) };
    },
    async importSnapshot(snapshot: StoreSnapshot) {
      const claimed: string[] = [];
      for (const team of snapshot.teams) {
        if ((await redis.set(`${p}team-name:${team.name}`, team.id, 'NX')) === null) {
          // Release the names this import claimed, so that a refused import leaves nothing behind
          // and can be retried once the clash is resolved.
          if (claimed.length > 0) await redis.del(...claimed);
          throw new StoreConflictError(`a team named "${team.name}" already exists`);
        }
        claimed.push(`${p}team-name:${team.name}`);
      }
      const multi = redis.multi();
      for (const team of snapshot.teams) {
        multi.hset(`${p}team:${team.id}`, {
          id: team.id,
          name: team.name,
          dailyCredits: team.dailyCredits,
          creditsPerSecond: team.creditsPerSecond ?? '',
          createdAt: team.createdAt,
        });
        multi.zadd(`${p}teams`, team.createdAt, team.id);
      }
      for (const key of snapshot.keys) {
        multi.hset(`${p}key:${key.id}`, {
          id: key.id,
          teamId: key.teamId,
          label: key.label ?? '',
          dailyCap: key.dailyCap ?? '',
          allowedNetworks: key.allowedNetworks === null ? '' : JSON.stringify(key.allowedNetworks),
          expiresAt: key.expiresAt ?? '',
          revokedAt: key.revokedAt ?? '',
          createdAt: key.createdAt,
        });
        multi.zadd(`${p}keys`, key.createdAt, key.id).zadd(`${p}team-keys:${key.teamId}`, key.createdAt, key.id);
        for (const secret of key.secrets) {
          multi.hset(`${p}secret:${secret.hash}`, { keyId: key.id, validUntil: secret.validUntil ?? '' });
          multi.sadd(`${p}key-secrets:${key.id}`, secret.hash);
        }
      }
      for (const row of snapshot.usage) {
        const ttl = retentionSeconds(row.day);
        const field = `${row.keyId}\t${row.network}\t${row.method}`;
        multi.hincrby(`${p}usage:c:${row.teamId}:${row.day}`, field, row.credits).expire(`${p}usage:c:${row.teamId}:${row.day}`, ttl);
        multi.hincrby(`${p}usage:r:${row.teamId}:${row.day}`, field, row.requests).expire(`${p}usage:r:${row.teamId}:${row.day}`, ttl);
        multi.incrby(`${p}used:team:${row.teamId}:${row.day}`, row.credits).expire(`${p}used:team:${row.teamId}:${row.day}`, ttl);
        multi.incrby(`${p}used:key:${row.keyId}:${row.day}`, row.credits).expire(`${p}used:key:${row.keyId}:${row.day}`, ttl);
      }
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
  };
  return store;
}
