import { hash } from 'node:crypto';
import type { Logger } from '../logging/logger.js';
import { nextUtcMidnight, utcDay } from '../metering/meter.js';
import { quotaForecast, readCreditsLastHour } from '../metering/quota-forecast.js';
import type { ChargeSubject, Ledger, LedgerOp, LedgerResult } from '../metering/ledger.js';
import type { AlertStore, UsageReports } from '../store/index.js';
import type { AlertTargets } from './alert-targets.js';
import type { WebhookSender } from './webhook-sender.js';

/**
 * Quota threshold alerts (docs/webhooks.md): when a team's spend of a UTC day reaches a threshold
 * (default 75, 90 and 100 % of its daily quota), one `quota.threshold` event per threshold, team
 * and day is sent, however many replicas see the crossing.
 *
 * The request path pays nothing extra: the ledger already answers each charge and settle with the
 * team's spend right after it, and {@link QuotaAlerts.watch} compares that number with the
 * thresholds this process holds in memory. Only a crossing not yet seen here goes to the store,
 * to claim the event (INSERT OR IGNORE / SET NX); the replica that wins the claim sends it.
 * Events below 100 % carry a forecast of when the quota runs out at the last hour's rate; the
 * hourly usage it needs is read only then, by the replica sending the event.
 */

export interface QuotaAlerts {
  /** The same ledger, watched: charges and settles are compared with the team's thresholds. */
  watch(ledger: Ledger): Ledger;
  /** A team's spend of `day` is `used` of `limit`. */
  observe(teamId: string, day: string, used: number, limit: number): void;
  /** Re-checks the last spend seen of a team whose alert settings were still loading. */
  settingsLoaded(teamId: string): void;
  /** Resolves once every check started so far has ended: settings loaded, events claimed and handed to the sender. */
  idle(): Promise<void>;
}

/** Claims are kept past the day they belong to, so a replica whose clock lags cannot claim again. */
const CLAIM_TTL_MS = 3 * 86_400_000;
/** Reservations followed at once; beyond it the oldest are forgotten (their settle is then not checked). */
const MAX_PENDING = 100_000;

/** Event ids are derived from what the event is, so every replica and every retry gives the same id. */
export function eventId(eventKey: string): string {
  return `evt_${hash('sha256', eventKey, 'hex').slice(0, 24)}`;
}

export function createQuotaAlerts(options: {
  store: Pick<AlertStore, 'claimEvent'> & Pick<UsageReports, 'hourlyUsage'>;
  targets: AlertTargets;
  sender: WebhookSender;
  /** The time of a forecast (when its event is sent). */
  now: () => number;
  logger?: Logger;
}): QuotaAlerts {
  const { targets, sender, store, now } = options;
  /** Thresholds already handled here (claimed, or found claimed), per team of `firedDay`. */
  let firedDay = '';
  const fired = new Map<string, Set<number>>();
  /** The latest spend seen of a team whose settings are still loading. */
  const waiting = new Map<string, { day: string; used: number; limit: number }>();
  const pending = new Map<string, { teamId: string; day: string; limit: number }>();
  /** Settings loads and claims under way, for `idle`. */
  const inFlight = new Set<Promise<unknown>>();
  const track = (work: Promise<unknown>): void => {
    inFlight.add(work);
    void work.finally(() => inFlight.delete(work)).catch(() => undefined);
  };

  function check(teamId: string, day: string, used: number, limit: number): void {
    const alerting = targets.peek(teamId);
    if (alerting === undefined) {
      waiting.set(teamId, { day, used, limit });
      track(targets.get(teamId));
      return;
    }
    if (alerting.target === null || limit <= 0) return;
    if (day !== firedDay) {
      if (day < firedDay) return; // a late settle of yesterday: its thresholds were handled then
      firedDay = day;
      fired.clear();
    }
    for (const threshold of alerting.thresholds) {
      if (used * 100 < threshold * limit) continue;
      let handled = fired.get(teamId);
      if (handled === undefined) fired.set(teamId, (handled = new Set()));
      if (handled.has(threshold)) continue;
      handled.add(threshold);
      track(claimAndSend(teamId, day, threshold, used, limit));
    }
  }

  async function claimAndSend(teamId: string, day: string, threshold: number, used: number, limit: number): Promise<void> {
    const key = `quota.threshold:${teamId}:${day}:${threshold}`;
    try {
      if (!(await store.claimEvent(key, CLAIM_TTL_MS))) return;
      const { target } = await targets.get(teamId);
      if (target === null) return;
      const resetsAt = new Date(nextUtcMidnight(Date.parse(`${day}T00:00:00Z`))).toISOString();
      const event = { id: eventId(key), type: 'quota.threshold', team: teamId, day, threshold, used, limit, resetsAt };
      // 100 % needs no forecast: the quota has run out.
      await sender.deliver(threshold < 100 ? { ...event, forecast: await forecast(teamId, day, used, limit) } : event, target);
    } catch (error) {
      // The claim is taken only once: a store error here means this crossing may go unsent.
      options.logger?.error({ err: error, team: teamId, threshold }, 'quota alert could not be claimed or sent');
    }
  }

  /**
   * `{creditsLastHour, runsOutAt}` at send time, for the spend the event reports. A day that has
   * ended since (a late settle) has reset: no time then. Null if the hourly usage cannot be read:
   * the event is claimed already, and is better sent without a forecast than not at all.
   */
  async function forecast(teamId: string, day: string, used: number, limit: number): Promise<{ creditsLastHour: number; runsOutAt: string | null } | null> {
    const at = now();
    try {
      const creditsLastHour = await readCreditsLastHour((query) => store.hourlyUsage(query), teamId, at);
      const { runsOutAt } = quotaForecast({ used, limit, creditsLastHour, now: at });
      return { creditsLastHour, runsOutAt: utcDay(at) === day ? runsOutAt : null };
    } catch (error) {
      options.logger?.error({ err: error, team: teamId }, 'quota alert forecast: hourly usage could not be read');
      return null;
    }
  }

  return {
    observe: check,
    async idle() {
      // A loaded setting starts claims of its own: wait until nothing is left.
      while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
    },
    settingsLoaded(teamId) {
      const last = waiting.get(teamId);
      if (last === undefined) return;
      waiting.delete(teamId);
      check(teamId, last.day, last.used, last.limit);
    },
    watch(ledger) {
      const inspect = (ops: readonly LedgerOp[], results: readonly LedgerResult[]) => {
        ops.forEach((op, index) => {
          const result = results[index]!;
          if (op.type === 'charge' || op.type === 'reserve') {
            if (!result.ok) return;
            const subject: ChargeSubject = op.subject;
            if (op.type === 'charge') return check(subject.teamId, subject.day, result.teamUsed, subject.teamDailyCredits);
            if (pending.size >= MAX_PENDING) pending.delete(pending.keys().next().value!);
            pending.set(op.reservationId, { teamId: subject.teamId, day: subject.day, limit: subject.teamDailyCredits });
          } else if (op.type === 'settle' || op.type === 'refund') {
            const held = pending.get(op.reservationId);
            pending.delete(op.reservationId);
            if (op.type === 'settle' && held !== undefined && result.ok) check(held.teamId, held.day, result.teamUsed, held.limit);
          }
        });
      };
      return {
        applyLedger: (async (ops: readonly LedgerOp[]) => {
          const results = await ledger.applyLedger(ops);
          inspect(ops, results as readonly LedgerResult[]);
          return results;
        }) as Ledger['applyLedger'],
        recoverReservations: (olderThanMs) => ledger.recoverReservations(olderThanMs),
      };
    },
  };
}
