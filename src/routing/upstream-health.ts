/**
 * What the gateway has learnt about one upstream: its circuit breaker, a latency estimate and an
 * error rate that both fade with time, its recent latencies (for hedge delays) and the chain head
 * its last probe reported. Selection ranks upstreams from this; the failsafe policies and the
 * health prober feed it. Nothing here does I/O.
 */

export interface CircuitBreakerSettings {
  /** Consecutive failed attempts that open the circuit. */
  failureThreshold: number;
  /** How long an open circuit refuses attempts before one trial is let through. */
  cooldownMs: number;
}

export type CircuitState = 'closed' | 'open' | 'half-open';

/**
 * Half-life of the error rate and of the latency estimate. A failure or a slow answer weighs on
 * an upstream's rank for seconds, not forever: an upstream that failed once is tried again while
 * its peer stays healthy, and one that has not been used for a while is re-measured.
 */
export const HEALTH_HALF_LIFE_MS = 5_000;
/** Weight of one new sample in the error rate and the latency estimate. */
const SAMPLE_WEIGHT = 0.2;
/**
 * An error rate of 1 ranks an upstream as if it were this much slower. One failure (a rate of
 * 0.2) puts an upstream 200 ms behind a healthy peer, which fades with the rate's half-life.
 */
const ERROR_RATE_PENALTY_MS = 1_000;
/** Latencies kept for the hedge delay quantile. */
const LATENCY_WINDOW = 128;

function decay(ageMs: number): number {
  return ageMs <= 0 ? 1 : 2 ** (-ageMs / HEALTH_HALF_LIFE_MS);
}

export class UpstreamHealth {
  private consecutiveFailures = 0;
  private state: CircuitState = 'closed';
  private openUntil = 0;
  private trialStartedAt = 0;

  private errorRate = 0;
  private errorRateAt = 0;
  private latencyMs = 0;
  private latencyAt = 0;
  private readonly latencies = new Float64Array(LATENCY_WINDOW);
  private latencyCount = 0;
  private sortedLatencies: Float64Array | undefined;

  /** Chain head from the last successful probe, and when it was taken. */
  head: number | undefined;
  headAt = 0;
  /**
   * The upstream's finalized block (or slot) from its last finality probe: what the response
   * cache may keep of its answers by number. Undefined until a probe has told.
   */
  finalized: number | undefined;

  constructor(
    private readonly breaker: CircuitBreakerSettings,
    private readonly now: () => number,
  ) {}

  circuit(): CircuitState {
    if (this.state === 'half-open' && this.now() - this.trialStartedAt > this.breaker.cooldownMs) {
      // The trial never reported back (its caller went away): let another one through.
      this.state = 'open';
    }
    return this.state;
  }

  /** Open, with the cooldown over: the next admitted attempt is the trial. */
  trialReady(): boolean {
    return this.circuit() === 'open' && this.now() >= this.openUntil;
  }

  /** Not refusing attempts: closed, or open with its cooldown over (a trial may go). */
  isAvailable(): boolean {
    const state = this.circuit();
    return state === 'closed' || (state === 'open' && this.now() >= this.openUntil);
  }

  /** Readiness: the circuit is closed. */
  isHealthy(): boolean {
    return this.circuit() === 'closed';
  }

  /**
   * Claims the right to send one attempt now: always while closed; once per cooldown while open
   * (that attempt is the trial, and the circuit is half-open until it reports).
   */
  admit(): boolean {
    const state = this.circuit();
    if (state === 'closed') return true;
    if (state === 'half-open' || this.now() < this.openUntil) return false;
    this.state = 'half-open';
    this.trialStartedAt = this.now();
    return true;
  }

  /** The trial was cancelled before it could tell anything: the next attempt may be the trial. */
  releaseTrial(): void {
    if (this.state !== 'half-open') return;
    this.state = 'open';
    this.openUntil = this.now();
  }

  recordSuccess(durationMs: number): void {
    this.close();
    this.sampleLatency(durationMs, true);
  }

  /**
   * A health probe answered: the upstream is alive (its circuit closes) and its latency estimate
   * is refreshed, but a probe's latency stays out of the hedge quantile, which is about real calls.
   */
  recordProbe(durationMs: number): void {
    this.close();
    this.sampleLatency(durationMs, false);
  }

  recordFailure(): void {
    this.consecutiveFailures += 1;
    this.sampleError(1);
    if (this.state === 'half-open' || this.consecutiveFailures >= this.breaker.failureThreshold) {
      this.state = 'open';
      this.openUntil = this.now() + this.breaker.cooldownMs;
    }
  }

  /**
   * An attempt is taking longer than the hedge delay: rank this upstream lower now, instead of
   * only when its timeout finally fires, so that new calls stop queueing behind a stall.
   */
  recordSlow(): void {
    this.sampleError(1);
  }

  /**
   * The upstream answered, but the answer was wrong (a block that failed verification): rank it
   * lower like a failure, without counting towards its circuit. A trial that answers wrongly
   * proves nothing either way: the next attempt may be the trial again.
   */
  recordWrongAnswer(): void {
    this.sampleError(1);
    this.releaseTrial();
  }

  /**
   * The upstream's WebSocket failed the subscriptions it carried (its socket closed or refused
   * connections, it stalled, a subscribe or back-fill failed): rank it lower for calls too, without
   * counting towards its circuit. Its HTTP endpoint may well be fine, and only calls over it
   * decide the circuit; a socket retried every few hundred milliseconds would otherwise open it.
   */
  recordSocketFault(): void {
    this.sampleError(1);
  }

  /** The error rate as of now: recent failures count, old ones fade. */
  currentErrorRate(): number {
    return this.errorRate * decay(this.now() - this.errorRateAt);
  }

  /**
   * Latency estimate as of now. It fades towards 0 while no new sample arrives, so an upstream
   * that was slow a while ago is eventually tried (and measured) again.
   */
  currentLatencyMs(): number {
    return this.latencyMs * decay(this.now() - this.latencyAt);
  }

  /** Lower is better: the latency estimate plus a penalty for the recent error rate. */
  score(): number {
    return this.currentLatencyMs() + ERROR_RATE_PENALTY_MS * this.currentErrorRate();
  }

  /** The `quantile` (0..1) of recent successful latencies, or undefined before `minSamples`. */
  latencyQuantile(quantile: number, minSamples = 8): number | undefined {
    const count = Math.min(this.latencyCount, LATENCY_WINDOW);
    if (count < minSamples) return undefined;
    this.sortedLatencies ??= this.latencies.slice(0, count).sort();
    const index = Math.min(count - 1, Math.max(0, Math.ceil(quantile * count) - 1));
    return this.sortedLatencies[index];
  }

  recordHead(head: number): void {
    this.head = head;
    this.headAt = this.now();
  }

  /**
   * A proper answer. When it was the trial of an open circuit, the upstream has just proved it
   * recovered: its past errors are forgotten, so that it takes traffic again at once.
   */
  private close(): void {
    if (this.state === 'half-open') this.errorRate = 0;
    this.consecutiveFailures = 0;
    this.state = 'closed';
    this.sampleError(0);
  }

  private sampleError(value: number): void {
    const now = this.now();
    this.errorRate = this.currentErrorRate() * (1 - SAMPLE_WEIGHT) + value * SAMPLE_WEIGHT;
    this.errorRateAt = now;
  }

  private sampleLatency(durationMs: number, intoQuantileWindow: boolean): void {
    const previous = this.currentLatencyMs();
    this.latencyMs = previous === 0 ? durationMs : previous * (1 - SAMPLE_WEIGHT) + durationMs * SAMPLE_WEIGHT;
    this.latencyAt = this.now();
    if (!intoQuantileWindow) return;
    this.latencies[this.latencyCount % LATENCY_WINDOW] = durationMs;
    this.latencyCount += 1;
    this.sortedLatencies = undefined;
  }
}
