/**
 * Time as the routing layer sees it: the current time in milliseconds and one-shot timers.
 * Injected so that the failsafe policies (timeouts, hedge delays, circuit cooldowns, probe
 * intervals) can be tested by advancing a manual clock instead of sleeping.
 */
export interface Clock {
  now(): number;
  /** Runs `callback` once after `delayMs`; the returned function cancels it. */
  setTimer(delayMs: number, callback: () => void): () => void;
}

export const systemClock: Clock = {
  now: () => performance.timeOrigin + performance.now(),
  setTimer(delayMs, callback) {
    const timer = setTimeout(callback, Math.max(1, delayMs));
    return () => clearTimeout(timer);
  },
};

/** A clock over a plain `now()` function (the gateway's injected time) with real timers. */
export function clockFrom(now: () => number): Clock {
  return { now, setTimer: systemClock.setTimer };
}

/**
 * Real time, with timers that do not keep the process alive: for housekeeping that must never be
 * the reason a process has not exited yet.
 */
export const backgroundClock: Clock = {
  now: systemClock.now,
  setTimer(delayMs, callback) {
    const timer = setTimeout(callback, Math.max(1, delayMs));
    timer.unref();
    return () => clearTimeout(timer);
  },
};
