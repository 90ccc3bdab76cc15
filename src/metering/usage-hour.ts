import { utcDay } from './meter.js';

/**
 * The UTC hour (0–23) of `day` that a charge settled at `nowMs` is counted in. Hourly usage is
 * recorded when the ledger commits a settle or charge, so it is the hour the call was answered;
 * a call reserved before midnight and answered after it stays in its reservation's day (whose
 * quota it used), in that day's last hour.
 */
export function usageHour(day: string, nowMs: number): number {
  const today = utcDay(nowMs);
  if (today === day) return new Date(nowMs).getUTCHours();
  return today > day ? 23 : 0;
}
