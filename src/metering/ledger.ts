/**
 * The credit ledger's vocabulary: what is charged (a {@link ChargeSubject}), the operations on it
 * and their results, and the {@link Ledger} each store driver implements. The rule that decides
 * every operation is one pure function (ledger-rule.ts); a driver only loads what it reads and
 * commits what it changes, atomically.
 */

/** Who is charged for one call, and the limits that apply, as known when the call arrived. */
export interface ChargeSubject {
  teamId: string;
  keyId: string;
  network: string;
  method: string;
  cost: number;
  /** The UTC day (`YYYY-MM-DD`) the charge belongs to. */
  day: string;
  teamDailyCredits: number;
  keyDailyCap: number | null;
  teamCreditsPerSecond: number | null;
}

/**
 * One ledger operation. Operations are applied in order, atomically per operation, and a batch
 * of them (everything one event-loop turn produced) is applied in one store round trip.
 */
export type LedgerOp =
  /** Hold credits before an upstream call; settled or refunded later by `reservationId`. */
  | { type: 'reserve'; reservationId: string; subject: ChargeSubject; nowMs: number }
  /** Reserve and settle at once: answers known before any upstream call (cache hits, local answers). */
  | { type: 'charge'; subject: ChargeSubject; nowMs: number }
  /** The call was answered: the reserved credits become a charge in the usage ledger. */
  | { type: 'settle'; reservationId: string }
  /** The call cost nothing after all (every upstream failed): give the credits back. */
  | { type: 'refund'; reservationId: string }
  /** Read the team's spend of a day without changing anything (for X-Credits-Remaining). */
  | { type: 'peek'; teamId: string; day: string }
  /**
   * A charged call whose answer could not be written after all (the client reset the connection
   * first): its credits come back and the usage report drops it. Charges are made before the
   * answer is written, so a crash never loses one for an answer that went out.
   */
  | { type: 'reverse'; subject: ChargeSubject };

/** Done; `teamUsed` is the team's spend of that day (reservations included) right after it. */
export interface LedgerDone {
  ok: true;
  teamUsed: number;
}

/** A reserve or charge the team's quota, the key's cap or the throughput limit refused: nothing changed. */
export type LedgerRefusal =
  | { ok: false; reason: 'daily_credits_exhausted'; scope: 'team' | 'key'; limit: number; used: number; teamUsed: number }
  | { ok: false; reason: 'rate_limited'; retryAfterMs: number; teamUsed: number };

/**
 * A settle or refund found no reservation: it was never made, was already settled or refunded,
 * or the stale-reservation sweep gave its credits back. Nothing changed, so nothing was charged.
 */
export interface ReservationGone {
  ok: false;
  reason: 'reservation_gone';
}

export type AdmissionResult = LedgerDone | LedgerRefusal;
export type FinishResult = LedgerDone | ReservationGone;
export type LedgerResult = AdmissionResult | ReservationGone;

/** The result type of one operation type. */
export type LedgerResultOf<Op extends LedgerOp> = Op extends { type: 'peek' | 'reverse' }
  ? LedgerDone
  : Op extends { type: 'reserve' | 'charge' }
    ? AdmissionResult
    : FinishResult;

/** One result per operation, typed by each operation's type where the caller's ops say it. */
export type LedgerResults<Ops extends readonly LedgerOp[]> = { -readonly [I in keyof Ops]: LedgerResultOf<Ops[I]> };

/** The hot part of a store: credits reserved, charged, settled and refunded on every call. */
export interface Ledger {
  /** Applies ledger operations in order; one result per operation. */
  applyLedger<const Ops extends readonly LedgerOp[]>(ops: Ops): Promise<LedgerResults<Ops>>;
  /**
   * Refunds reservations that can no longer settle: those of gateway processes that died
   * (checked at start-up) and any older than `olderThanMs`. Returns how many were refunded.
   */
  recoverReservations(olderThanMs: number): Promise<number>;
}

/**
 * A batch only part of which was applied: a store whose operations of different teams commit
 * separately (Redis Cluster, one commit per shard) met an error on some of them. `results` holds
 * the result of each applied operation and undefined for the others, which failed with `cause`.
 * Callers deliver the results they have: a team on a healthy shard is served while another
 * shard is down.
 */
export class PartialLedgerError extends Error {
  override name = 'PartialLedgerError';
  constructor(
    readonly results: ReadonlyArray<LedgerResult | undefined>,
    override readonly cause: unknown,
  ) {
    super(`${results.filter((result) => result === undefined).length} of ${results.length} ledger operations failed: ${(cause as Error)?.message ?? String(cause)}`);
  }
}

/** A driver's results, one per operation in order, typed by the caller's operations. */
export function typedResults<Ops extends readonly LedgerOp[]>(_ops: Ops, results: readonly LedgerResult[]): LedgerResults<Ops> {
  return results as unknown as LedgerResults<Ops>;
}
