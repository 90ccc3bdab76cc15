/** Every UTC day from `fromDay` to `toDay` (`YYYY-MM-DD`, inclusive), in order. */
export function dayRange(fromDay: string, toDay: string): string[] {
  const days: string[] = [];
  for (let at = Date.parse(`${fromDay}T00:00:00Z`); at <= Date.parse(`${toDay}T00:00:00Z`); at += 86_400_000) {
    days.push(new Date(at).toISOString().slice(0, 10));
  }
  return days;
}
