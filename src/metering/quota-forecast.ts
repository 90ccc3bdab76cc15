import { nextUtcMidnight, utcDay } from './meter.js';

/**
 * "At this rate the daily quota runs out at HH:MM UTC" (docs/portal.md, docs/webhooks.md): a
 * straight line from the team's spend of today, at the rate of the last hour, compared with the
 * next 00:00 UTC, when daily quotas reset. Pure: the caller reads the usage and gives the time.
 */

const HOUR_MS = 3_600_000;

/**
 * `runs-out`: at the last hour's rate the quota is used up before the daily reset, at `runsOutAt`.
 * `lasts`: it is not (or nothing was spent in the last hour). `exhausted`: the quota is used up already.
 */
export type ForecastState = 'lasts' | 'runs-out' | 'exhausted';

export interface QuotaForecast {
  state: ForecastState;
  /** Credits settled in the last hour, as {@link creditsLastHour} approximates them. */
  creditsLastHour: number;
  /** When the quota runs out at that rate (ISO, UTC); null unless `state` is `runs-out`. */
  runsOutAt: string | null;
}

/** The part of an hourly usage row the rate needs (the store's `HourlyUsageRow` has more). */
export interface HourCredits {
  day: string;
  /** 0–23, UTC. */
  hour: number;
  credits: number;
}

/**
 * The forecast at `now` for a team that has spent `used` of its daily `limit`, spending
 * `creditsLastHour` per hour: null `runsOutAt` when the rate is 0, when the quota would last
 * until (or past) the next UTC midnight, and when it is used up already (`exhausted`).
 */
export function quotaForecast(input: { used: number; limit: number; creditsLastHour: number; now: number }): QuotaForecast {
  const { used, limit, creditsLastHour: rate, now } = input;
  const remaining = limit - used;
  if (remaining <= 0) return { state: 'exhausted', creditsLastHour: rate, runsOutAt: null };
  if (rate <= 0) return { state: 'lasts', creditsLastHour: rate, runsOutAt: null };
  const runsOutAt = now + Math.round((remaining / rate) * HOUR_MS);
  if (runsOutAt >= nextUtcMidnight(now)) return { state: 'lasts', creditsLastHour: rate, runsOutAt: null };
  return { state: 'runs-out', creditsLastHour: rate, runsOutAt: new Date(runsOutAt).toISOString() };
}

/** The UTC days whose hourly usage {@link creditsLastHour} needs at `now`: today, and yesterday during hour 0. */
export function lastHourDays(now: number): string[] {
  const previous = utcDay(now - HOUR_MS);
  const today = utcDay(now);
  return previous === today ? [today] : [previous, today];
}

/**
 * The credits of the hour before `now`, from hourly usage rows (every key of the team, of the
 * days {@link lastHourDays} names). Usage is kept per UTC hour only, so the sliding hour is
 * approximated from the two buckets it overlaps: all of the current hour so far, plus the previous
 * hour weighted by the share of the current hour not yet elapsed (at 14:15, hour 14 + 0.75 ×
 * hour 13), which assumes the previous hour's credits were spread evenly over it. In hour 0 the
 * previous hour is yesterday's hour 23. Rounded to hundredths of a credit.
 */
export function creditsLastHour(rows: readonly HourCredits[], now: number): number {
  const previousAt = now - HOUR_MS;
  const current = { day: utcDay(now), hour: new Date(now).getUTCHours() };
  const previous = { day: utcDay(previousAt), hour: new Date(previousAt).getUTCHours() };
  const unelapsed = (HOUR_MS - (now % HOUR_MS)) / HOUR_MS;
  let sum = 0;
  for (const row of rows) {
    if (row.day === current.day && row.hour === current.hour) sum += row.credits;
    else if (row.day === previous.day && row.hour === previous.hour) sum += unelapsed * row.credits;
  }
  return Math.round(sum * 100) / 100;
}

/** Reads the team's hourly usage of the days the last hour touches and returns {@link creditsLastHour}. */
export async function readCreditsLastHour(
  hourlyUsage: (query: { teamId: string; day: string }) => Promise<readonly HourCredits[]>,
  teamId: string,
  now: number,
): Promise<number> {
  const rows = await Promise.all(lastHourDays(now).map((day) => hourlyUsage({ teamId, day })));
  return creditsLastHour(rows.flat(), now);
}
