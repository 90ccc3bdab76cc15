import type { Cluster, Redis } from 'ioredis';
import { PartialLedgerError, typedResults, type Ledger, type LedgerOp, type LedgerResult } from '../metering/ledger.js';
import { isLocalOwnerDead, LOCAL_OWNER_PREFIX, PROCESS_OWNER_TAG } from './owner.js';
import type { RedisConnection } from './redis-client.js';
import type { RedisKeyspace } from './redis-keyspace.js';
import { createLedgerCommands, valueOf, type Seen } from './redis-ledger-command.js';
import { APPLY_SCRIPT, CROSS_SLOT_SHEBANG, STALE_RESERVATIONS_SCRIPT } from './redis-scripts.js';

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

/** Attempts of one batch before it fails as a store error; each failed attempt means another replica committed. */
const MAX_ATTEMPTS = 50;
/** Times a batch is split again after the cluster moved a slot under it (the script fails before writing then). */
const MAX_REGROUPS = 3;
/** Values remembered before the memory is dropped (each is checked when used, so forgetting is always safe). */
const MAX_KNOWN = 100_000;
/** Redis refuses a script whose keys left its node: nothing was written, the batch is split again. */
const MOVED_KEY_ERROR = /non local key|CROSSSLOT|MOVED|ASK /i;

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

  const { teamOf, decide, command } = createLedgerCommands({
    keys,
    clustered: connection.clustered,
    owner,
    now: () => options.now(),
    retentionSeconds: (day) => options.retentionSeconds(day),
    known,
    reservationTeams,
  });

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
