import type { ChainableCommander, Redis } from 'ioredis';
import { decideLedger, type LedgerCounters, type LedgerDecision, type LedgerDeltas } from '../metering/ledger-rule.js';
import { typedResults, type Ledger, type LedgerOp, type LedgerResult } from '../metering/ledger.js';
import { usageHour } from '../metering/usage-hour.js';
import { isLocalOwnerDead, LOCAL_OWNER_PREFIX, PROCESS_OWNER_TAG } from './owner.js';
import { APPLY_SCRIPT, RESERVATION_FIELDS, STALE_RESERVATIONS_SCRIPT } from './redis-scripts.js';
import type { HourlyUsageQuery, HourlyUsageRow, UsageQuery, UsageRow } from './types.js';

/**
 * The Redis driver's ledger: optimistic, with the credit rule in TypeScript (ledger-rule.ts).
 * A batch is decided against the values this store last saw of the counters it reads (a value
 * never seen counts as absent), then committed by one call of APPLY_SCRIPT, which compares every
 * value read with what Redis holds and applies the writes only if none changed. When another
 * replica changed one, the script answers with the current values and the batch is decided again:
 * a replica alone on its teams commits each batch in one round trip; replicas sharing a team
 * take a second one when they meet.
 *
 * Batches of one store are committed one at a time; those that arrive meanwhile are committed
 * together next (so they never conflict with each other), each still applied in order.
 */

export interface RedisLedger extends Ledger {
  /** Queues on `multi` a snapshot's usage rows and the day totals they make up. */
  importUsage(rows: readonly UsageRow[], multi: ChainableCommander): void;
  /** Settled usage of the given teams, day by day, unordered. */
  usageOf(teamIds: readonly string[], query: UsageQuery): Promise<UsageRow[]>;
  hourlyUsage(query: HourlyUsageQuery): Promise<HourlyUsageRow[]>;
}

export interface RedisLedgerOptions {
  keyPrefix: string;
  now: () => number;
  /** Seconds a day's counters and usage live after being written. */
  retentionSeconds(day: string): number;
}

interface RedisWithLedgerScripts extends Redis {
  tgApply(numberOfKeys: number, ...keysAndArgs: Array<string | number>): Promise<Array<string | number>>;
  tgStaleReservations(reservationsKey: string, ...args: Array<string | number>): Promise<string[]>;
}

/** Values as APPLY_SCRIPT compares them, one per field: '' when absent, '=' + value when present. */
type Seen = readonly string[];

const STRING_VALUE: readonly string[] = [];
const BUCKET_FIELDS: readonly string[] = ['tokens', 'at'];
/** A bucket is kept at least this long after its last draw (it is full again by then unless in debt). */
const BUCKET_MIN_TTL_MS = 60_000;
/** Attempts of one batch before it fails as a store error; each failed attempt means another replica committed. */
const MAX_ATTEMPTS = 50;
/** Values remembered before the memory is dropped (each is checked when used, so forgetting is always safe). */
const MAX_KNOWN = 100_000;

const seen = (value: string | number): string => `=${value}`;
const valueOf = (encoded: string | undefined): string | undefined => (encoded === undefined || encoded === '' ? undefined : encoded.slice(1));
const absent = (fields: readonly string[]): Seen => (fields.length === 0 ? [''] : fields.map(() => ''));

function dayRange(fromDay: string, toDay: string): string[] {
  const days: string[] = [];
  for (let at = Date.parse(`${fromDay}T00:00:00Z`); at <= Date.parse(`${toDay}T00:00:00Z`); at += 86_400_000) {
    days.push(new Date(at).toISOString().slice(0, 10));
  }
  return days;
}

interface Check {
  fields: readonly string[];
  seen: Seen;
}

interface Pending {
  ops: readonly LedgerOp[];
  resolve: (results: LedgerResult[]) => void;
  reject: (error: unknown) => void;
}

export function createRedisLedger(client: Redis, options: RedisLedgerOptions): RedisLedger {
  const redis = client as RedisWithLedgerScripts;
  redis.defineCommand('tgApply', { lua: APPLY_SCRIPT });
  redis.defineCommand('tgStaleReservations', { numberOfKeys: 1, lua: STALE_RESERVATIONS_SCRIPT });
  const p = options.keyPrefix;
  const owner = PROCESS_OWNER_TAG;
  const reservationsKey = `${p}reservations`;
  const teamKey = (teamId: string, day: string) => `${p}used:team:${teamId}:${day}`;
  const keyKey = (keyId: string, day: string) => `${p}used:key:${keyId}:${day}`;
  const bucketKey = (teamId: string) => `${p}bucket:${teamId}`;
  const reservationKey = (id: string) => `${p}resv:${id}`;
  const creditsKey = (teamId: string, day: string) => `${p}usage:c:${teamId}:${day}`;
  const requestsKey = (teamId: string, day: string) => `${p}usage:r:${teamId}:${day}`;
  /** Hash `c\t<keyId>\t<hour>` -> credits, `r\t<keyId>\t<hour>` -> requests. */
  const hoursKey = (teamId: string, day: string) => `${p}usage:h:${teamId}:${day}`;
  const usageField = (row: { keyId: string; network: string; method: string }) => `${row.keyId}\t${row.network}\t${row.method}`;
  /** What this store last saw of each value it read or wrote. */
  const known = new Map<string, Seen>();

  /** Decides a batch against the known values, recording each value it read. */
  function decide(ops: readonly LedgerOp[]): { decision: LedgerDecision; checks: Map<string, Check> } {
    const checks = new Map<string, Check>();
    const read = (key: string, fields: readonly string[]): Seen => {
      let check = checks.get(key);
      if (check === undefined) {
        check = { fields, seen: known.get(key) ?? absent(fields) };
        checks.set(key, check);
      }
      return check.seen;
    };
    const counters: LedgerCounters = {
      teamUsed: (teamId, day) => Number(valueOf(read(teamKey(teamId, day), STRING_VALUE)[0]) ?? 0),
      keyUsed: (keyId, day) => Number(valueOf(read(keyKey(keyId, day), STRING_VALUE)[0]) ?? 0),
      bucket(teamId) {
        const [tokens, at] = read(bucketKey(teamId), BUCKET_FIELDS).map(valueOf);
        return tokens === undefined || at === undefined ? undefined : { tokens: Number(tokens), at: Number(at) };
      },
      reservation(id) {
        const [teamId, keyId, day, network, method, cost] = read(reservationKey(id), RESERVATION_FIELDS).map(valueOf);
        if (teamId === undefined || keyId === undefined || day === undefined || network === undefined || method === undefined) return undefined;
        return { teamId, keyId, day, network, method, cost: Number(cost) };
      },
    };
    return { decision: decideLedger(ops, counters), checks };
  }

  /** APPLY_SCRIPT's keys and arguments for a decision, and what this store knows once it is applied. */
  function command(checks: Map<string, Check>, deltas: LedgerDeltas): { keysAndArgs: Array<string | number>; keyCount: number; learned: Map<string, Seen | undefined> } {
    const keys: string[] = [];
    const indexes = new Map<string, number>();
    const index = (key: string): number => {
      let found = indexes.get(key);
      if (found === undefined) {
        keys.push(key);
        found = keys.length;
        indexes.set(key, found);
      }
      return found;
    };
    const compared: Array<string | number> = [checks.size];
    const learned = new Map<string, Seen | undefined>();
    for (const [key, check] of checks) {
      index(key);
      compared.push(check.fields.length, ...check.fields, ...check.seen);
      learned.set(key, check.seen);
    }
    const writes: Array<string | number> = [];
    let writeCount = 0;
    const write = (...parts: Array<string | number>): void => {
      writes.push(...parts);
      writeCount += 1;
    };
    const ttls = new Map<string, number>();
    const ttl = (day: string): number => {
      let seconds = ttls.get(day);
      if (seconds === undefined) ttls.set(day, (seconds = options.retentionSeconds(day)));
      return seconds;
    };
    const add = (key: string, day: string, delta: number): void => {
      write('incrby', index(key), delta, ttl(day));
      const before = learned.get(key) ?? known.get(key);
      if (before !== undefined) learned.set(key, [seen(Number(valueOf(before[0]) ?? 0) + delta)]);
    };
    for (const { id, day, delta } of deltas.teamDays) add(teamKey(id, day), day, delta);
    for (const { id, day, delta } of deltas.keyDays) add(keyKey(id, day), day, delta);
    for (const row of deltas.usage) {
      write('hincrby', index(creditsKey(row.teamId, row.day)), usageField(row), row.credits, ttl(row.day));
      write('hincrby', index(requestsKey(row.teamId, row.day)), usageField(row), row.requests, ttl(row.day));
      const hour = usageHour(row.day, options.now());
      write('hincrby', index(hoursKey(row.teamId, row.day)), `c\t${row.keyId}\t${hour}`, row.credits, ttl(row.day));
      write('hincrby', index(hoursKey(row.teamId, row.day)), `r\t${row.keyId}\t${hour}`, row.requests, ttl(row.day));
    }
    for (const bucket of deltas.buckets) {
      const key = bucketKey(bucket.teamId);
      const tokens = String(bucket.tokens);
      const at = String(bucket.at);
      write('hset', index(key), Math.max(BUCKET_MIN_TTL_MS, bucket.fullInMs), 2, 'tokens', tokens, 'at', at);
      learned.set(key, [seen(tokens), seen(at)]);
    }
    for (const row of deltas.reserved) {
      const key = reservationKey(row.id);
      write('hset', index(key), 0, 8, 'teamId', row.teamId, 'keyId', row.keyId, 'day', row.day, 'network', row.network, 'method', row.method, 'cost', row.cost, 'owner', owner, 'createdAt', row.createdAt);
      write('zadd', index(reservationsKey), row.createdAt, row.id);
      learned.set(key, RESERVATION_FIELDS.map((field) => seen(row[field])));
    }
    for (const id of deltas.ended) {
      write('del', index(reservationKey(id)));
      write('zrem', index(reservationsKey), id);
      learned.set(reservationKey(id), undefined);
    }
    return { keysAndArgs: [...keys, ...compared, writeCount, ...writes], keyCount: keys.length, learned };
  }

  async function commit(ops: readonly LedgerOp[]): Promise<LedgerResult[]> {
    if (known.size > MAX_KNOWN) known.clear();
    for (let attempt = 1; ; attempt += 1) {
      const { decision, checks } = decide(ops);
      const { keysAndArgs, keyCount, learned } = command(checks, decision.deltas);
      const reply = await redis.tgApply(keyCount, ...keysAndArgs);
      if (reply[0] === 1) {
        for (const [key, value] of learned) {
          if (value === undefined) known.delete(key);
          else known.set(key, value);
        }
        return decision.results;
      }
      // Another replica committed since these values were seen: the reply holds the current ones.
      let offset = 1;
      for (const [key, check] of checks) {
        const width = Math.max(check.fields.length, 1);
        known.set(key, reply.slice(offset, offset + width).map(String));
        offset += width;
      }
      if (attempt === MAX_ATTEMPTS) throw new Error(`a ledger batch met concurrent changes ${MAX_ATTEMPTS} times in a row`);
    }
  }

  let queue: Pending[] = [];
  let committing = false;
  async function drain(): Promise<void> {
    committing = true;
    while (queue.length > 0) {
      const group = queue;
      queue = [];
      try {
        const results = await commit(group.length === 1 ? group[0]!.ops : group.flatMap((pending) => pending.ops));
        let offset = 0;
        for (const pending of group) {
          pending.resolve(results.slice(offset, offset + pending.ops.length));
          offset += pending.ops.length;
        }
      } catch (error) {
        for (const pending of group) pending.reject(error);
      }
    }
    committing = false;
  }
  function apply(ops: readonly LedgerOp[]): Promise<LedgerResult[]> {
    if (ops.length === 0) return Promise.resolve([]);
    return new Promise((resolve, reject) => {
      queue.push({ ops, resolve, reject });
      if (!committing) void drain();
    });
  }

  return {
    async applyLedger(ops) {
      return typedResults(ops, await apply(ops));
    },
    async recoverReservations(olderThanMs) {
      const found = await redis.tgStaleReservations(reservationsKey, p, owner, options.now() - olderThanMs, LOCAL_OWNER_PREFIX);
      const refunds: LedgerOp[] = [];
      for (let at = 0; at + 11 <= found.length; at += 11) {
        const [id, why, reservationOwner] = found.slice(at, at + 3) as [string, string, string];
        // Another process of this host whose heartbeat has not expired yet: dead if its pid is gone.
        if (why === 'local' && !isLocalOwnerDead(reservationOwner)) continue;
        const row = found.slice(at + 3, at + 9);
        known.set(reservationKey(id), row);
        const [teamId, keyId, day] = row.map(valueOf);
        known.set(teamKey(teamId!, day!), [found[at + 9]!]);
        known.set(keyKey(keyId!, day!), [found[at + 10]!]);
        refunds.push({ type: 'refund', reservationId: id });
      }
      if (refunds.length === 0) return 0;
      return (await apply(refunds)).filter((result) => result.ok).length;
    },
    importUsage(rows, multi) {
      for (const row of rows) {
        const ttl = options.retentionSeconds(row.day);
        multi.hincrby(creditsKey(row.teamId, row.day), usageField(row), row.credits).expire(creditsKey(row.teamId, row.day), ttl);
        multi.hincrby(requestsKey(row.teamId, row.day), usageField(row), row.requests).expire(requestsKey(row.teamId, row.day), ttl);
        multi.incrby(teamKey(row.teamId, row.day), row.credits).expire(teamKey(row.teamId, row.day), ttl);
        multi.incrby(keyKey(row.keyId, row.day), row.credits).expire(keyKey(row.keyId, row.day), ttl);
      }
    },
    async hourlyUsage(query) {
      const hash = await redis.hgetall(hoursKey(query.teamId, query.day));
      const rows = new Map<string, HourlyUsageRow>();
      for (const [field, value] of Object.entries(hash)) {
        const [kind, keyId, hour] = field.split('\t') as [string, string, string];
        const id = `${keyId}\t${hour}`;
        let row = rows.get(id);
        if (row === undefined) rows.set(id, (row = { day: query.day, hour: Number(hour), teamId: query.teamId, keyId, credits: 0, requests: 0 }));
        if (kind === 'c') row.credits = Number(value);
        else row.requests = Number(value);
      }
      return [...rows.values()].sort((a, b) => (a.keyId === b.keyId ? a.hour - b.hour : a.keyId < b.keyId ? -1 : 1));
    },
    async usageOf(teamIds, query) {
      const rows: UsageRow[] = [];
      for (const day of dayRange(query.fromDay, query.toDay)) {
        for (const teamId of teamIds) {
          const [credits, requests] = await Promise.all([redis.hgetall(creditsKey(teamId, day)), redis.hgetall(requestsKey(teamId, day))]);
          for (const [field, value] of Object.entries(credits)) {
            const [keyId, network, method] = field.split('\t') as [string, string, string];
            if (query.keyId !== undefined && keyId !== query.keyId) continue;
            rows.push({ day, teamId, keyId, network, method, credits: Number(value), requests: Number(requests[field] ?? 0) });
          }
        }
      }
      return rows;
    },
  };
}
