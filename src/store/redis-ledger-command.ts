// A ledger batch as one call of APPLY_SCRIPT (redis-scripts.ts): the batch decided against the
// values the store last saw (each one it read becomes a check the script compares), and the
// decision's deltas encoded as the script's writes, with what the store knows once they apply.
// Separate from redis-ledger.ts, which commits these calls (retries, the queue, the cluster's
// grouping, the sweep): this is the translation between the credit rule and the script's layout.
import { decideLedger, type LedgerCounters, type LedgerDecision, type LedgerDeltas } from '../metering/ledger-rule.js';
import type { LedgerOp } from '../metering/ledger.js';
import { usageHour } from '../metering/usage-hour.js';
import type { RedisKeyspace } from './redis-keyspace.js';
import { RESERVATION_FIELDS } from './redis-scripts.js';
import { usageField } from './redis-usage.js';

/** Values as APPLY_SCRIPT compares them, one per field: '' when absent, '=' + value when present. */
export type Seen = readonly string[];

const STRING_VALUE: readonly string[] = [];
const BUCKET_FIELDS: readonly string[] = ['tokens', 'at'];
/** A bucket is kept at least this long after its last draw (it is full again by then unless in debt). */
const BUCKET_MIN_TTL_MS = 60_000;

const seen = (value: string | number): string => `=${value}`;
export const valueOf = (encoded: string | undefined): string | undefined => (encoded === undefined || encoded === '' ? undefined : encoded.slice(1));
const absent = (fields: readonly string[]): Seen => (fields.length === 0 ? [''] : fields.map(() => ''));

export interface Check {
  fields: readonly string[];
  seen: Seen;
}

/** The store's settings and memory the encoding reads; only the store updates `known` and `reservationTeams`. */
export interface LedgerCommandContext {
  keys: RedisKeyspace;
  /** Redis Cluster: the script declares one key and takes the others as arguments. */
  clustered: boolean;
  /** The owner tag written into every reservation. */
  owner: string;
  now: () => number;
  /** Seconds a day's counters and usage live after being written. */
  retentionSeconds(day: string): number;
  /** What this store last saw of each value it read or wrote. */
  known: ReadonlyMap<string, Seen>;
  /** The team of each reservation this store made (or found) and has not seen end. */
  reservationTeams: ReadonlyMap<string, string>;
}

export function createLedgerCommands(context: LedgerCommandContext) {
  const { keys, known, reservationTeams, owner } = context;

  /** The team each operation charges, or undefined for a settle or refund of a reservation unknown here. */
  function teamOf(op: LedgerOp, batchReservations: Map<string, string>): string | undefined {
    switch (op.type) {
      case 'reserve':
        batchReservations.set(op.reservationId, op.subject.teamId);
        return op.subject.teamId;
      case 'charge':
      case 'reverse':
        return op.subject.teamId;
      case 'peek':
        return op.teamId;
      default:
        return batchReservations.get(op.reservationId) ?? reservationTeams.get(op.reservationId);
    }
  }

  /** Decides a batch against the known values, recording each value it read. */
  function decide(ops: readonly LedgerOp[]): { decision: LedgerDecision; checks: Map<string, Check>; keyTeams: Map<string, string> } {
    const keyTeams = new Map<string, string>();
    const batchReservations = new Map<string, string>();
    for (const op of ops) {
      if (op.type === 'reserve' || op.type === 'charge' || op.type === 'reverse') keyTeams.set(op.subject.keyId, op.subject.teamId);
      teamOf(op, batchReservations);
    }
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
      teamUsed: (teamId, day) => Number(valueOf(read(keys.teamDay(teamId, day), STRING_VALUE)[0]) ?? 0),
      keyUsed: (keyId, day) => Number(valueOf(read(keys.keyDay(keyTeams.get(keyId) ?? '', keyId, day), STRING_VALUE)[0]) ?? 0),
      bucket(teamId) {
        const [tokens, at] = read(keys.bucket(teamId), BUCKET_FIELDS).map(valueOf);
        return tokens === undefined || at === undefined ? undefined : { tokens: Number(tokens), at: Number(at) };
      },
      reservation(id) {
        const team = batchReservations.get(id) ?? reservationTeams.get(id) ?? '';
        const [teamId, keyId, day, network, method, cost] = read(keys.reservation(team, id), RESERVATION_FIELDS).map(valueOf);
        if (teamId === undefined || keyId === undefined || day === undefined || network === undefined || method === undefined) return undefined;
        keyTeams.set(keyId, teamId);
        return { teamId, keyId, day, network, method, cost: Number(cost) };
      },
    };
    return { decision: decideLedger(ops, counters), checks, keyTeams };
  }

  /** APPLY_SCRIPT's keys and arguments for a decision, and what this store knows once it is applied. */
  function command(checks: Map<string, Check>, deltas: LedgerDeltas, keyTeams: ReadonlyMap<string, string>): { keysAndArgs: Array<string | number>; keyCount: number; learned: Map<string, Seen | undefined> } {
    const names: string[] = [];
    const indexes = new Map<string, number>();
    const index = (key: string): number => {
      let found = indexes.get(key);
      if (found === undefined) {
        names.push(key);
        found = names.length;
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
      if (seconds === undefined) ttls.set(day, (seconds = context.retentionSeconds(day)));
      return seconds;
    };
    const add = (key: string, day: string, delta: number): void => {
      write('incrby', index(key), delta, ttl(day));
      const before = learned.get(key) ?? known.get(key);
      if (before !== undefined) learned.set(key, [seen(Number(valueOf(before[0]) ?? 0) + delta)]);
    };
    for (const { id, day, delta } of deltas.teamDays) add(keys.teamDay(id, day), day, delta);
    for (const { id, day, delta } of deltas.keyDays) add(keys.keyDay(keyTeams.get(id) ?? '', id, day), day, delta);
    for (const row of deltas.usage) {
      write('hincrby', index(keys.usageCredits(row.teamId, row.day)), usageField(row), row.credits, ttl(row.day));
      write('hincrby', index(keys.usageRequests(row.teamId, row.day)), usageField(row), row.requests, ttl(row.day));
      const hour = usageHour(row.day, context.now());
      write('hincrby', index(keys.usageHours(row.teamId, row.day)), `c\t${row.keyId}\t${hour}`, row.credits, ttl(row.day));
      write('hincrby', index(keys.usageHours(row.teamId, row.day)), `r\t${row.keyId}\t${hour}`, row.requests, ttl(row.day));
    }
    for (const bucket of deltas.buckets) {
      const key = keys.bucket(bucket.teamId);
      const tokens = String(bucket.tokens);
      const at = String(bucket.at);
      write('hset', index(key), Math.max(BUCKET_MIN_TTL_MS, bucket.fullInMs), 2, 'tokens', tokens, 'at', at);
      learned.set(key, [seen(tokens), seen(at)]);
    }
    for (const row of deltas.reserved) {
      const key = keys.reservation(row.teamId, row.id);
      write('hset', index(key), 0, 8, 'teamId', row.teamId, 'keyId', row.keyId, 'day', row.day, 'network', row.network, 'method', row.method, 'cost', row.cost, 'owner', owner, 'createdAt', row.createdAt);
      write('zadd', index(keys.reservations(row.teamId)), row.createdAt, row.id);
      learned.set(key, RESERVATION_FIELDS.map((field) => seen(row[field])));
    }
    for (const id of deltas.ended) {
      const teamId = reservationTeams.get(id) ?? '';
      write('del', index(keys.reservation(teamId, id)));
      write('zrem', index(keys.reservations(teamId)), id);
      learned.set(keys.reservation(teamId, id), undefined);
    }
    // One key declared (it routes the call to its node); the others ride as arguments.
    const declared = context.clustered ? 1 : names.length;
    const extra = names.slice(declared);
    return { keysAndArgs: [...names.slice(0, declared), extra.length, ...extra, ...compared, writeCount, ...writes], keyCount: declared, learned };
  }

  return { teamOf, decide, command };
}
