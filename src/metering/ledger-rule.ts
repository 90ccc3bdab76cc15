import type { AdmissionResult, ChargeSubject, LedgerOp, LedgerResult } from './ledger.js';

/**
 * The credit rule, once, for every store driver (docs/store.md): admission (the team's daily quota,
 * then the key's own cap, then the team's credits-per-second bucket), settle and refund, decided
 * by a pure function over the counters a batch of operations reads. It does no I/O and reads no
 * clock: time comes with each operation (`nowMs`, from the meter's injected clock) and the UTC
 * day with each subject. A driver supplies the counters (SQLite reads them inside its
 * transaction; Redis answers from the values it last saw and checks them when it commits) and
 * commits the {@link LedgerDeltas} atomically.
 */

/** A reservation as the rule reads it: what settling or refunding it changes. */
export interface Reservation {
  teamId: string;
  keyId: string;
  day: string;
  network: string;
  method: string;
  cost: number;
}

/** A reservation a batch made, to be written with its id and the time it was made. */
export interface NewReservation extends Reservation {
  id: string;
  createdAt: number;
}

/**
 * A team's credits-per-second token bucket: `tokens` credits at epoch ms `at`. It holds at most
 * one second's credits (the burst) and refills continuously; a team without a bucket has a full
 * one. A call costing more than a whole second's credits is let through when the bucket is full
 * and drives it negative, so expensive methods are not locked out by a low limit; the debt is
 * paid back by waiting.
 */
export interface Bucket {
  tokens: number;
  at: number;
}

export interface BucketWrite extends Bucket {
  teamId: string;
  /** Milliseconds after `at` until the bucket is full again: from then on it may be forgotten. */
  fullInMs: number;
}

/** What the rule reads; each value is asked for at most once per batch. */
export interface LedgerCounters {
  /** Credits a team spent or holds in reservations on a UTC day. */
  teamUsed(teamId: string, day: string): number;
  /** The same for one key (asked only when the key has a cap). */
  keyUsed(keyId: string, day: string): number;
  bucket(teamId: string): Bucket | undefined;
  /**
   * A reservation that has not been settled or refunded, or undefined. Asked only by a settle or
   * refund, which ends the reservation when it exists.
   */
  reservation(id: string): Reservation | undefined;
}

/** A change to a team's or key's spend of one day. */
export interface DayDelta {
  id: string;
  day: string;
  delta: number;
}

/** Settled charges to add to the usage report of one team, key, day, network and method. */
export interface UsageDelta {
  teamId: string;
  keyId: string;
  day: string;
  network: string;
  method: string;
  credits: number;
  requests: number;
}

/** Everything a batch changes, for the driver to commit at once. Only non-zero changes are listed. */
export interface LedgerDeltas {
  teamDays: DayDelta[];
  keyDays: DayDelta[];
  usage: UsageDelta[];
  /** Buckets the batch refilled or drew from, in their new state. */
  buckets: BucketWrite[];
  /** Reservations made by the batch and still held at its end. */
  reserved: NewReservation[];
  /** Ids of reservations read from the counters that the batch settled or refunded. */
  ended: string[];
}

export interface LedgerDecision {
  /** One per operation, in order. */
  results: LedgerResult[];
  deltas: LedgerDeltas;
}

/** The bucket at `nowMs`. Its time never goes back: a replica whose clock is behind must not refill it twice. */
export function refill(bucket: Bucket | undefined, creditsPerSecond: number, nowMs: number): Bucket {
  if (bucket === undefined) return { tokens: creditsPerSecond, at: nowMs };
  return {
    tokens: Math.min(creditsPerSecond, bucket.tokens + (Math.max(0, nowMs - bucket.at) * creditsPerSecond) / 1000),
    at: Math.max(nowMs, bucket.at),
  };
}

/** A team's or key's spend of one day: as read (once, when first needed) plus what the batch changed. */
interface DayAccount {
  id: string;
  day: string;
  read: number | undefined;
  delta: number;
}

interface ReservationEntry {
  row: Reservation | NewReservation | undefined;
  /** Read from the counters (true), or made by this batch. */
  stored: boolean;
  ended: boolean;
}

const mapKey = (id: string, day: string): string => `${id}\u0000${day}`;

/** Decides a batch of ledger operations, in order, against `counters`. */
export function decideLedger(ops: readonly LedgerOp[], counters: LedgerCounters): LedgerDecision {
  const teams = new Map<string, DayAccount>();
  const keys = new Map<string, DayAccount>();
  const usage = new Map<string, UsageDelta>();
  const buckets = new Map<string, BucketWrite>();
  const reservations = new Map<string, ReservationEntry>();

  const accountOf = (accounts: Map<string, DayAccount>, id: string, day: string): DayAccount => {
    const found = accounts.get(mapKey(id, day));
    if (found !== undefined) return found;
    const created: DayAccount = { id, day, read: undefined, delta: 0 };
    accounts.set(mapKey(id, day), created);
    return created;
  };
  const teamUsed = (team: DayAccount): number => (team.read ??= counters.teamUsed(team.id, team.day)) + team.delta;
  const keyUsed = (key: DayAccount): number => (key.read ??= counters.keyUsed(key.id, key.day)) + key.delta;
  const usageOf = (row: Reservation): UsageDelta => {
    const id = `${row.teamId}\u0000${row.keyId}\u0000${row.day}\u0000${row.network}\u0000${row.method}`;
    let found = usage.get(id);
    if (found === undefined) {
      found = { teamId: row.teamId, keyId: row.keyId, day: row.day, network: row.network, method: row.method, credits: 0, requests: 0 };
      usage.set(id, found);
    }
    return found;
  };

  // Consecutive operations of one subject (a turn of cache hits on one key, the common case
  // under load) reuse the previous one's accounts without building any map key.
  let last: { subject: ChargeSubject; team: DayAccount; key: DayAccount; usage: UsageDelta } | undefined;
  const accountsOf = (subject: ChargeSubject) => {
    const previous = last?.subject;
    if (
      previous === undefined ||
      previous.teamId !== subject.teamId ||
      previous.keyId !== subject.keyId ||
      previous.day !== subject.day ||
      previous.network !== subject.network ||
      previous.method !== subject.method
    ) {
      last = {
        subject,
        team: accountOf(teams, subject.teamId, subject.day),
        key: accountOf(keys, subject.keyId, subject.day),
        usage: usageOf(subject),
      };
    }
    return last!;
  };

  /** Draws `cost` from the team's bucket if it allows; returns 0, or the milliseconds to wait. */
  const drawThroughput = (teamId: string, cost: number, creditsPerSecond: number, nowMs: number): number => {
    const bucket = refill(buckets.get(teamId) ?? counters.bucket(teamId), creditsPerSecond, nowMs);
    const needed = Math.min(cost, creditsPerSecond);
    const admitted = bucket.tokens >= needed;
    const retryAfterMs = admitted ? 0 : Math.max(1, Math.ceil(((needed - bucket.tokens) * 1000) / creditsPerSecond));
    if (admitted) bucket.tokens -= cost;
    const fullInMs = Math.ceil(((creditsPerSecond - bucket.tokens) * 1000) / creditsPerSecond);
    buckets.set(teamId, { teamId, tokens: bucket.tokens, at: bucket.at, fullInMs });
    return retryAfterMs;
  };

  /** Quota, cap and throughput, in that order; adds the cost to the day's spend only when all allow it. */
  const admit = (subject: ChargeSubject, nowMs: number, team: DayAccount, key: DayAccount): AdmissionResult => {
    const used = teamUsed(team);
    if (used + subject.cost > subject.teamDailyCredits) {
      return { ok: false, reason: 'daily_credits_exhausted', scope: 'team', limit: subject.teamDailyCredits, used, teamUsed: used };
    }
    if (subject.keyDailyCap !== null) {
      const keySpent = keyUsed(key);
      if (keySpent + subject.cost > subject.keyDailyCap) {
        return { ok: false, reason: 'daily_credits_exhausted', scope: 'key', limit: subject.keyDailyCap, used: keySpent, teamUsed: used };
      }
    }
    if (subject.teamCreditsPerSecond !== null) {
      const retryAfterMs = drawThroughput(subject.teamId, subject.cost, subject.teamCreditsPerSecond, nowMs);
      if (retryAfterMs > 0) return { ok: false, reason: 'rate_limited', retryAfterMs, teamUsed: used };
    }
    team.delta += subject.cost;
    key.delta += subject.cost;
    return { ok: true, teamUsed: used + subject.cost };
  };

  /** The reservation a settle or refund ends, or undefined when there is none (any more). */
  const endReservation = (id: string): Reservation | undefined => {
    let entry = reservations.get(id);
    if (entry === undefined) {
      const row = counters.reservation(id);
      entry = { row, stored: row !== undefined, ended: false };
      reservations.set(id, entry);
    }
    if (entry.row === undefined || entry.ended) return undefined;
    entry.ended = true;
    return entry.row;
  };

  const results = ops.map((op): LedgerResult => {
    switch (op.type) {
      case 'peek':
        return { ok: true, teamUsed: teamUsed(accountOf(teams, op.teamId, op.day)) };
      case 'charge': {
        const accounts = accountsOf(op.subject);
        const result = admit(op.subject, op.nowMs, accounts.team, accounts.key);
        if (result.ok) {
          accounts.usage.credits += op.subject.cost;
          accounts.usage.requests += 1;
        }
        return result;
      }
      case 'reserve': {
        const { subject } = op;
        const accounts = accountsOf(subject);
        const result = admit(subject, op.nowMs, accounts.team, accounts.key);
        if (result.ok) {
          const row: NewReservation = {
            id: op.reservationId,
            teamId: subject.teamId,
            keyId: subject.keyId,
            day: subject.day,
            network: subject.network,
            method: subject.method,
            cost: subject.cost,
            createdAt: op.nowMs,
          };
          reservations.set(op.reservationId, { row, stored: false, ended: false });
        }
        return result;
      }
      case 'settle': {
        const row = endReservation(op.reservationId);
        if (row === undefined) return { ok: false, reason: 'reservation_gone' };
        const charged = usageOf(row);
        charged.credits += row.cost;
        charged.requests += 1;
        return { ok: true, teamUsed: teamUsed(accountOf(teams, row.teamId, row.day)) };
      }
      case 'reverse': {
        const accounts = accountsOf(op.subject);
        accounts.team.delta -= op.subject.cost;
        accounts.key.delta -= op.subject.cost;
        accounts.usage.credits -= op.subject.cost;
        accounts.usage.requests -= 1;
        return { ok: true, teamUsed: teamUsed(accounts.team) };
      }
      case 'refund': {
        const row = endReservation(op.reservationId);
        if (row === undefined) return { ok: false, reason: 'reservation_gone' };
        const team = accountOf(teams, row.teamId, row.day);
        team.delta -= row.cost;
        accountOf(keys, row.keyId, row.day).delta -= row.cost;
        return { ok: true, teamUsed: teamUsed(team) };
      }
    }
  });

  const changed = (accounts: Map<string, DayAccount>): DayDelta[] => {
    const deltas: DayDelta[] = [];
    for (const { id, day, delta } of accounts.values()) if (delta !== 0) deltas.push({ id, day, delta });
    return deltas;
  };
  const reserved: NewReservation[] = [];
  const ended: string[] = [];
  for (const [id, entry] of reservations) {
    if (entry.stored && entry.ended) ended.push(id);
    else if (!entry.stored && !entry.ended && entry.row !== undefined) reserved.push(entry.row as NewReservation);
  }
  return {
    results,
    deltas: {
      teamDays: changed(teams),
      keyDays: changed(keys),
      usage: [...usage.values()].filter((row) => row.requests !== 0),
      buckets: [...buckets.values()],
      reserved,
      ended,
    },
  };
}
