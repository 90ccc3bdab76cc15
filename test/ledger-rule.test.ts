// The credit rule alone (src/metering/ledger-rule.ts): quota, key cap, throughput bucket,
// settle, refund, a reservation that is gone, the UTC day boundary. No I/O: the counters live in
// maps here, and time is a clock the test moves, injected into the meter as the gateway injects
// its own. The store contract suite runs the same rule through both real drivers.

import { describe, expect, it } from 'vitest';
import { decideLedger, refill, type Bucket, type LedgerCounters, type LedgerDeltas, type Reservation } from '../src/metering/ledger-rule.js';
import { PartialLedgerError, typedResults, type ChargeSubject, type Ledger, type LedgerOp } from '../src/metering/ledger.js';
import { createMeter, utcDay } from '../src/metering/meter.js';

/** A ledger over maps: what a driver is reduced to once the rule is apart (load, decide, commit). */
function memoryLedger() {
  const teamDays = new Map<string, number>();
  const keyDays = new Map<string, number>();
  const buckets = new Map<string, Bucket>();
  const reservations = new Map<string, Reservation>();
  const usage = new Map<string, { credits: number; requests: number }>();
  const reads: string[] = [];
  const counters: LedgerCounters = {
    teamUsed: (teamId, day) => (reads.push(`team ${teamId} ${day}`), teamDays.get(`${teamId} ${day}`) ?? 0),
    keyUsed: (keyId, day) => (reads.push(`key ${keyId} ${day}`), keyDays.get(`${keyId} ${day}`) ?? 0),
    bucket: (teamId) => (reads.push(`bucket ${teamId}`), buckets.get(teamId)),
    reservation: (id) => (reads.push(`reservation ${id}`), reservations.get(id)),
  };
  const commit = (deltas: LedgerDeltas): void => {
    const add = (map: Map<string, number>, key: string, delta: number) => map.set(key, (map.get(key) ?? 0) + delta);
    for (const { id, day, delta } of deltas.teamDays) add(teamDays, `${id} ${day}`, delta);
    for (const { id, day, delta } of deltas.keyDays) add(keyDays, `${id} ${day}`, delta);
    for (const row of deltas.usage) {
      const key = `${row.day} ${row.keyId} ${row.method}`;
      const before = usage.get(key) ?? { credits: 0, requests: 0 };
      usage.set(key, { credits: before.credits + row.credits, requests: before.requests + row.requests });
    }
    for (const { teamId, tokens, at } of deltas.buckets) buckets.set(teamId, { tokens, at });
    for (const row of deltas.reserved) reservations.set(row.id, row);
    for (const id of deltas.ended) reservations.delete(id);
  };
  const ledger: Ledger = {
    async applyLedger(ops) {
      const { results, deltas } = decideLedger(ops, counters);
      commit(deltas);
      return typedResults(ops, results);
    },
    async recoverReservations() {
      throw new Error('not part of the rule');
    },
  };
  return { ledger, teamDays, keyDays, buckets, reservations, usage, reads, counters };
}

/** Time as the test says: it moves only when advanced. */
function testClock(startMs: number) {
  let nowMs = startMs;
  return {
    now: () => nowMs,
    advance(ms: number) {
      nowMs += ms;
    },
  };
}

const START = Date.UTC(2030, 0, 15, 12, 0, 0);

function setup(limits: { dailyCredits?: number; keyCap?: number | null; creditsPerSecond?: number | null } = {}, startMs = START) {
  const clock = testClock(startMs);
  const memory = memoryLedger();
  const meter = createMeter(memory.ledger, { now: clock.now });
  /** A call of `cost` credits on the clock's current UTC day. */
  const subject = (cost = 80, over: Partial<ChargeSubject> = {}): ChargeSubject => ({
    teamId: 'team_a',
    keyId: 'key_a',
    network: 'eth',
    method: 'eth_getBlockByHash',
    cost,
    day: utcDay(clock.now()),
    teamDailyCredits: limits.dailyCredits ?? 1_000_000,
    keyDailyCap: limits.keyCap ?? null,
    teamCreditsPerSecond: limits.creditsPerSecond ?? null,
    ...over,
  });
  return { clock, meter, subject, ...memory };
}

describe('daily quota and key cap', () => {
  it('admits up to the team quota exactly, refuses with scope team, limit and used, and charges nothing for a refusal', async () => {
    const { meter, subject, usage } = setup({ dailyCredits: 200 });
    expect(await meter.charge(subject())).toEqual({ ok: true, teamUsed: 80 });
    expect(await meter.charge(subject())).toEqual({ ok: true, teamUsed: 160 });
    expect(await meter.charge(subject())).toEqual({ ok: false, reason: 'daily_credits_exhausted', scope: 'team', limit: 200, used: 160, teamUsed: 160 });
    // The last 40 credits still buy a call that costs 40.
    expect(await meter.charge(subject(40))).toEqual({ ok: true, teamUsed: 200 });
    expect(await meter.peek('team_a', utcDay(START))).toEqual({ ok: true, teamUsed: 200 });
    expect([...usage.values()].reduce((sum, row) => sum + row.credits, 0)).toBe(200);
  });

  it("refuses over the key's cap with scope key; the team's quota is reported first when both refuse", async () => {
    const capped = setup({ dailyCredits: 10_000, keyCap: 100 });
    expect(await capped.meter.charge(capped.subject())).toEqual({ ok: true, teamUsed: 80 });
    expect(await capped.meter.charge(capped.subject())).toEqual({ ok: false, reason: 'daily_credits_exhausted', scope: 'key', limit: 100, used: 80, teamUsed: 80 });
    // Another key of the team is not bound by this key's cap.
    expect(await capped.meter.charge(capped.subject(80, { keyId: 'key_b', keyDailyCap: null }))).toEqual({ ok: true, teamUsed: 160 });

    const both = setup({ dailyCredits: 60, keyCap: 50 });
    expect(await both.meter.charge(both.subject())).toMatchObject({ ok: false, scope: 'team', limit: 60, used: 0 });
  });

  it("reads a key's day total only when the key has a cap", async () => {
    const { meter, subject, reads, keyDays } = setup();
    await meter.charge(subject());
    expect(reads).toEqual([`team team_a ${utcDay(START)}`]);
    // The total is still kept, for a cap set later.
    expect(keyDays.get(`key_a ${utcDay(START)}`)).toBe(80);
  });
});

describe('throughput bucket', () => {
  it('starts full (one second of credits), refuses with the time to wait, refills continuously', async () => {
    const { meter, subject, clock } = setup({ creditsPerSecond: 100 });
    expect(await meter.charge(subject())).toEqual({ ok: true, teamUsed: 80 });
    // 20 left; 80 needs 60 more: 600 ms at 100 credits/s.
    expect(await meter.charge(subject())).toEqual({ ok: false, reason: 'rate_limited', retryAfterMs: 600, teamUsed: 80 });
    clock.advance(300);
    expect(await meter.charge(subject())).toEqual({ ok: false, reason: 'rate_limited', retryAfterMs: 300, teamUsed: 80 });
    clock.advance(300);
    expect(await meter.charge(subject())).toEqual({ ok: true, teamUsed: 160 });
  });

  it('holds at most one second of credits however long it was idle', async () => {
    const { meter, subject, clock } = setup({ creditsPerSecond: 100 });
    await meter.charge(subject(100));
    clock.advance(60_000);
    expect(await meter.charge(subject())).toEqual({ ok: true, teamUsed: 180 });
    expect(await meter.charge(subject())).toMatchObject({ ok: false, reason: 'rate_limited', retryAfterMs: 600 });
  });

  it('clamps its time: a draw stamped before the last one (a clock behind) neither refills nor moves it back', async () => {
    const { meter, subject, clock, buckets } = setup({ creditsPerSecond: 100 });
    await meter.charge(subject());
    expect(buckets.get('team_a')).toEqual({ tokens: 20, at: START });
    clock.advance(-5_000);
    expect(await meter.charge(subject())).toEqual({ ok: false, reason: 'rate_limited', retryAfterMs: 600, teamUsed: 80 });
    expect(buckets.get('team_a')).toEqual({ tokens: 20, at: START });
    clock.advance(5_300);
    expect(await meter.charge(subject())).toMatchObject({ ok: false, retryAfterMs: 300 });
    expect(refill({ tokens: 20, at: START }, 100, START - 1_000)).toEqual({ tokens: 20, at: START });
  });

  it('lets a call dearer than a second of credits through when full; the debt is paid by waiting', async () => {
    const { meter, subject, clock } = setup({ creditsPerSecond: 10 });
    expect(await meter.charge(subject(300))).toEqual({ ok: true, teamUsed: 300 });
    // 10 - 300 = -290: full again after 29 s.
    const { deltas } = decideLedger([{ type: 'charge', subject: subject(300), nowMs: clock.now() }], {
      teamUsed: () => 0,
      keyUsed: () => 0,
      bucket: () => undefined,
      reservation: () => undefined,
    });
    expect(deltas.buckets).toEqual([{ teamId: 'team_a', tokens: -290, at: START, fullInMs: 30_000 }]);
    clock.advance(28_000);
    expect(await meter.charge(subject(5))).toMatchObject({ ok: false, reason: 'rate_limited', retryAfterMs: 1_500 });
    clock.advance(1_500);
    expect(await meter.charge(subject(5))).toEqual({ ok: true, teamUsed: 305 });
  });

  it('is drawn only when the quota and the cap allow the call', async () => {
    const { meter, subject, buckets } = setup({ dailyCredits: 50, creditsPerSecond: 100 });
    expect(await meter.charge(subject())).toMatchObject({ ok: false, reason: 'daily_credits_exhausted' });
    expect(buckets.size).toBe(0);
  });
});

describe('reserve, settle, refund', () => {
  it('a reservation holds the credits; settling charges them once; the usage row appears at settle', async () => {
    const { meter, subject, usage, reservations } = setup({ dailyCredits: 1_000 });
    expect(await meter.reserve('r1', subject())).toEqual({ ok: true, teamUsed: 80 });
    expect(reservations.get('r1')).toMatchObject({ teamId: 'team_a', cost: 80, createdAt: START });
    expect(usage.size).toBe(0);
    expect(await meter.settle('r1')).toEqual({ ok: true, teamUsed: 80 });
    expect([...usage.values()]).toEqual([{ credits: 80, requests: 1 }]);
    expect(reservations.size).toBe(0);
  });

  it('a refund gives the credits back to the team and the key', async () => {
    const { meter, subject, teamDays, keyDays } = setup({ dailyCredits: 1_000, keyCap: 85 });
    await meter.charge(subject(5));
    expect(await meter.reserve('r1', subject())).toEqual({ ok: true, teamUsed: 85 });
    expect(await meter.reserve('r2', subject())).toMatchObject({ ok: false, scope: 'key' });
    expect(await meter.refund('r1')).toEqual({ ok: true, teamUsed: 5 });
    expect(teamDays.get(`team_a ${utcDay(START)}`)).toBe(5);
    expect(keyDays.get(`key_a ${utcDay(START)}`)).toBe(5);
    // The key's room is back.
    expect(await meter.reserve('r3', subject())).toEqual({ ok: true, teamUsed: 85 });
  });

  it('a settle or refund whose reservation is gone says so and changes nothing', async () => {
    const { meter, subject, reservations, teamDays, usage } = setup({ dailyCredits: 1_000 });
    expect(await meter.settle('never-made')).toEqual({ ok: false, reason: 'reservation_gone' });
    expect(await meter.refund('never-made')).toEqual({ ok: false, reason: 'reservation_gone' });

    await meter.reserve('settled-twice', subject());
    await meter.settle('settled-twice');
    expect(await meter.settle('settled-twice')).toEqual({ ok: false, reason: 'reservation_gone' });
    expect(await meter.refund('settled-twice')).toEqual({ ok: false, reason: 'reservation_gone' });

    await meter.reserve('refunded', subject());
    await meter.refund('refunded');
    expect(await meter.settle('refunded')).toEqual({ ok: false, reason: 'reservation_gone' });

    // Swept while its call ran (the stale-reservation sweep refunds it in the store).
    await meter.reserve('swept', subject());
    await meter.refund('swept');
    reservations.delete('swept');
    expect(await meter.settle('swept')).toEqual({ ok: false, reason: 'reservation_gone' });

    expect(teamDays.get(`team_a ${utcDay(START)}`)).toBe(80);
    expect([...usage.values()]).toEqual([{ credits: 80, requests: 1 }]);
  });

  it('within one batch: reserved then settled is charged once and never written as a reservation', () => {
    const { subject, counters } = setup();
    const s = subject();
    const { results, deltas } = decideLedger(
      [
        { type: 'reserve', reservationId: 'r', subject: s, nowMs: START },
        { type: 'settle', reservationId: 'r' },
        { type: 'refund', reservationId: 'r' },
      ],
      counters,
    );
    expect(results).toEqual([{ ok: true, teamUsed: 80 }, { ok: true, teamUsed: 80 }, { ok: false, reason: 'reservation_gone' }]);
    expect(deltas.reserved).toEqual([]);
    expect(deltas.ended).toEqual([]);
    expect(deltas.teamDays).toEqual([{ id: 'team_a', day: utcDay(START), delta: 80 }]);
    expect(deltas.usage).toEqual([{ teamId: 'team_a', keyId: 'key_a', day: utcDay(START), network: 'eth', method: 'eth_getBlockByHash', credits: 80, requests: 1 }]);
  });
});

describe('a batch', () => {
  it('reads each counter once and writes each total once: 100 charges of one key', () => {
    const { subject, counters, reads } = setup({ creditsPerSecond: 1_000_000 });
    const ops: LedgerOp[] = Array.from({ length: 100 }, () => ({ type: 'charge', subject: subject(), nowMs: START }));
    const { results, deltas } = decideLedger(ops, counters);
    expect(results.at(-1)).toEqual({ ok: true, teamUsed: 8_000 });
    expect(reads).toEqual([`team team_a ${utcDay(START)}`, 'bucket team_a']);
    expect(deltas.teamDays).toEqual([{ id: 'team_a', day: utcDay(START), delta: 8_000 }]);
    expect(deltas.keyDays).toEqual([{ id: 'key_a', day: utcDay(START), delta: 8_000 }]);
    expect(deltas.usage).toHaveLength(1);
    expect(deltas.buckets).toHaveLength(1);
  });

  it('applies its operations in order: room freed by a refund is there for the next reservation', () => {
    const { subject, counters } = setup({ dailyCredits: 200 });
    const s = subject();
    const reserve = (reservationId: string): LedgerOp => ({ type: 'reserve', reservationId, subject: s, nowMs: START });
    const { results, deltas } = decideLedger(
      [reserve('r1'), reserve('r2'), reserve('r3'), { type: 'refund', reservationId: 'r2' }, reserve('r3'), { type: 'settle', reservationId: 'r1' }],
      counters,
    );
    expect(results.map((result) => (result.ok ? result.teamUsed : result.reason))).toEqual([80, 160, 'daily_credits_exhausted', 80, 160, 160]);
    expect(deltas.reserved.map((row) => row.id)).toEqual(['r3']);
    expect(deltas.usage).toMatchObject([{ credits: 80, requests: 1 }]);
    expect(deltas.teamDays).toEqual([{ id: 'team_a', day: s.day, delta: 160 }]);
  });
});

describe("a group commit (a batch request's charges and settles, one promise)", () => {
  /** The memory ledger, counting its calls and failing as told: `fail` rejects the call, `partial` applies only the first n operations. */
  function failingLedger(ledger: Ledger) {
    const control = { calls: [] as number[], fail: undefined as Error | undefined, partial: undefined as number | undefined };
    const wrapped: Ledger = {
      ...ledger,
      async applyLedger(ops) {
        control.calls.push(ops.length);
        if (control.fail !== undefined) throw control.fail;
        if (control.partial === undefined) return ledger.applyLedger(ops);
        const applied = await ledger.applyLedger(ops.slice(0, control.partial));
        throw new PartialLedgerError([...applied, ...new Array<undefined>(ops.length - applied.length).fill(undefined)], new Error('shard down'));
      },
    };
    return { ledger: wrapped, control };
  }

  it('applies its operations in item order within the turn, between the single operations before and after it', async () => {
    const { subject, ledger, usage } = setup({ dailyCredits: 390 });
    const { ledger: counted, control } = failingLedger(ledger);
    const meter = createMeter(counted, { now: () => START });
    expect(await meter.reserve('r1', subject())).toEqual({ ok: true, teamUsed: 80 });
    const before = meter.charge(subject());
    const group = meter.commitAll([
      { type: 'charge', subject: subject() },
      { type: 'settle', reservationId: 'r1' },
      { type: 'charge', subject: subject() },
      { type: 'charge', subject: subject() },
      { type: 'settle', reservationId: 'never-made' },
    ]);
    const after = meter.charge(subject(40));
    expect(await before).toEqual({ ok: true, teamUsed: 160 });
    const { results, error } = await group;
    expect(error).toBeUndefined();
    // 390 credits: the third charge of the group is the one that no longer fits; the 40 after it does.
    expect(results.map((result) => (result === undefined ? 'none' : result.ok ? result.teamUsed : result.reason))).toEqual([240, 240, 320, 'daily_credits_exhausted', 'reservation_gone']);
    expect(await after).toEqual({ ok: true, teamUsed: 360 });
    // The reserve, then one store call for everything submitted in that turn.
    expect(control.calls).toEqual([1, 7]);
    expect([...usage.values()]).toEqual([{ credits: 360, requests: 5 }]);
  });

  it('resolves with no result for each operation the store did not apply, and the reason', async () => {
    const { subject, ledger } = setup();
    const { ledger: failing, control } = failingLedger(ledger);
    const meter = createMeter(failing, { now: () => START });
    control.fail = new Error('store down');
    const single = meter.charge(subject());
    const down = await meter.commitAll([{ type: 'charge', subject: subject() }, { type: 'charge', subject: subject() }]);
    await expect(single).rejects.toThrow('store down');
    expect(down.results).toEqual([undefined, undefined]);
    expect((down.error as Error).message).toBe('store down');

    // Two of three applied (a cluster with one shard down): those keep their results.
    control.fail = undefined;
    control.partial = 3;
    const first = meter.charge(subject());
    const partly = meter.commitAll([{ type: 'charge', subject: subject() }, { type: 'charge', subject: subject() }, { type: 'charge', subject: subject() }]);
    expect(await first).toEqual({ ok: true, teamUsed: 80 });
    const { results, error } = await partly;
    expect(results).toEqual([{ ok: true, teamUsed: 160 }, { ok: true, teamUsed: 240 }, undefined]);
    expect((error as Error).message).toBe('shard down');
  });

  it('sends nothing to the store for an empty group', async () => {
    const { ledger } = setup();
    const { ledger: counted, control } = failingLedger(ledger);
    const meter = createMeter(counted, { now: () => START });
    expect(await meter.commitAll([])).toEqual({ results: [] });
    await meter.flush();
    expect(control.calls).toEqual([]);
  });
});

describe('the UTC day boundary', () => {
  const LAST_SECOND = Date.UTC(2030, 0, 15, 23, 59, 59, 500);

  it("a new day starts from nothing; yesterday's spend stays yesterday's", async () => {
    const { meter, subject, clock } = setup({ dailyCredits: 100 }, LAST_SECOND);
    expect(await meter.charge(subject())).toEqual({ ok: true, teamUsed: 80 });
    expect(await meter.charge(subject())).toMatchObject({ ok: false, scope: 'team', used: 80 });
    clock.advance(500);
    expect(utcDay(clock.now())).toBe('2030-01-16');
    expect(await meter.charge(subject())).toEqual({ ok: true, teamUsed: 80 });
    expect(await meter.peek('team_a', '2030-01-15')).toEqual({ ok: true, teamUsed: 80 });
    expect(await meter.peek('team_a', '2030-01-16')).toEqual({ ok: true, teamUsed: 80 });
  });

  it('a reservation made before midnight settles or refunds on its own day', async () => {
    const { meter, subject, clock, teamDays, usage } = setup({ dailyCredits: 1_000 }, LAST_SECOND);
    await meter.reserve('late', subject());
    await meter.reserve('later', subject());
    clock.advance(1_000);
    expect(await meter.settle('late')).toEqual({ ok: true, teamUsed: 160 });
    expect(await meter.refund('later')).toEqual({ ok: true, teamUsed: 80 });
    expect(teamDays.get('team_a 2030-01-15')).toBe(80);
    expect(teamDays.get('team_a 2030-01-16')).toBeUndefined();
    expect([...usage.keys()]).toEqual(['2030-01-15 key_a eth_getBlockByHash']);
  });

  it('the throughput bucket does not reset at midnight', async () => {
    const { meter, subject, clock } = setup({ creditsPerSecond: 100 }, LAST_SECOND);
    await meter.charge(subject());
    clock.advance(500);
    expect(await meter.charge(subject())).toMatchObject({ ok: false, reason: 'rate_limited', retryAfterMs: 100 });
  });
});
