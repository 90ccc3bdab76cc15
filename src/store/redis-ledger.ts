import type { Cluster, Redis } from 'ioredis';
import { decideLedger, type LedgerCounters, type LedgerDecision, type LedgerDeltas } from '../metering/ledger-rule.js';
import { PartialLedgerError, typedResults, type Ledger, type LedgerOp, type LedgerResult } from '../metering/ledger.js';
import { usageHour } from '../metering/usage-hour.js';
import { isLocalOwnerDead, LOCAL_OWNER_PREFIX, PROCESS_OWNER_TAG } from './owner.js';
import type { RedisConnection } from './redis-client.js';
import type { RedisKeyspace } from './redis-keyspace.js';
import { APPLY_SCRIPT, CROSS_SLOT_SHEBANG, RESERVATION_FIELDS, STALE_RESERVATIONS_SCRIPT } from './redis-scripts.js';
import { usageField } from './redis-usage.js';

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
 *
 * On Redis Cluster a batch is split by the master its teams' slots live on (the operations of
 * different teams never read each other's counters): one script call per master per batch, all
 * masters at once. A settle or refund names only its reservation: the team is the one its reserve
 * named, remembered by this store; a reservation another process made is looked up in the teams'
 * reservation indexes (the gateway never does that: a process settles its own reservations).
 */

export interface RedisLedgerOptions {
  keys: RedisKeyspace;
  now: () => number;
  /** Seconds a day's counters and usage live after being written. */
  retentionSeconds(day: string): number;
  /** Every team id (Redis Cluster: the sweep visits each team's reservation index). */
  teamIds(): Promise<string[]>;
  /** Replica acknowledgements each commit waits for (`WAIT`); 0: none. */
  waitReplicas: number;
  commandTimeoutMs: number;
}

type ScriptClient = (Redis | Cluster) & {
  tgApply(numberOfKeys: number, ...keysAndArgs: Array<string | number>): Promise<Array<string | number>>;
  tgStaleReservations(numberOfKeys: number, ...keysAndArgs: Array<string | number>): Promise<string[]>;
};

/** Values as APPLY_SCRIPT compares them, one per field: '' when absent, '=' + value when present. */
type Seen = readonly string[];

const STRING_VALUE: readonly string[] = [];
const BUCKET_FIELDS: readonly string[] = ['tokens', 'at'];
/** A bucket is kept at least this long after its last draw (it is full again by then unless in debt). */
const BUCKET_MIN_TTL_MS = 60_000;
/** Attempts of one batch before it fails as a store error; each failed attempt means another replica committed. */
const MAX_ATTEMPTS = 50;
/** Times a batch is split again after the cluster moved a slot under it (the script fails before writing then). */
const MAX_REGROUPS = 3;
/** Values remembered before the memory is dropped (each is checked when used, so forgetting is always safe). */
const MAX_KNOWN = 100_000;
/** Redis refuses a script whose keys left its node: nothing was written, the batch is split again. */
const MOVED_KEY_ERROR = /non local key|CROSSSLOT|MOVED|ASK /i;

const seen = (value: string | number): string => `=${value}`;
const valueOf = (encoded: string | undefined): string | undefined => (encoded === undefined || encoded === '' ? undefined : encoded.slice(1));
const absent = (fields: readonly string[]): Seen => (fields.length === 0 ? [''] : fields.map(() => ''));

interface Check {
  fields: readonly string[];
  seen: Seen;
}

interface Pending {
  ops: readonly LedgerOp[];
  resolve: (results: LedgerResult[]) => void;
  reject: (error: unknown) => void;
}

/** Operations of one master, with their places in the batch. */
interface Group {
  ops: LedgerOp[];
  at: number[];
}

export function createRedisLedger(connection: RedisConnection, options: RedisLedgerOptions): Ledger {
  const redis = connection.client as ScriptClient;
  const shebang = connection.clustered ? CROSS_SLOT_SHEBANG : '';
  redis.defineCommand('tgApply', { lua: shebang + APPLY_SCRIPT });
  redis.defineCommand('tgStaleReservations', { lua: shebang + STALE_RESERVATIONS_SCRIPT });
  const { keys } = options;
  const owner = PROCESS_OWNER_TAG;
  const waitTimeoutMs = Math.max(1, Math.floor(options.commandTimeoutMs * 0.8));
  /** What this store last saw of each value it read or wrote. */
  const known = new Map<string, Seen>();
  /** The team of each reservation this store made (or found) and has not seen end. */
  const reservationTeams = new Map<string, string>();

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
      if (seconds === undefined) ttls.set(day, (seconds = options.retentionSeconds(day)));
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
      const hour = usageHour(row.day, options.now());
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
    const declared = connection.clustered ? 1 : names.length;
    const extra = names.slice(declared);
    return { keysAndArgs: [...names.slice(0, declared), extra.length, ...extra, ...compared, writeCount, ...writes], keyCount: declared, learned };
  }

  async function commitGroup(ops: readonly LedgerOp[]): Promise<LedgerResult[]> {
    for (let attempt = 1; ; attempt += 1) {
      const { decision, checks, keyTeams } = decide(ops);
      const { keysAndArgs, keyCount, learned } = command(checks, decision.deltas, keyTeams);
      const reply = await apply1(keysAndArgs, keyCount);
      if (reply[0] === 1) {
        for (const [key, value] of learned) {
          if (value === undefined) known.delete(key);
          else known.set(key, value);
        }
        // A settle or refund ends its reservation, or finds it gone: either way it is not needed again.
        for (const op of ops) if (op.type === 'settle' || op.type === 'refund') reservationTeams.delete(op.reservationId);
        for (const row of decision.deltas.reserved) reservationTeams.set(row.id, row.teamId);
        ops.forEach((op, index) => op.type === 'reserve' && !decision.results[index]!.ok && reservationTeams.delete(op.reservationId));
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

  /** One APPLY_SCRIPT call; with `waitReplicas`, then WAIT on the same master in the same pipeline. */
  async function apply1(keysAndArgs: Array<string | number>, keyCount: number): Promise<Array<string | number>> {
    if (options.waitReplicas === 0) return redis.tgApply(keyCount, ...keysAndArgs);
    const pipeline = redis.pipeline() as ReturnType<typeof redis.pipeline> & { tgApply(n: number, ...rest: Array<string | number>): unknown };
    pipeline.tgApply(keyCount, ...keysAndArgs);
    // WAIT gives up a little before the client would, so a slow acknowledgement is reported as such.
    pipeline.wait(options.waitReplicas, waitTimeoutMs);
    const [[applyError, reply], [waitError, acknowledged]] = (await pipeline.exec()) as [[Error | null, Array<string | number>], [Error | null, number]];
    if (applyError !== null) throw applyError;
    if (waitError !== null) throw waitError;
    if (reply[0] === 1 && acknowledged < options.waitReplicas) {
      throw new Error(`a ledger commit reached ${acknowledged} of ${options.waitReplicas} replicas within ${waitTimeoutMs} ms`);
    }
    return reply;
  }

  /** Finds the teams of reservations this store does not know (made by another process), in every team's index. */
  /** Returns the first error met (a team's index unreachable): an id not found then may live there. */
  async function locate(ids: readonly string[]): Promise<unknown> {
    let unreachable: unknown;
    const teams = await options.teamIds().catch((error: unknown) => {
      unreachable = error;
      return [];
    });
    await Promise.all(
      teams.map(async (teamId) => {
        try {
          const scores = await redis.zmscore(keys.reservations(teamId), ...ids);
          scores.forEach((score, index) => score !== null && reservationTeams.set(ids[index]!, teamId));
        } catch (error) {
          unreachable ??= error;
        }
      }),
    );
    return unreachable;
  }

  /**
   * Splits a batch by master (one group with one Redis), operations kept in order within each.
   * A settle or refund of a reservation not found while some team's index was unreachable goes
   * to a group that fails with that error (only it: the others still commit).
   */
  async function split(ops: readonly LedgerOp[]): Promise<Map<string, Group & { error?: unknown }>> {
    const groups = new Map<string, Group & { error?: unknown }>();
    if (!connection.clustered) {
      groups.set('redis', { ops: [...ops], at: ops.map((_, index) => index) });
      return groups;
    }
    const unknown: string[] = [];
    for (const op of ops) {
      // A reservation's team is known from its reserve on, whatever became of the commit: a
      // refund retried after a failed reserve goes to the team's master.
      if (op.type === 'reserve') reservationTeams.set(op.reservationId, op.subject.teamId);
      else if ((op.type === 'settle' || op.type === 'refund') && !reservationTeams.has(op.reservationId)) unknown.push(op.reservationId);
    }
    const unreachable = unknown.length > 0 ? await locate(unknown) : undefined;
    const batchReservations = new Map<string, string>();
    ops.forEach((op, index) => {
      const team = teamOf(op, batchReservations);
      // A reservation found nowhere: any node answers `reservation_gone` for it.
      const node = team !== undefined ? connection.nodeOf(keys.teamDay(team, '')) : unreachable === undefined ? '' : 'unreachable';
      let group = groups.get(node);
      if (group === undefined) groups.set(node, (group = { ops: [], at: [], error: node === 'unreachable' ? unreachable : undefined }));
      group.ops.push(op);
      group.at.push(index);
    });
    return groups;
  }

  async function commit(ops: readonly LedgerOp[]): Promise<LedgerResult[]> {
    if (known.size > MAX_KNOWN) known.clear();
    if (reservationTeams.size > MAX_KNOWN) reservationTeams.clear();
    // Filled, not sparse: a hole would be skipped by every() and some().
    const results: Array<LedgerResult | undefined> = ops.map(() => undefined);
    let pending = ops.map((_, index) => index);
    for (let round = 1; pending.length > 0; round += 1) {
      const groups = await split(pending.map((index) => ops[index]!));
      const again: number[] = [];
      const failures: unknown[] = [];
      await Promise.all(
        [...groups.values()].map(async (group) => {
          try {
            if (group.error !== undefined) throw group.error;
            const groupResults = await commitGroup(group.ops);
            group.at.forEach((at, index) => (results[pending[at]!] = groupResults[index]!));
          } catch (error) {
            if (round < MAX_REGROUPS && connection.clustered && MOVED_KEY_ERROR.test((error as Error).message)) again.push(...group.at.map((at) => pending[at]!));
            else failures.push(error);
          }
        }),
      );
      if (failures.length > 0) {
        if (results.some((result) => result !== undefined)) throw new PartialLedgerError(results, failures[0]);
        throw failures[0];
      }
      if (again.length > 0) await connection.refreshSlots();
      pending = again.sort((a, b) => a - b);
    }
    return results as LedgerResult[];
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
        let offset = 0;
        for (const pending of group) {
          const mine = error instanceof PartialLedgerError ? error.results.slice(offset, offset + pending.ops.length) : [];
          offset += pending.ops.length;
          if (mine.length > 0 && mine.every((result) => result !== undefined)) pending.resolve(mine as LedgerResult[]);
          else if (mine.some((result) => result !== undefined)) pending.reject(new PartialLedgerError(mine, (error as PartialLedgerError).cause));
          else pending.reject(error instanceof PartialLedgerError ? error.cause : error);
        }
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

  /** Every reservation index, grouped by the master it lives on. */
  async function reservationIndexes(): Promise<Array<Array<{ index: string; prefix: string }>>> {
    if (!connection.clustered) return [[{ index: keys.reservations(''), prefix: keys.reservationPrefix('') }]];
    const byNode = new Map<string, Array<{ index: string; prefix: string }>>();
    for (const teamId of await options.teamIds()) {
      const index = keys.reservations(teamId);
      const node = connection.nodeOf(index);
      const list = byNode.get(node);
      const entry = { index, prefix: keys.reservationPrefix(teamId) };
      if (list === undefined) byNode.set(node, [entry]);
      else list.push(entry);
    }
    return [...byNode.values()];
  }

  return {
    async applyLedger(ops) {
      return typedResults(ops, await apply(ops));
    },
    async recoverReservations(olderThanMs) {
      const cutoff = options.now() - olderThanMs;
      const found = (
        await Promise.all(
          (await reservationIndexes()).map(([first, ...others]) =>
            redis.tgStaleReservations(1, first!.index, cutoff, owner, first!.prefix, ...others.flatMap(({ index, prefix }) => [index, prefix])),
          ),
        )
      ).flat();
      // Other processes' reservations: refunded when the process's heartbeat expired, or (this
      // host's processes) when its pid is gone.
      const owners = [...new Set(found.filter((_, at) => at % 9 === 2))];
      const alive = new Set<string>();
      await Promise.all(owners.map(async (tag) => (await redis.exists(keys.owner(tag))) === 1 && alive.add(tag)));
      const refunds: LedgerOp[] = [];
      for (let at = 0; at + 9 <= found.length; at += 9) {
        const [id, why, reservationOwner] = found.slice(at, at + 3) as [string, string, string];
        if (why === 'other' && alive.has(reservationOwner) && !(reservationOwner.startsWith(LOCAL_OWNER_PREFIX) && isLocalOwnerDead(reservationOwner))) continue;
        const row = found.slice(at + 3, at + 9);
        const teamId = valueOf(row[0])!;
        known.set(keys.reservation(teamId, id), row);
        reservationTeams.set(id, teamId);
        refunds.push({ type: 'refund', reservationId: id });
      }
      if (refunds.length === 0) return 0;
      return (await apply(refunds)).filter((result) => result.ok).length;
    },
  };
}
