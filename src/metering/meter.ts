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

const RELEASE_RETRY_MS = 2_000;

interface Pending {
  op: LedgerOp;
  resolve: (result: LedgerResult) => void;
  reject: (error: unknown) => void;
}

export function createMeter(ledger: Ledger, options: { now?: () => number } = {}): Meter {
  const now = options.now ?? Date.now;
  let queue: Pending[] = [];
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
    const batch = queue;
    queue = [];
    if (batch.length === 0) return;
    const applied = ledger.applyLedger(batch.map((pending) => pending.op)).then(
      (results) => batch.forEach((pending, index) => pending.resolve(results[index]!)),
      (error: unknown) =>
        batch.forEach((pending, index) => {
          // Operations a partly failed batch did apply keep their results (they were charged).
          const result = error instanceof PartialLedgerError ? error.results[index] : undefined;
          if (result !== undefined) pending.resolve(result);
          else pending.reject(error instanceof PartialLedgerError ? error.cause : error);
        }),
    );
    inFlight = inFlight.then(() => applied);
  }

  /** Queues `op` for this turn's batch; its result has the type of its operation. */
  function submit<Op extends LedgerOp>(op: Op): Promise<LedgerResultOf<Op>> {
    return new Promise((resolve, reject) => {
      queue.push({ op, resolve: resolve as (result: LedgerResult) => void, reject });
      if (!scheduled) {
        scheduled = true;
        setImmediate(runBatch);
      }
    });
  }

  return {
    newReservationId: () => `${idPrefix}-${(nextReservation++).toString(36)}`,
    reserve: (reservationId, subject) => submit({ type: 'reserve', reservationId, subject, nowMs: now() }),
    charge: (subject) => submit({ type: 'charge', subject, nowMs: now() }),
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
