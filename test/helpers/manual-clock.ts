// A clock for the routing policies' unit tests: time moves only when a test advances it, and
// timers fire in order as it passes them. No test of a timeout, hedge delay or cooldown sleeps.

import type { Clock } from '../../src/routing/clock.js';

interface Timer {
  at: number;
  callback: () => void;
}

/** Lets promise callbacks and `setImmediate` work scheduled by fired timers run. */
export async function settle(): Promise<void> {
  for (let round = 0; round < 10; round += 1) await new Promise<void>((resolve) => setImmediate(resolve));
}

export class ManualClock implements Clock {
  private time = 1_000_000;
  private readonly timers: Timer[] = [];

  now = (): number => this.time;

  setTimer = (delayMs: number, callback: () => void): (() => void) => {
    const timer = { at: this.time + Math.max(1, delayMs), callback };
    this.timers.push(timer);
    return () => {
      const index = this.timers.indexOf(timer);
      if (index >= 0) this.timers.splice(index, 1);
    };
  };

  /** Timers not yet fired. */
  get pending(): number {
    return this.timers.length;
  }

  /** Moves time forward by `ms`, firing every timer due on the way (in order) and settling after each. */
  async advance(ms: number): Promise<void> {
    const target = this.time + ms;
    await settle();
    for (;;) {
      const due = this.timers.filter((timer) => timer.at <= target).sort((a, b) => a.at - b.at)[0];
      if (due === undefined) break;
      this.timers.splice(this.timers.indexOf(due), 1);
      this.time = due.at;
      due.callback();
      await settle();
    }
    this.time = target;
    await settle();
  }
}
