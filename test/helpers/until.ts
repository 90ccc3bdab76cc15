// The one way tests wait for something that has no event to await: poll a condition until it
// holds. The timeout only bounds a failing test; a passing one waits exactly as long as it must.

const POLL_INTERVAL_MS = 10;

/**
 * Resolves once `condition` (sync or async) returns true; rejects with "timed out waiting for
 * <what>" after `timeoutMs`. A condition that throws rejects at once.
 */
export async function until(condition: () => boolean | Promise<boolean>, what: string, timeoutMs = 15_000): Promise<void> {
  const giveUpAt = performance.now() + timeoutMs;
  while (!(await condition())) {
    if (performance.now() > giveUpAt) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, POLL_INTERVAL_MS));
  }
}
