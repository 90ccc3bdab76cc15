import type { AttemptOutcome } from './upstream.js';

/**
 * What routing knows of tracing: a request that is traced hands its calls a {@link RequestTrace},
 * and each attempt at an upstream becomes a child span of the request's. The spans themselves
 * (OpenTelemetry) are made in tracing/tracing.ts; routing only says what happened.
 */

export interface AttemptFacts {
  network: string;
  upstream: string;
  method: string;
  /** 1 for the call's first attempt, counting every attempt the call started (hedges too). */
  attempt: number;
  /** Started beside a running attempt of the same call (the hedge policy's copy). */
  hedge: boolean;
  /** Asked to confirm another upstream's `null` (not a candidate of the call). */
  confirmation: boolean;
  /** Why the call's previous attempt failed, when this one follows a failure. */
  retryReason: string | undefined;
}

export interface AttemptTrace {
  /** Headers the attempt's request carries (its `traceparent`), when the trace goes upstream too. */
  readonly headers: Readonly<Record<string, string>> | undefined;
  end(outcome: AttemptOutcome): void;
}

export interface RequestTrace {
  attempt(facts: AttemptFacts): AttemptTrace;
}
