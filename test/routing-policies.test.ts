// The failsafe policies of src/routing, each alone around a scripted `next`, on a manual clock:
// timeout, circuit breaker, failover, hedge, null confirmation, result check; then selection,
// upstream health and the health prober. Nothing here sleeps or opens a socket.

import { describe, expect, it } from 'vitest';
import { startHealthProber, headOf } from '../src/routing/health-prober.js';
import { circuitBreakerPolicy } from '../src/routing/policies/circuit-breaker.js';
import { failoverPolicy } from '../src/routing/policies/failover.js';
import { hedgeDelayMs, hedgePolicy, type HedgeResult, type HedgeSettings } from '../src/routing/policies/hedge.js';
import { nullConfirmationPolicy, type NullConfirmation } from '../src/routing/policies/null-confirmation.js';
import { resultCheckPolicy } from '../src/routing/policies/result-check.js';
import { timeoutPolicy } from '../src/routing/policies/timeout.js';
import { tracedPolicy } from '../src/routing/policies/traced.js';
import type { AttemptFacts, RequestTrace } from '../src/routing/call-trace.js';
import { attemptEachCandidate, childController, NEVER_ABORTED, type AttemptFn, type CallSignal, type Execution, type ResultCheck } from '../src/routing/policies/types.js';
import { CallController } from '../src/routing/abort-signals.js';
import { createSelector, type SelectionSettings } from '../src/routing/selection.js';
import { HEALTH_HALF_LIFE_MS, UpstreamHealth } from '../src/routing/upstream-health.js';
import type { AttemptOutcome, RoutedUpstream } from '../src/routing/upstream.js';
import { ManualClock } from './helpers/manual-clock.js';
import { until } from './helpers/until.js';

const BREAKER = { failureThreshold: 3, cooldownMs: 1_000 };

function upstreamOn(clock: ManualClock, id: string, options: { timeoutMs?: number; weight?: number } = {}): RoutedUpstream {
  return { id, health: new UpstreamHealth(BREAKER, clock.now), timeoutMs: options.timeoutMs ?? 500, weight: options.weight ?? 1 };
}

const result = (json: string, durationMs = 10): AttemptOutcome => ({ kind: 'result', resultBytes: Buffer.from(json), durationMs });
const failure = (reason: string, durationMs = 10): AttemptOutcome => ({ kind: 'failure', reason, timedOut: false, durationMs });

function executionOf(
  candidates: RoutedUpstream[],
  options: { method?: string; deadline?: number; clock?: ManualClock; check?: ResultCheck; all?: RoutedUpstream[]; trace?: RequestTrace } = {},
): Execution {
  let next = 0;
  const all = options.all ?? candidates;
  return {
    method: options.method ?? 'eth_getBlockByHash',
    deadline: options.deadline ?? (options.clock?.now() ?? 0) + 10_000,
    trace: options.trace,
    attemptsStarted: 0,
    attempts: [],
    running: new Set(),
    check: options.check,
    paramsFor: () => [],
    takeCandidate: () => candidates[next++],
    peekCandidate: () => candidates[next],
    othersThan: (id) => all.filter((upstream) => upstream.id !== id && upstream.health.isAvailable()),
  };
}

/** An attempt whose answer per upstream the test decides, recording calls and their signals. */
function scriptedAttempts(script: Record<string, (signal: CallSignal) => Promise<AttemptOutcome>>) {
  const calls: Array<{ upstream: string; signal: CallSignal }> = [];
  const attempt: AttemptFn = (upstream, _execution, signal) => {
    calls.push({ upstream: upstream.id, signal });
    const behaviour = script[upstream.id];
    if (behaviour === undefined) throw new Error(`no script for ${upstream.id}`);
    return behaviour(signal);
  };
  return { attempt, calls };
}

/** Never answers until aborted; then ends as a cancelled attempt, as Upstream.send does. */
function untilAborted(signal: CallSignal): Promise<AttemptOutcome> {
  return new Promise((resolve) => signal.listen(() => resolve(failure('cancelled'))));
}

function deferred<T>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe('timeout policy', () => {
  it("ends an attempt at the upstream's timeoutMs as a timeout and aborts it", async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a', { timeoutMs: 300 });
    const { attempt, calls } = scriptedAttempts({ a: untilAborted });
    const outcome = timeoutPolicy(clock)(attempt)(upstream, executionOf([upstream], { clock }), new CallController().signal);
    let done = false;
    void outcome.then(() => (done = true));
    await clock.advance(299);
    expect(done).toBe(false);
    await clock.advance(1);
    expect(await outcome).toMatchObject({ kind: 'failure', reason: 'timeout', timedOut: true });
    expect(calls[0]!.signal.aborted).toBe(true);
  });

  it("is bounded by what is left of the call's deadline", async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a', { timeoutMs: 5_000 });
    const { attempt } = scriptedAttempts({ a: untilAborted });
    const outcome = timeoutPolicy(clock)(attempt)(upstream, executionOf([upstream], { clock, deadline: clock.now() + 120 }), new CallController().signal);
    await clock.advance(120);
    expect(await outcome).toMatchObject({ reason: 'timeout', timedOut: true });
  });

  it('makes no attempt once the deadline has passed', async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    const { attempt, calls } = scriptedAttempts({ a: untilAborted });
    const outcome = await timeoutPolicy(clock)(attempt)(upstream, executionOf([upstream], { clock, deadline: clock.now() }), new CallController().signal);
    expect(outcome).toMatchObject({ reason: 'timeout' });
    expect(calls).toHaveLength(0);
  });

  it('passes an answer within the bound through and cancels its timer', async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    const { attempt } = scriptedAttempts({ a: async () => result('"0x1"') });
    const outcome = await timeoutPolicy(clock)(attempt)(upstream, executionOf([upstream], { clock }), new CallController().signal);
    expect(outcome).toMatchObject({ kind: 'result' });
    expect(clock.pending).toBe(0);
  });

  it('aborts its own attempt at the bound under the shared never-aborted signal too, and leaves nothing listening on its parent', async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a', { timeoutMs: 300 });
    const { attempt, calls } = scriptedAttempts({ a: untilAborted, b: async () => result('"0x1"') });
    const parent = new CallController();
    const slowUnderRoot = timeoutPolicy(clock)(attempt)(upstream, executionOf([upstream], { clock }), NEVER_ABORTED);
    const slow = timeoutPolicy(clock)(attempt)(upstream, executionOf([upstream], { clock }), parent.signal);
    const fast = timeoutPolicy(clock)(attempt)(upstreamOn(clock, 'b'), executionOf([upstream], { clock }), parent.signal);
    expect(parent.listening).toBe(2);
    expect(await fast).toMatchObject({ kind: 'result' });
    expect(parent.listening).toBe(1);
    await clock.advance(300);
    expect(await slowUnderRoot).toMatchObject({ kind: 'failure', reason: 'timeout', timedOut: true });
    expect(await slow).toMatchObject({ kind: 'failure', reason: 'timeout', timedOut: true });
    expect(calls.map((call) => [call.upstream, call.signal.aborted])).toEqual([['a', true], ['a', true], ['b', false]]);
    expect(parent.aborted).toBe(false);
    expect(parent.listening).toBe(0);
    expect(NEVER_ABORTED.aborted).toBe(false);
  });

  it("aborts a running attempt when the caller's signal aborts, with the caller's reason", async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    const { attempt, calls } = scriptedAttempts({ a: untilAborted });
    const parent = new CallController();
    const outcome = timeoutPolicy(clock)(attempt)(upstream, executionOf([upstream], { clock }), parent.signal);
    const reason = new Error('another attempt answered');
    parent.abort(reason);
    expect(await outcome).toMatchObject({ kind: 'failure', reason: 'cancelled' });
    expect(calls[0]!.signal.reason).toBe(reason);
    expect(clock.pending).toBe(0);
  });
});

describe('call signals', () => {
  it('run each listener once, in order, on the first abort only; a released listener and one added after the abort never run', () => {
    const controller = new CallController();
    const heard: string[] = [];
    controller.listen(() => heard.push('first'));
    const release = controller.listen(() => heard.push('released'));
    controller.listen(() => heard.push(`second ${String(controller.reason)}`));
    release();
    expect(controller.listening).toBe(2);
    controller.abort(new Error('one'));
    controller.abort(new Error('two'));
    controller.listen(() => heard.push('late'));
    expect(heard).toEqual(['first', 'second Error: one']);
    expect(controller.listening).toBe(0);
    expect(controller.reason).toEqual(new Error('one'));
  });

  it("abort without a reason gives an AbortError; a child follows its parent's reason, or is born aborted under an aborted parent", () => {
    const bare = new CallController();
    bare.abort();
    expect(bare.reason).toMatchObject({ name: 'AbortError' });
    const parent = new CallController();
    const { controller: child, release } = childController(parent.signal);
    expect(parent.listening).toBe(1);
    const reason = new Error('deadline');
    parent.abort(reason);
    expect(child.aborted).toBe(true);
    expect(child.reason).toBe(reason);
    release();
    const late = childController(parent.signal);
    expect(late.controller.reason).toBe(reason);
    expect(NEVER_ABORTED.listen(() => undefined)).toBeTypeOf('function');
  });
});

describe('circuit breaker policy', () => {
  it('opens after failureThreshold failures, refuses attempts, lets one trial through after the cooldown', async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    let answer: AttemptOutcome = failure('http_500');
    const { attempt, calls } = scriptedAttempts({ a: async () => answer });
    const guarded = circuitBreakerPolicy()(attempt);
    const run = () => guarded(upstream, executionOf([upstream], { clock }), new CallController().signal);

    for (let n = 0; n < BREAKER.failureThreshold; n += 1) expect(await run()).toMatchObject({ reason: 'http_500' });
    expect(upstream.health.circuit()).toBe('open');
    expect(await run()).toMatchObject({ reason: 'skipped' });
    expect(calls).toHaveLength(BREAKER.failureThreshold);

    await clock.advance(BREAKER.cooldownMs);
    expect(upstream.health.trialReady()).toBe(true);
    // The trial fails: open again for another cooldown.
    expect(await run()).toMatchObject({ reason: 'http_500' });
    expect(calls).toHaveLength(BREAKER.failureThreshold + 1);
    expect(await run()).toMatchObject({ reason: 'skipped' });

    await clock.advance(BREAKER.cooldownMs);
    answer = result('"0x1"');
    expect(await run()).toMatchObject({ kind: 'result' });
    expect(upstream.health.circuit()).toBe('closed');
    expect(await run()).toMatchObject({ kind: 'result' });
    expect(calls).toHaveLength(BREAKER.failureThreshold + 3);
  });

  it('admits a single trial at a time: a concurrent attempt is skipped while the trial runs', async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    for (let n = 0; n < BREAKER.failureThreshold; n += 1) upstream.health.recordFailure();
    await clock.advance(BREAKER.cooldownMs);
    const trial = deferred<AttemptOutcome>();
    const { attempt, calls } = scriptedAttempts({ a: () => trial.promise });
    const guarded = circuitBreakerPolicy()(attempt);
    const first = guarded(upstream, executionOf([upstream], { clock }), new CallController().signal);
    expect(upstream.health.circuit()).toBe('half-open');
    expect(await guarded(upstream, executionOf([upstream], { clock }), new CallController().signal)).toMatchObject({ reason: 'skipped' });
    trial.resolve(result('null'));
    await first;
    expect(calls).toHaveLength(1);
    expect(upstream.health.circuit()).toBe('closed');
  });

  it('does not count a cancelled attempt against the upstream, and a cancelled trial frees the next one', async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    const { attempt } = scriptedAttempts({ a: async () => failure('cancelled') });
    const guarded = circuitBreakerPolicy()(attempt);
    for (let n = 0; n < 10; n += 1) await guarded(upstream, executionOf([upstream], { clock }), new CallController().signal);
    expect(upstream.health.circuit()).toBe('closed');
    expect(upstream.health.currentErrorRate()).toBe(0);

    for (let n = 0; n < BREAKER.failureThreshold; n += 1) upstream.health.recordFailure();
    await clock.advance(BREAKER.cooldownMs);
    await guarded(upstream, executionOf([upstream], { clock }), new CallController().signal);
    expect(upstream.health.trialReady()).toBe(true);
  });

  it('ranks an upstream that answers wrongly lower without opening its circuit', async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    const { attempt } = scriptedAttempts({ a: async () => failure('unverified_block') });
    const guarded = circuitBreakerPolicy({ wrongAnswerReasons: new Set(['unverified_block']) })(attempt);
    for (let n = 0; n < 2 * BREAKER.failureThreshold; n += 1) await guarded(upstream, executionOf([upstream], { clock }), new CallController().signal);
    expect(upstream.health.circuit()).toBe('closed');
    expect(upstream.health.currentErrorRate()).toBeGreaterThan(0.5);
  });

  it('counts an upstream JSON-RPC error passed to the client as a proper answer', async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    for (let n = 0; n < BREAKER.failureThreshold - 1; n += 1) upstream.health.recordFailure();
    const { attempt } = scriptedAttempts({ a: async () => ({ kind: 'rpc-error', error: { code: -32000, message: 'header not found' }, durationMs: 5 }) });
    await circuitBreakerPolicy()(attempt)(upstream, executionOf([upstream], { clock }), new CallController().signal);
    upstream.health.recordFailure();
    expect(upstream.health.circuit()).toBe('closed');
  });
});

describe('failover policy', () => {
  it('tries candidates in order until one answers, listing each failure', async () => {
    const clock = new ManualClock();
    const [a, b, c] = ['a', 'b', 'c'].map((id) => upstreamOn(clock, id));
    const { attempt, calls } = scriptedAttempts({ a: async () => failure('http_500'), b: async () => result('"0x2"'), c: async () => result('"0x3"') });
    const execution = executionOf([a!, b!, c!], { clock });
    const outcome = await failoverPolicy(clock)(attemptEachCandidate(attempt))(execution, new CallController().signal);
    expect(outcome).toMatchObject({ kind: 'result', upstream: 'b' });
    expect(execution.attempts).toEqual([{ upstream: 'a', reason: 'http_500' }]);
    expect(calls.map((call) => call.upstream)).toEqual(['a', 'b']);
  });

  it("stops at the upstream's own JSON-RPC error: it is the answer, not a fault", async () => {
    const clock = new ManualClock();
    const [a, b] = ['a', 'b'].map((id) => upstreamOn(clock, id));
    const { attempt, calls } = scriptedAttempts({
      a: async () => ({ kind: 'rpc-error', error: { code: 3, message: 'execution reverted' }, durationMs: 1 }),
      b: async () => result('"0x2"'),
    });
    const outcome = await failoverPolicy(clock)(attemptEachCandidate(attempt))(executionOf([a!, b!], { clock }), new CallController().signal);
    expect(outcome).toMatchObject({ kind: 'rpc-error', upstream: 'a' });
    expect(calls).toHaveLength(1);
  });

  it('fails when the candidates run out, and stops at the deadline', async () => {
    const clock = new ManualClock();
    const [a, b, c] = ['a', 'b', 'c'].map((id) => upstreamOn(clock, id));
    const exhausted = executionOf([a!, b!], { clock });
    const failing = scriptedAttempts({ a: async () => failure('http_502'), b: async () => failure('bad_json') });
    expect(await failoverPolicy(clock)(attemptEachCandidate(failing.attempt))(exhausted, new CallController().signal)).toEqual({ kind: 'failed' });
    expect(exhausted.attempts.map((attempt) => attempt.reason)).toEqual(['http_502', 'bad_json']);

    const slow = scriptedAttempts({
      a: async () => {
        await clock.advance(200);
        return failure('timeout');
      },
      b: async () => result('"0x2"'),
      c: async () => result('"0x3"'),
    });
    const late = executionOf([a!, b!, c!], { clock, deadline: clock.now() + 100 });
    expect(await failoverPolicy(clock)(attemptEachCandidate(slow.attempt))(late, new CallController().signal)).toEqual({ kind: 'failed' });
    expect(slow.calls.map((call) => call.upstream)).toEqual(['a']);
  });
});

describe('hedge policy', () => {
  const SETTINGS: HedgeSettings = { delayMs: 100, quantile: 0.95, minDelayMs: 20, maxDelayMs: 1_000, maxHedges: 1 };

  function hedged(clock: ManualClock, attempt: AttemptFn, settings = SETTINGS, results: HedgeResult[] = []) {
    return hedgePolicy(settings, clock, { isWrite: (method) => method === 'eth_sendRawTransaction', observe: (r) => results.push(r) })(
      failoverPolicy(clock)(attemptEachCandidate(attempt)),
    );
  }

  it('sends a slow read to the next upstream after the delay; the first answer wins and the other is cancelled', async () => {
    const clock = new ManualClock();
    const [a, b] = ['a', 'b'].map((id) => upstreamOn(clock, id));
    const { attempt, calls } = scriptedAttempts({ a: untilAborted, b: async () => result('"0xb"') });
    const results: HedgeResult[] = [];
    const execution = executionOf([a!, b!], { clock });
    const outcome = hedged(clock, attempt, SETTINGS, results)(execution, new CallController().signal);
    await clock.advance(99);
    expect(calls.map((call) => call.upstream)).toEqual(['a']);
    await clock.advance(1);
    expect(await outcome).toMatchObject({ kind: 'result', upstream: 'b' });
    expect(calls.map((call) => call.upstream)).toEqual(['a', 'b']);
    expect(calls[0]!.signal.aborted).toBe(true);
    expect((calls[0]!.signal.reason as Error).message).toBe('another attempt answered');
    // The attempt that answered is over: nothing is aborted (and no abort event dispatched) for it.
    expect(calls[1]!.signal.aborted).toBe(false);
    expect(results).toEqual(['won']);
    // The cancelled attempt is not a failure of the call.
    expect(execution.attempts).toEqual([]);
    // The upstream that was too slow now ranks lower than before.
    expect(a!.health.currentErrorRate()).toBeGreaterThan(0);
  });

  it('sends nothing more when the first attempt answers within the delay', async () => {
    const clock = new ManualClock();
    const [a, b] = ['a', 'b'].map((id) => upstreamOn(clock, id));
    const { attempt, calls } = scriptedAttempts({ a: async () => result('"0xa"'), b: async () => result('"0xb"') });
    expect(await hedged(clock, attempt)(executionOf([a!, b!], { clock }), new CallController().signal)).toMatchObject({ upstream: 'a' });
    await clock.advance(1_000);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.signal.aborted).toBe(false);
    expect(clock.pending).toBe(0);
  });

  it('keeps waiting for the first attempt when the hedge fails, and takes its answer', async () => {
    const clock = new ManualClock();
    const [a, b] = ['a', 'b'].map((id) => upstreamOn(clock, id));
    const slowA = deferred<AttemptOutcome>();
    const { attempt } = scriptedAttempts({ a: () => slowA.promise, b: async () => failure('http_503') });
    const results: HedgeResult[] = [];
    const execution = executionOf([a!, b!], { clock });
    const outcome = hedged(clock, attempt, SETTINGS, results)(execution, new CallController().signal);
    await clock.advance(100);
    slowA.resolve(result('"0xa"'));
    expect(await outcome).toMatchObject({ kind: 'result', upstream: 'a' });
    expect(results).toEqual(['lost']);
    expect(execution.attempts).toEqual([{ upstream: 'b', reason: 'http_503' }]);
  });

  it('never hedges a write', async () => {
    const clock = new ManualClock();
    const [a, b] = ['a', 'b'].map((id) => upstreamOn(clock, id));
    const slowA = deferred<AttemptOutcome>();
    const { attempt, calls } = scriptedAttempts({ a: () => slowA.promise, b: async () => result('"0xb"') });
    const outcome = hedged(clock, attempt)(executionOf([a!, b!], { clock, method: 'eth_sendRawTransaction' }), new CallController().signal);
    await clock.advance(5_000);
    expect(calls).toHaveLength(1);
    slowA.resolve(result('"0xhash"'));
    expect(await outcome).toMatchObject({ upstream: 'a' });
  });

  it('takes its delay from a quantile of the upstream latencies, within bounds', () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    const settings: HedgeSettings = { quantile: 0.9, minDelayMs: 20, maxDelayMs: 400, maxHedges: 1 };
    expect(hedgeDelayMs(settings, upstream)).toBe(400); // no samples yet: the upper bound
    for (let ms = 1; ms <= 100; ms += 1) upstream.health.recordSuccess(ms);
    // The window keeps the last 128 samples: 1..100 ms, whose 90th percentile is 90 ms.
    expect(hedgeDelayMs(settings, upstream)).toBe(90);
    for (let n = 0; n < 128; n += 1) upstream.health.recordSuccess(2);
    expect(hedgeDelayMs(settings, upstream)).toBe(20);
    for (let n = 0; n < 128; n += 1) upstream.health.recordSuccess(2_000);
    expect(hedgeDelayMs(settings, upstream)).toBe(400);
    expect(hedgeDelayMs({ ...settings, delayMs: 75 }, upstream)).toBe(75);
  });
});

describe('null confirmation policy', () => {
  function confirming(attempt: AttemptFn, results: NullConfirmation[]) {
    return nullConfirmationPolicy(attempt, { appliesTo: (method) => method === 'eth_getBlockByHash', observe: (r) => results.push(r) });
  }

  it('replaces a null with the block another upstream has (contradicted)', async () => {
    const clock = new ManualClock();
    const [a, b, c] = ['a', 'b', 'c'].map((id) => upstreamOn(clock, id));
    const { attempt, calls } = scriptedAttempts({ a: async () => result('null'), b: async () => result('null'), c: async () => result('{"hash":"0x1"}') });
    const results: NullConfirmation[] = [];
    const execution = executionOf([a!, b!, c!], { clock });
    const outcome = await confirming(attempt, results)(failoverPolicy(clock)(attemptEachCandidate(attempt)))(execution, new CallController().signal);
    expect(outcome).toMatchObject({ kind: 'result', upstream: 'c' });
    expect((outcome as { resultBytes: Buffer }).resultBytes.toString()).toBe('{"hash":"0x1"}');
    expect(results).toEqual(['contradicted']);
    expect(calls.map((call) => call.upstream).sort()).toEqual(['a', 'b', 'c']);
  });

  it('believes null when no other upstream has the block (confirmed), including when one of them fails', async () => {
    const clock = new ManualClock();
    const [a, b, c] = ['a', 'b', 'c'].map((id) => upstreamOn(clock, id));
    const { attempt } = scriptedAttempts({ a: async () => result('null'), b: async () => result('null'), c: async () => failure('http_500') });
    const results: NullConfirmation[] = [];
    const execution = executionOf([a!, b!, c!], { clock });
    const outcome = await confirming(attempt, results)(failoverPolicy(clock)(attemptEachCandidate(attempt)))(execution, new CallController().signal);
    expect(outcome).toMatchObject({ kind: 'result', upstream: 'a' });
    expect(results).toEqual(['confirmed']);
    expect(execution.attempts).toEqual([{ upstream: 'c', reason: 'http_500' }]);
  });

  it('asks nobody else for non-null answers or other methods', async () => {
    const clock = new ManualClock();
    const [a, b] = ['a', 'b'].map((id) => upstreamOn(clock, id));
    const { attempt, calls } = scriptedAttempts({ a: async () => result('null'), b: async () => result('"x"') });
    const results: NullConfirmation[] = [];
    const policy = confirming(attempt, results)(attemptEachCandidate(attempt));
    await policy(executionOf([a!, b!], { clock, method: 'eth_getTransactionByHash' }), new CallController().signal);
    expect(calls).toHaveLength(1);
    expect(results).toEqual([]);
  });
});

describe('traced policy', () => {
  /** A trace that records each attempt's facts, outcome and the headers it was given to send. */
  function recordingTrace() {
    const attempts: Array<{ facts: AttemptFacts; outcome?: string }> = [];
    const trace: RequestTrace = {
      attempt(facts) {
        const entry: { facts: AttemptFacts; outcome?: string } = { facts };
        attempts.push(entry);
        return { headers: { traceparent: `tp-${facts.attempt}` }, end: (outcome) => void (entry.outcome = outcome.kind === 'failure' ? outcome.reason : outcome.kind) };
      },
    };
    return { trace, attempts };
  }

  it('numbers attempts, gives a failover its retry reason, a confirmation its flag, and each attempt its own headers', async () => {
    const clock = new ManualClock();
    const [a, b, c] = ['a', 'b', 'c'].map((id) => upstreamOn(clock, id));
    const sentHeaders: Array<[string, unknown]> = [];
    const { attempt } = scriptedAttempts({ a: async () => failure('http_500'), b: async () => result('null'), c: async () => result('null') });
    const traced = tracedPolicy('eth')((upstream, execution, signal) => {
      sentHeaders.push([upstream.id, execution.upstreamHeaders?.traceparent]);
      return attempt(upstream, execution, signal);
    });
    const { trace, attempts } = recordingTrace();
    const execution = executionOf([a!, b!, c!], { clock, trace });
    const policy = nullConfirmationPolicy(traced, { appliesTo: () => true })(failoverPolicy(clock)(attemptEachCandidate(traced)));
    const outcome = await policy(execution, new CallController().signal);
    expect(outcome).toMatchObject({ kind: 'result', upstream: 'b' });
    expect(attempts.map(({ facts, outcome: ended }) => [facts.upstream, facts.attempt, facts.hedge, facts.confirmation, facts.retryReason, ended])).toEqual([
      ['a', 1, false, false, undefined, 'http_500'],
      ['b', 2, false, false, 'http_500', 'result'],
      // b's null is confirmed with every other upstream, the one that failed included.
      ['a', 3, false, true, undefined, 'http_500'],
      ['c', 4, false, true, undefined, 'result'],
    ]);
    expect(sentHeaders).toEqual([['a', 'tp-1'], ['b', 'tp-2'], ['a', 'tp-3'], ['c', 'tp-4']]);
    // The execution itself never carries an attempt's headers: each attempt had its own.
    expect(execution.upstreamHeaders).toBeUndefined();
  });

  it('marks the copy a hedge starts beside a running attempt', async () => {
    const clock = new ManualClock();
    const [a, b] = ['a', 'b'].map((id) => upstreamOn(clock, id));
    const { attempt } = scriptedAttempts({ a: untilAborted, b: async () => result('"0x1"') });
    const traced = tracedPolicy('eth')(attempt);
    const { trace, attempts } = recordingTrace();
    const settings: HedgeSettings = { delayMs: 10, quantile: 0.9, minDelayMs: 1, maxDelayMs: 100, maxHedges: 1 };
    const pending = hedgePolicy(settings, clock, { isWrite: () => false })(attemptEachCandidate(traced))(executionOf([a!, b!], { clock, trace }), new CallController().signal);
    await clock.advance(10);
    expect(await pending).toMatchObject({ kind: 'result', upstream: 'b' });
    await until(() => attempts.every((entry) => entry.outcome !== undefined), 'both attempt spans to end');
    expect(attempts.map(({ facts, outcome: ended }) => [facts.upstream, facts.attempt, facts.hedge, ended])).toEqual([
      ['a', 1, false, 'cancelled'],
      ['b', 2, true, 'result'],
    ]);
  });

  it('passes an untraced call straight through', async () => {
    const clock = new ManualClock();
    const [a] = ['a'].map((id) => upstreamOn(clock, id));
    const seen: Execution[] = [];
    const execution = executionOf([a!], { clock });
    await attemptEachCandidate(tracedPolicy('eth')(async (_upstream, given) => {
      seen.push(given);
      return result('"0x1"');
    }))(execution, new CallController().signal);
    expect(seen).toEqual([execution]);
    expect(execution.attemptsStarted).toBe(0);
  });
});

describe('result check policy', () => {
  it('turns a result that fails its check into a failure with the check as detail', async () => {
    const clock = new ManualClock();
    const upstream = upstreamOn(clock, 'a');
    const { attempt } = scriptedAttempts({ a: async () => ({ ...result('{"x":1}'), result: { x: 1 } }) });
    const checked = resultCheckPolicy('unverified_block')(attempt);
    const bad = await checked(upstream, executionOf([upstream], { clock, check: async () => 'transactions root mismatch' }), new CallController().signal);
    expect(bad).toEqual({ kind: 'failure', reason: 'unverified_block', detail: 'transactions root mismatch', timedOut: false, durationMs: 10 });
    const good = await checked(upstream, executionOf([upstream], { clock, check: () => undefined }), new CallController().signal);
    expect(good.kind).toBe('result');
  });
});

describe('upstream health', () => {
  it('lets a failure weigh on the rank for seconds, then fade', async () => {
    const clock = new ManualClock();
    const health = new UpstreamHealth(BREAKER, clock.now);
    health.recordSuccess(20);
    const healthy = health.score();
    health.recordFailure();
    expect(health.score()).toBeGreaterThan(2 * healthy);
    await clock.advance(6 * HEALTH_HALF_LIFE_MS);
    health.recordSuccess(20);
    expect(health.score()).toBeLessThan(1.1 * (20 + 1));
  });

  it('lets an old latency estimate fade, so an upstream slow long ago is tried again', async () => {
    const clock = new ManualClock();
    const health = new UpstreamHealth(BREAKER, clock.now);
    health.recordSuccess(800);
    expect(health.currentLatencyMs()).toBe(800);
    await clock.advance(HEALTH_HALF_LIFE_MS);
    expect(health.currentLatencyMs()).toBeCloseTo(400, 5);
  });
});

describe('selection', () => {
  const SELECTION: SelectionSettings = { strategy: 'fastest', maxBlockLag: 5, headMaxAgeMs: 10_000, trialsByRequests: false };

  it('ranks by latency, leaves open circuits out, puts lagging upstreams last', async () => {
    const clock = new ManualClock();
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((id) => upstreamOn(clock, id));
    a!.health.recordSuccess(50);
    b!.health.recordSuccess(10);
    c!.health.recordSuccess(30);
    d!.health.recordSuccess(1);
    for (let n = 0; n < BREAKER.failureThreshold; n += 1) d!.health.recordFailure();
    const selector = createSelector([a!, b!, c!, d!], SELECTION, clock.now);
    expect(selector.order().map((u) => u.id)).toEqual(['b', 'c', 'a']);

    b!.health.recordHead(100);
    c!.health.recordHead(120);
    a!.health.recordHead(118);
    expect(selector.bestHead()).toBe(120);
    expect(selector.order().map((u) => u.id)).toEqual(['c', 'a', 'b']);
    // A head nobody refreshed for too long no longer counts.
    await clock.advance(10_001);
    expect(selector.bestHead()).toBeUndefined();
  });

  it('puts an upstream whose cooldown is over first when requests carry the trials', async () => {
    const clock = new ManualClock();
    const [a, b] = ['a', 'b'].map((id) => upstreamOn(clock, id));
    a!.health.recordSuccess(10);
    b!.health.recordSuccess(10);
    for (let n = 0; n < BREAKER.failureThreshold; n += 1) a!.health.recordFailure();
    const selector = createSelector([a!, b!], { ...SELECTION, trialsByRequests: true }, clock.now);
    expect(selector.order().map((u) => u.id)).toEqual(['b']);
    await clock.advance(BREAKER.cooldownMs);
    expect(selector.order().map((u) => u.id)).toEqual(['a', 'b']);
  });

  it('spreads first attempts by weight under `weighted`', () => {
    const clock = new ManualClock();
    const [a, b] = [upstreamOn(clock, 'a', { weight: 3 }), upstreamOn(clock, 'b', { weight: 1 })];
    let draw = 0;
    const points = [0.1, 0.5, 0.74, 0.76, 0.99];
    const selector = createSelector([a, b], { ...SELECTION, strategy: 'weighted' }, clock.now, () => points[draw++ % points.length]!);
    const firsts = points.map(() => selector.order()[0]!.id);
    expect(firsts).toEqual(['a', 'a', 'a', 'b', 'b']);
    expect(selector.order()).toHaveLength(2);
  });

  it('leaves an upstream that just failed or was slow out of the weighted draw until its errors fade', async () => {
    const clock = new ManualClock();
    const [a, b] = [upstreamOn(clock, 'a'), upstreamOn(clock, 'b')];
    a.health.recordSuccess(5);
    b.health.recordSuccess(5);
    for (let n = 0; n < 3; n += 1) a.health.recordSlow(); // error rate 0.49: 2% of its share left
    const points = [0.05, 0.3, 0.6, 0.95];
    let draw = 0;
    const selector = createSelector([a, b], { ...SELECTION, strategy: 'weighted' }, clock.now, () => points[draw++ % points.length]!);
    expect(points.map(() => selector.order()[0]!.id)).toEqual(['b', 'b', 'b', 'b']);
    // Two half-lives later its rate is 0.12: three quarters of its weight are back. The draw
    // walks the ranking (b first, its score is lower): b covers [0, 1/1.76), a the rest.
    await clock.advance(2 * HEALTH_HALF_LIFE_MS);
    expect(points.map(() => selector.order()[0]!.id)).toEqual(['b', 'b', 'a', 'a']);
  });
});

describe('health prober', () => {
  it('probes on its interval, records heads and latency, and takes the trial of an open circuit', async () => {
    const clock = new ManualClock();
    const [a, b] = ['a', 'b'].map((id) => upstreamOn(clock, id));
    for (let n = 0; n < BREAKER.failureThreshold; n += 1) b!.health.recordFailure();
    const probed: string[] = [];
    let head = 0x10;
    const prober = startHealthProber([a!, b!], { intervalMs: 500, timeoutMs: 100, method: 'eth_blockNumber' }, clock, async (upstream, method) => {
      probed.push(`${upstream.id}:${method}`);
      return result(`"0x${(head++).toString(16)}"`, 3);
    });
    await clock.advance(499);
    expect(probed).toEqual([]);
    await clock.advance(1);
    // b's circuit is still cooling down: only a is probed.
    expect(probed).toEqual(['a:eth_blockNumber']);
    expect(a!.health.head).toBe(0x10);
    await clock.advance(500);
    // b's cooldown (1 s) is over: the probe is its trial and closes the circuit.
    expect(probed.slice(1).sort()).toEqual(['a:eth_blockNumber', 'b:eth_blockNumber']);
    expect(b!.health.circuit()).toBe('closed');
    expect(b!.health.head).toBeGreaterThan(0x10);
    prober.stop();
    await clock.advance(5_000);
    expect(probed).toHaveLength(3);
  });

  it('reads hex and decimal heads, nothing else', () => {
    expect(headOf(Buffer.from('"0x1b4"'))).toBe(0x1b4);
    expect(headOf(Buffer.from('312345678'))).toBe(312345678);
    expect(headOf(Buffer.from('"ok"'))).toBeUndefined();
    expect(headOf(Buffer.from('{"slot":1}'))).toBeUndefined();
  });
});

