import { randomBytes } from 'node:crypto';
import { PartialLedgerError, type AdmissionResult, type ChargeSubject, type FinishResult, type Ledger, type LedgerDone, type LedgerOp, type LedgerResult, type LedgerResultOf } from './ledger.js';

/**
 * Sends ledger operations to the store in batches: every operation submitted during one
 * event-loop turn is applied in one store call (one SQLite transaction, one Redis script call) at
 * the end of that turn. Callers await their own result; a response is written only after the
 * batch holding its charge committed, so a crash never loses a charge for an answer already sent.
 */

export interface Meter {
  /** A fresh id for {@link reserve}, known before the store answers so a lost answer can still be swept. */
  newReservationId(): string;
  /** Holds credits for a call about to go upstream. */
  reserve(reservationId: string, subject: ChargeSubject): Promise<AdmissionResult>;
  /** Reserves and settles at once, for answers known without an upstream call. */
  charge(subject: ChargeSubject): Promise<AdmissionResult>;
  /**
   * Several charges and settles (a batch request's commits, in its items' order) in this turn's
   * batch, answered with one promise: a batch of 50 cache hits then waits on one promise, not 50.
   */
  commitAll(commits: readonly LedgerCommit[]): Promise<CommitResults>;
  /** Charges a reservation; `reservation_gone` when it was already refunded (nothing is charged then). */
  settle(reservationId: string): Promise<FinishResult>;
  refund(reservationId: string): Promise<FinishResult>;
  /** Gives back a charge (or a settled reservation) whose answer could not be written. */
  reverse(subject: ChargeSubject): Promise<LedgerDone>;
  /** The team's spend so far on `day`. */
  peek(teamId: string, day: string): Promise<LedgerDone>;
  /**
   * Gives a reservation back whenever the store can take it: for reservations whose reserve,
   * settle or refund was lost to a store outage. Retried every few seconds until it succeeds,
   * so a team's balance is not held until the stale-reservation sweep.
   */
  release(reservationId: string): void;
  /** Waits for every submitted operation to be applied. */
  flush(): Promise<void>;
  /** Stops the release retries. */
  close(): void;
}

/** One commit of {@link Meter.commitAll}: an answer known without an upstream call, or a reservation to settle. */
export type LedgerCommit = { type: 'charge'; subject: ChargeSubject } | { type: 'settle'; reservationId: string };

/**
 * What {@link Meter.commitAll} did: one result per commit, in order (an admission for a charge, a
 * finish for a settle). A result is undefined when its operation could not be applied; `error`
 * then says why (the store could not be reached, or the shard of its team).
 */
export interface CommitResults {
  results: ReadonlyArray<LedgerResult | undefined>;
  error?: unknown;
}

const RELEASE_RETRY_MS = 2_000;

/**
 * A caller waiting on this turn's batch, from its operation `first` on: a single operation's caller
 * gets its result (or the error), a group's its `count` results together (a group never fails).
 */
type Waiter =
  | { group: false; first: number; resolve: (result: LedgerResult) => void; reject: (error: unknown) => void }
  | { group: true; first: number; count: number; resolve: (outcome: CommitResults) => void };

export function createMeter(ledger: Ledger, options: { now?: () => number } = {}): Meter {
  const now = options.now ?? Date.now;
  // This turn's operations, in order, and who waits on which of them.
  let queuedOps: LedgerOp[] = [];
  let waiters: Waiter[] = [];
  let scheduled = false;
  let inFlight: Promise<void> = Promise.resolve();
  const toRelease = new Set<string>();
  let releaseTimer: NodeJS.Timeout | undefined;
  function retryReleases(): void {
    releaseTimer = undefined;
    const ids = [...toRelease];
    ledger.applyLedger(ids.map((reservationId) => ({ type: 'refund', reservationId }))).then(
      () => ids.forEach((id) => toRelease.delete(id)),
      () => undefined,
    ).finally(() => {
      if (toRelease.size > 0 && releaseTimer === undefined) {
        releaseTimer = setTimeout(retryReleases, RELEASE_RETRY_MS);
        releaseTimer.unref();
      }
    });
  }
  // Reservation ids only need to be unique; a per-process prefix and a counter are cheap.
  const idPrefix = randomBytes(6).toString('hex');
  let nextReservation = 0;

  function runBatch(): void {
    scheduled = false;
    const ops = queuedOps;
    const batch = waiters;
    queuedOps = [];
    waiters = [];
    if (batch.length === 0) return;
    const applied = ledger.applyLedger(ops).then(
      (results) => {
        for (const waiter of batch) {
          if (waiter.group) waiter.resolve({ results: results.slice(waiter.first, waiter.first + waiter.count) });
          else waiter.resolve(results[waiter.first]!);
        }
      },
      (error: unknown) => {
        // Operations a partly failed batch did apply keep their results (they were charged).
        const applied = error instanceof PartialLedgerError ? error.results : undefined;
        const cause = error instanceof PartialLedgerError ? error.cause : error;
        for (const waiter of batch) {
          if (waiter.group) {
            const results = applied?.slice(waiter.first, waiter.first + waiter.count) ?? new Array<undefined>(waiter.count).fill(undefined);
            waiter.resolve({ results, error: cause });
          } else {
            const result = applied?.[waiter.first];
            if (result !== undefined) waiter.resolve(result);
            else waiter.reject(cause);
          }
        }
      },
    );
    inFlight = inFlight.then(() => applied);
  }

  function schedule(): void {
    if (!scheduled) {
      scheduled = true;
      setImmediate(runBatch);
    }
  }

  /** Queues `op` for this turn's batch; its result has the type of its operation. */
  function submit<Op extends LedgerOp>(op: Op): Promise<LedgerResultOf<Op>> {
    return new Promise((resolve, reject) => {
      waiters.push({ group: false, first: queuedOps.length, resolve: resolve as (result: LedgerResult) => void, reject });
      queuedOps.push(op);
      schedule();
    });
  }

  /** Queues `ops` for this turn's batch, in order, with one caller waiting on all of them. */
  function submitGroup(ops: readonly LedgerOp[]): Promise<CommitResults> {
    return new Promise((resolve) => {
      waiters.push({ group: true, first: queuedOps.length, count: ops.length, resolve });
      queuedOps.push(...ops);
      schedule();
    });
  }

  return {
    newReservationId: () => `${idPrefix}-${(nextReservation++).toString(36)}`,
    reserve: (reservationId, subject) => submit({ type: 'reserve', reservationId, subject, nowMs: now() }),
    charge: (subject) => submit({ type: 'charge', subject, nowMs: now() }),
    commitAll(commits) {
      if (commits.length === 0) return Promise.resolve({ results: [] });
      const nowMs = now();
      const ops = commits.map((commit): LedgerOp => (commit.type === 'charge' ? { type: 'charge', subject: commit.subject, nowMs } : commit));
      return submitGroup(ops);
    },
    settle: (reservationId) => submit({ type: 'settle', reservationId }),
    refund: (reservationId) => submit({ type: 'refund', reservationId }),
    reverse: (subject) => submit({ type: 'reverse', subject }),
    peek: (teamId, day) => submit({ type: 'peek', teamId, day }),
    release(reservationId) {
      toRelease.add(reservationId);
      if (releaseTimer === undefined) {
        releaseTimer = setTimeout(retryReleases, RELEASE_RETRY_MS);
        releaseTimer.unref();
      }
    },
    close() {
      if (releaseTimer !== undefined) clearTimeout(releaseTimer);
      releaseTimer = undefined;
    },
    async flush() {
      if (scheduled) {
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      await inFlight;
    },
  };
}

/** A UTC day is exactly this long in epoch milliseconds (no leap seconds in JavaScript time). */
const DAY_MS = 86_400_000;
let lastDay = { start: Number.NaN, text: '' };

/** The UTC day of an instant, `YYYY-MM-DD`: the unit of daily quotas and usage reports. */
export function utcDay(epochMs: number): string {
  // Every charged call asks; the answer changes once a day, so the last day is remembered.
  if (epochMs >= lastDay.start && epochMs < lastDay.start + DAY_MS) return lastDay.text;
  const text = new Date(epochMs).toISOString().slice(0, 10);
  lastDay = { start: Math.floor(epochMs / DAY_MS) * DAY_MS, text };
  return text;
}

/** Epoch ms of the next 00:00 UTC after `epochMs`: when daily balances reset. */
export function nextUtcMidnight(epochMs: number): number {
  const date = new Date(epochMs);
  return Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), date.getUTCDate() + 1);
}
