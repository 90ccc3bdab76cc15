// An upstream's request budget alone, on a manual clock: the sliding window, the cut on a
// rate-limited answer and the recovery after it, the shared window consulted after the local
// one; then the budget policy (move on, wait within the deadline, give up as over_budget), the
// `cheapest` ranking, and the 429 the client gets when every upstream is at its limit.

import { describe, expect, it } from 'vitest';
import { forwardOutcomeOf } from '../src/routing/call-outcome.js';
import { budgetPolicy, isRateLimited, OVER_BUDGET, WAIT_MARGIN_MS } from '../src/routing/policies/budget.js';
import { failoverPolicy } from '../src/routing/policies/failover.js';
import { attemptEachCandidate, NEVER_ABORTED, type AttemptFn, type Execution } from '../src/routing/policies/types.js';
import { CallController } from '../src/routing/abort-signals.js';
import { createSelector } from '../src/routing/selection.js';
import { BUDGET_COUNTED_MS, BUDGET_SLICE_MS, BUDGET_WINDOW_MS, UpstreamBudget } from '../src/routing/upstream-budget.js';
import { upstreamPriceOf } from '../src/routing/upstream-price.js';
import { UpstreamHealth } from '../src/routing/upstream-health.js';
import { RATE_LIMITED, type AttemptOutcome, type RoutedUpstream } from '../src/routing/upstream.js';
import { parseConfig } from '../src/config/load.js';
import { createForwarder, type Forwarder } from '../src/routing/forward.js';
import { ManualClock, settle } from './helpers/manual-clock.js';
import { useScriptedUpstreams } from './helpers/scripted-upstream.js';

const ok = (): AttemptOutcome => ({ kind: 'result', resultBytes: Buffer.from('"0x1"'), durationMs: 1 });
const limited = (): AttemptOutcome => ({ kind: 'failure', reason: RATE_LIMITED, timedOut: false, durationMs: 1 });

function upstreamOn(clock: ManualClock, id: string): RoutedUpstream {
  return { id, health: new UpstreamHealth({ failureThreshold: 3, cooldownMs: 1_000 }, clock.now), timeoutMs: 500, weight: 1 };
}

function executionOf(candidates: RoutedUpstream[], deadline: number): Execution {
  let next = 0;
  return {
    method: 'eth_call',
    deadline,
    trace: undefined,
    attemptsStarted: 0,
    attempts: [],
    running: new Set(),
    check: undefined,
    paramsFor: () => [],
    takeCandidate: () => candidates[next++],
    peekCandidate: () => candidates[next],
    othersThan: () => [],
  };
}

/** Takes permits until one is refused; returns how many were taken. */
async function takeAll(budget: UpstreamBudget): Promise<number> {
  let taken = 0;
  while ((await budget.take()) === 0) taken += 1;
  return taken;
}

/** Takes `count` permits evenly over (just under) one second, as a steady load would, each of them granted. */
async function spendOverASecond(budget: UpstreamBudget, clock: ManualClock, count: number): Promise<void> {
  for (let i = 0; i < count; i += 1) {
    if (i > 0) await clock.advance(BUDGET_WINDOW_MS / count);
    expect(await budget.take()).toBe(0);
  }
}

describe('UpstreamBudget', () => {
  it('holds a sliding window, spread over its slices: never more than the limit in any second, nor a fifth of it in any tenth', async () => {
    const clock = new ManualClock();
    const start = clock.now();
    const budget = new UpstreamBudget({ requestsPerSecond: 20, scope: 'eth/a' }, clock);
    for (let slice = 0; slice < 5; slice += 1) {
      expect(await takeAll(budget)).toBe(4);
      // The slice is full; after the fifth, the window too (until the first four leave it).
      expect(await budget.take()).toBe(slice < 4 ? BUDGET_SLICE_MS : BUDGET_COUNTED_MS - 4 * BUDGET_SLICE_MS);
      expect(budget.hasRoom()).toBe(slice < 4);
      await clock.advance(BUDGET_SLICE_MS);
    }
    // 20 permits by start + 400: the window is full until the first four leave it, at start + 1100
    // (counted over a second and the margin for delays on the way).
    await clock.advance(start + BUDGET_COUNTED_MS - 1 - clock.now());
    expect(await budget.take()).toBe(1);
    await clock.advance(1);
    expect(budget.hasRoom()).toBe(true);
    expect(await takeAll(budget)).toBe(4);
  });

  it('cuts to 90% of what it sent in the last second on a rate-limited answer, once per window, then recovers 2% a second up to the declared limit', async () => {
    const clock = new ManualClock();
    const budget = new UpstreamBudget({ requestsPerSecond: 100, scope: 'eth/a' }, clock);
    await spendOverASecond(budget, clock, 100);
    budget.rateLimited();
    expect(budget.limit()).toBe(90);
    // Answers to calls sent before the cut arrive after it: they do not cut again.
    budget.rateLimited();
    expect(budget.limit()).toBe(90);
    await clock.advance(BUDGET_WINDOW_MS);
    expect(budget.limit()).toBe(92);
    await spendOverASecond(budget, clock, 92);
    expect(budget.limit()).toBe(92);
    await clock.advance(BUDGET_WINDOW_MS);
    expect(budget.limit()).toBe(94);
    await clock.advance(BUDGET_WINDOW_MS * 3);
    expect(budget.limit()).toBe(100);
    await clock.advance(BUDGET_WINDOW_MS * 10);
    expect(budget.limit()).toBe(100);
  });

  it('does not cut on a rate-limited answer while it sent less than half its limit in the last second (the answer is not about our rate)', async () => {
    const clock = new ManualClock();
    const budget = new UpstreamBudget({ requestsPerSecond: 100, scope: 'eth/a' }, clock);
    await spendOverASecond(budget, clock, 49);
    budget.rateLimited();
    expect(budget.limit()).toBe(100);
    expect(await budget.take()).toBe(0);
    budget.rateLimited();
    expect(budget.limit()).toBe(45);
  });

  it('learns a limit for an upstream that declared none, and forgets it once it has doubled without another rate-limited answer', async () => {
    const clock = new ManualClock();
    const budget = new UpstreamBudget({ requestsPerSecond: undefined, scope: 'eth/a' }, clock);
    for (let i = 0; i < 40; i += 1) expect(await budget.take()).toBe(0);
    expect(budget.limit()).toBeUndefined();
    budget.rateLimited();
    expect(budget.limit()).toBe(36);
    expect(await budget.take()).toBeGreaterThan(0);
    await clock.advance(BUDGET_WINDOW_MS);
    expect(budget.limit()).toBe(37);
    await clock.advance(BUDGET_WINDOW_MS * 34);
    expect(budget.limit()).toBe(71);
    await clock.advance(BUDGET_WINDOW_MS);
    expect(budget.limit()).toBeUndefined();
  });

  it('serves callers that wait in line, in order, one permit at a time; one that cannot start in time, or aborts, leaves the line', async () => {
    const clock = new ManualClock();
    const start = clock.now();
    const budget = new UpstreamBudget({ requestsPerSecond: 1, scope: 'eth/a' }, clock);
    expect(await budget.take()).toBe(0);
    const order: string[] = [];
    const aborted = new CallController();
    const line = [
      budget.waitForPermit(start + 5_000, new CallController().signal).then((result) => order.push(`first ${result}`)),
      budget.waitForPermit(start + 500, new CallController().signal).then((result) => order.push(`short deadline ${result}`)),
      budget.waitForPermit(start + 5_000, aborted.signal).then((result) => order.push(`aborted ${result}`)),
      budget.waitForPermit(start + 5_000, new CallController().signal).then((result) => order.push(`last ${result}`)),
    ];
    aborted.abort();
    await clock.advance(500);
    expect(order).toEqual(['aborted aborted', 'short deadline too-late']);
    await clock.advance(BUDGET_COUNTED_MS - 500);
    expect(order).toEqual(['aborted aborted', 'short deadline too-late', 'first taken']);
    await clock.advance(BUDGET_COUNTED_MS);
    await Promise.all(line);
    expect(order).toEqual(['aborted aborted', 'short deadline too-late', 'first taken', 'last taken']);
  });

  it("stops listening on a caller's signal once the caller leaves the line, and waits under the shared never-aborted signal too", async () => {
    const clock = new ManualClock();
    const start = clock.now();
    const budget = new UpstreamBudget({ requestsPerSecond: 1, scope: 'eth/a' }, clock);
    expect(await budget.take()).toBe(0);
    const caller = new CallController();
    const line = Array.from({ length: 12 }, (_, index) => budget.waitForPermit(start + 500, index % 2 === 0 ? caller.signal : NEVER_ABORTED));
    expect(caller.listening).toBe(6);
    await clock.advance(500);
    expect(await Promise.all(line)).toEqual(Array.from({ length: 12 }, () => 'too-late'));
    expect(caller.listening).toBe(0);
  });

  it('asks the shared window only when its own has room, and counts alone while the shared one is unreachable', async () => {
    const clock = new ManualClock();
    const asked: Array<[string, number, number, number, number]> = [];
    let sharedWait = 0;
    let sharedDown = false;
    const errors: unknown[] = [];
    const budget = new UpstreamBudget(
      {
        requestsPerSecond: 30,
        scope: 'eth/a',
        shared: {
          async takeUpstreamPermit(scope, limit, windowMs, sliceMs, sliceLimit) {
            asked.push([scope, limit, windowMs, sliceMs, sliceLimit]);
            if (sharedDown) throw new Error('connection lost');
            return sharedWait;
          },
        },
        onSharedError: (error) => errors.push(error),
      },
      clock,
    );
    expect(await budget.take()).toBe(0);
    sharedWait = 25; // another replica spent the rest of this slice
    expect(await budget.take()).toBe(25);
    sharedWait = 0;
    sharedDown = true;
    // The slice holds 6: one taken, five more while the shared window is unreachable, then its own window says no.
    expect(await takeAll(budget)).toBe(5);
    expect(asked).toEqual(Array.from({ length: 7 }, () => ['eth/a', 30, BUDGET_COUNTED_MS, BUDGET_SLICE_MS, 6]));
    expect(errors).toHaveLength(5);
  });
});

describe('the budget policy', () => {
  it('moves a call on to the next candidate when one has no budget, and cuts the limit of an upstream that answers "rate limited"', async () => {
    const clock = new ManualClock();
    const [a, b] = [upstreamOn(clock, 'a'), upstreamOn(clock, 'b')];
    const budgets = new Map([
      ['a', new UpstreamBudget({ requestsPerSecond: 1, scope: 'eth/a' }, clock)],
      ['b', new UpstreamBudget({ requestsPerSecond: 100, scope: 'eth/b' }, clock)],
    ]);
    const sent: string[] = [];
    let answer = ok;
    const send: AttemptFn = async (upstream) => (sent.push(upstream.id), answer());
    const overBudget: string[] = [];
    const attempt = budgetPolicy((id) => budgets.get(id), clock, { overBudget: (id) => overBudget.push(id) })(send);
    const call = failoverPolicy(clock)(attemptEachCandidate(attempt));

    expect((await call(executionOf([a!, b!], clock.now() + 5_000), new CallController().signal)).kind).toBe('result');
    const second = executionOf([a!, b!], clock.now() + 5_000);
    expect(await call(second, new CallController().signal)).toMatchObject({ kind: 'result', upstream: 'b' });
    expect(second.attempts).toEqual([{ upstream: 'a', reason: OVER_BUDGET }]);
    expect(sent).toEqual(['a', 'b']);
    expect(overBudget).toEqual(['a']);

    // 50 calls in this second, the last one answered "rate limited": b's limit is cut to 45.
    for (let i = 0; i < 48; i += 1) {
      await clock.advance(11);
      await call(executionOf([b!], clock.now() + 5_000), new CallController().signal);
    }
    await clock.advance(11);
    answer = limited;
    expect((await call(executionOf([b!], clock.now() + 5_000), new CallController().signal)).kind).toBe('failed');
    expect(isRateLimited(limited())).toBe(true);
    expect(budgets.get('b')!.limit()).toBe(45);
  });

  it('tries an upstream skipped for want of budget again after the others fail, waiting for its permit if the deadline allows', async () => {
    const clock = new ManualClock();
    const [a, b] = [upstreamOn(clock, 'a'), upstreamOn(clock, 'b')];
    const budgetOfA = new UpstreamBudget({ requestsPerSecond: 1, scope: 'eth/a' }, clock);
    const sent: Array<[string, number]> = [];
    const send: AttemptFn = async (upstream) => {
      sent.push([upstream.id, clock.now()]);
      return upstream.id === 'b' ? { kind: 'failure', reason: 'http_500', timedOut: false, durationMs: 1 } : ok();
    };
    const call = failoverPolicy(clock)(attemptEachCandidate(budgetPolicy((id) => (id === 'a' ? budgetOfA : undefined), clock)(send)));
    const start = clock.now();
    expect(await budgetOfA.take()).toBe(0);
    let deferredTo: RoutedUpstream[] = [];
    const execution = { ...executionOf([a, b], start + 5_000) };
    const candidates = [a, b];
    let next = 0;
    execution.takeCandidate = () => (next < candidates.length ? candidates[next++] : deferredTo.shift());
    execution.peekCandidate = () => (next < candidates.length ? candidates[next] : deferredTo[0]);
    execution.defer = (upstream) => (deferredTo.includes(upstream) ? false : (deferredTo = [...deferredTo, upstream], true));
    const answer = call(execution, new CallController().signal);
    await settle();
    // a skipped (no permit), b failed, a again: now the last, it waits for its permit.
    expect(sent).toEqual([['b', start]]);
    await clock.advance(BUDGET_COUNTED_MS);
    expect(await answer).toMatchObject({ kind: 'result', upstream: 'a' });
    expect(sent).toEqual([['b', start], ['a', start + BUDGET_COUNTED_MS]]);
    expect(execution.attempts).toEqual([{ upstream: 'a', reason: OVER_BUDGET }, { upstream: 'b', reason: 'http_500' }]);
  });

  it('waits on its last candidate for a permit within the deadline, and fails as over_budget, with the client\'s 429, when the deadline comes first', async () => {
    const clock = new ManualClock();
    const a = upstreamOn(clock, 'a');
    const budget = new UpstreamBudget({ requestsPerSecond: 1, scope: 'eth/a' }, clock);
    const sent: number[] = [];
    const attempt = budgetPolicy(() => budget, clock)(async () => (sent.push(clock.now()), ok()));
    const call = attemptEachCandidate(attempt);
    const started = clock.now();
    expect((await call(executionOf([a], started + 5_000), new CallController().signal)).kind).toBe('result');

    const waiting = call(executionOf([a], started + 5_000), new CallController().signal);
    await settle();
    expect(sent).toEqual([started]);
    await clock.advance(BUDGET_COUNTED_MS);
    expect((await waiting).kind).toBe('result');
    expect(sent).toEqual([started, started + BUDGET_COUNTED_MS]);

    const late = executionOf([a], clock.now() + 500);
    expect((await call(late, new CallController().signal)).kind).toBe('failed');
    expect(late.attempts).toEqual([{ upstream: 'a', reason: OVER_BUDGET }]);
    const outcome = forwardOutcomeOf({ kind: 'failed' }, late, [a], clock.now());
    expect(outcome.kind).toBe('failed');
    if (outcome.kind !== 'failed') return;
    expect(outcome.error.code).toBe('TG_ERR_UPSTREAM_BUDGET');
    expect(outcome.error.headers).toEqual({ 'retry-after': '1' });
    expect(outcome.error.data).toEqual({ reason: 'upstream_budget', attempts: [{ upstream: 'a', reason: OVER_BUDGET }] });
    expect(sent).toHaveLength(2);
  });
});

describe('selection: cheapest', () => {
  it('puts the cheapest healthy upstream with room first for each method, ties by score, the full or failing ones last', async () => {
    const clock = new ManualClock();
    const [a, b, c] = [upstreamOn(clock, 'a'), upstreamOn(clock, 'b'), upstreamOn(clock, 'c')];
    const prices = new Map([
      ['a', upstreamPriceOf({ units: { eth_call: 10, '*': 50 } })!],
      ['b', upstreamPriceOf({ units: { eth_getLogs: 20, '*': 30 } })!],
      ['c', upstreamPriceOf({ units: { '*': 30 } })!],
    ]);
    const room = new Map([['a', true], ['b', true], ['c', true]]);
    // c answers faster than b: equal prices go by score.
    b!.health.recordSuccess(50);
    c!.health.recordSuccess(5);
    a!.health.recordSuccess(80);
    const selector = createSelector(
      [a!, b!, c!],
      { strategy: 'cheapest', maxBlockLag: 5, headMaxAgeMs: 30_000, trialsByRequests: false, unitsOf: (u, m) => prices.get(u.id)?.unitsOf(m), hasRoom: (u) => room.get(u.id)! },
      clock.now,
    );
    const ids = (method: string) => selector.order(method).map((upstream) => upstream.id);
    expect(ids('eth_call')).toEqual(['a', 'c', 'b']);
    expect(ids('eth_getLogs')).toEqual(['b', 'c', 'a']);
    expect(ids('eth_blockNumber')).toEqual(['c', 'b', 'a']);
    room.set('a', false);
    expect(ids('eth_call')).toEqual(['c', 'b', 'a']);
    room.set('a', true);
    for (let i = 0; i < 3; i += 1) a!.health.recordFailure();
    expect(ids('eth_call')).toEqual(['c', 'b']);
  });

  it('prices by a built-in provider table or an operator map, own keys only', () => {
    const alchemy = upstreamPriceOf({ units: 'alchemy', usdPerMillion: 0.45 })!;
    expect(alchemy.unitsOf('eth_call')).toBeGreaterThan(0);
    expect(alchemy.usdPerMillion).toBe(0.45);
    const map = upstreamPriceOf({ units: { eth_call: 7, '*': 3 } })!;
    expect([map.unitsOf('eth_call'), map.unitsOf('eth_getLogs'), map.unitsOf('constructor'), map.unitsOf('__proto__')]).toEqual([7, 3, 3, 3]);
    expect(upstreamPriceOf(undefined)).toBeUndefined();
  });
});

describe("a worker's share of a declared limit", () => {
  const scripted = useScriptedUpstreams();

  it('holds 1/N of rateLimit in each of N processes that cannot share windows (SQLite), at least one call a second', async () => {
    const upstream = await scripted({ kind: 'result', result: '0x1' });
    const clock = new ManualClock();
    const network = (requestsPerSecond: number) =>
      parseConfig(
        { networks: [{ id: 'eth', kind: 'evm', chainId: 1, baseUrls: ['*/eth'], requestTimeoutMs: 500, healthCheck: { intervalMs: 0 }, upstreams: [{ id: 'a', url: upstream.url, rateLimit: { requestsPerSecond } }] }] },
        {},
        'test config',
      ).networks[0]!;
    const sentWithin = async (forwarder: Forwarder, calls: number): Promise<number> => {
      const before = upstream.calls.length;
      // A deadline too close to wait for a permit (a wait must leave WAIT_MARGIN_MS): a call without one fails at once.
      for (let n = 0; n < calls; n += 1) await forwarder.forward({ kind: 'pass-through', method: 'eth_blockNumber', cost: 1, params: [] }, clock.now() + WAIT_MARGIN_MS / 2);
      return upstream.calls.length - before;
    };
    // Four workers, 20 a second declared: each takes 5 in a window (one slice holds a fifth of its 5: 1).
    const quarter = createForwarder(network(20), { clock, rateLimitShare: 1 / 4 });
    let sent = 0;
    for (let slice = 0; slice < 10; slice += 1) {
      sent += await sentWithin(quarter, 3);
      await clock.advance(BUDGET_SLICE_MS);
    }
    expect(sent).toBe(5);
    await quarter.close();
    // A limit smaller than the group still lets each worker send one call a second.
    const tiny = createForwarder(network(2), { clock, rateLimitShare: 1 / 4 });
    expect(await sentWithin(tiny, 3)).toBe(1);
    await tiny.close();
  });
});
