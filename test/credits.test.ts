// Daily credits, throughput limits and the charging rule (README, Credits; the 402/429 rows of
// docs/errors.md): a real gateway on loopback with an in-memory SQLite store, scripted upstreams
// that answer `eth_getBlockByHash` with a block whose hash is the one asked for, and an injected
// clock.
//
// Every gateway here runs on an injected clock set in 2030, i.e. ahead of the wall clock: days,
// resets and Retry-After are then deterministic whatever time the suite runs at (a run that
// crosses 00:00 UTC cannot split a test over two days), and anything on the request path that
// mixes the wall clock with the gateway's clock (request deadlines did) shows up as 504s.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import type { Store } from '../src/store/index.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type BehaviourFn, type RpcItem, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';

// The scripted upstreams in this file answer made-up blocks (only their hash is right), so block
// verification is off on its EVM networks: verification has its own suites (block-verification,
// right-answers), and this file tests something else.

// ---------------------------------------------------------------------------------------------
// Helpers

/** A gateway clock: runs at wall-clock speed from `startMs`, can be frozen and moved forward (never back). */
interface TestClock {
  now: () => number;
  /** Stops the clock where it is. */
  freeze(): void;
  /** Moves the clock forward to `ms` (it keeps running or stays frozen). */
  set(ms: number): void;
}

function createTestClock(startMs: number, options: { frozen?: boolean } = {}): TestClock {
  let anchorClock = startMs;
  let anchorReal = performance.now();
  let frozen = options.frozen ?? false;
  const now = (): number => (frozen ? anchorClock : anchorClock + (performance.now() - anchorReal));
  return {
    now,
    freeze() {
      anchorClock = now();
      frozen = true;
    },
    set(ms) {
      if (ms < now()) throw new Error('the test clock only moves forward (key cache and deadlines read it)');
      anchorClock = ms;
      anchorReal = performance.now();
    },
  };
}

const utcDayOf = (ms: number): string => new Date(ms).toISOString().slice(0, 10);
const nextMidnightOf = (ms: number): number => {
  const date = new Date(ms);
  return Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), date.getUTCDate() + 1);
};

/** Distinct block hashes, so that no request of a load test is a cache hit or a single-flight follower. */
let hashCounter = 0;
const salt = Math.floor(Math.random() * 0xffff_ffff).toString(16).padStart(8, '0');
function uniqueHash(): string {
  hashCounter += 1;
  return `0x${salt}${hashCounter.toString(16).padStart(56, '0')}`;
}

function blockCall(hash: string, id: number | string = 1): Record<string, unknown> {
  return { jsonrpc: '2.0', id, method: 'eth_getBlockByHash', params: [hash, false] };
}

function call(method: string, id: number | string = 1, params: unknown[] = []): Record<string, unknown> {
  return { jsonrpc: '2.0', id, method, params };
}

/** The block an honest node would return for the requested hash. */
function blockFor(item: unknown): Record<string, unknown> {
  const params = (item as RpcItem).params as unknown[];
  return { hash: params[0], number: '0x1', transactions: [] };
}

function blockUpstream(delayMs: number): ScriptedBehaviour {
  return { kind: 'result', result: blockFor, delayMs };
}

const upstreams: ScriptedUpstream[] = [];
async function scripted(behaviour: ScriptedBehaviour | BehaviourFn): Promise<ScriptedUpstream> {
  const upstream = await startScriptedUpstream(behaviour);
  upstreams.push(upstream);
  return upstream;
}

const gateways: TestGateway[] = [];
async function gatewayWith(options: Parameters<typeof startTestGateway>[0]): Promise<TestGateway> {
  const tg = await startTestGateway(options);
  gateways.push(tg);
  return tg;
}

afterAll(async () => {
  await Promise.all(gateways.map((tg) => tg.close()));
  await Promise.all(upstreams.map((upstream) => upstream.close()));
});

/** What the ledger says about a team on a day: settled usage, and team_days.used (settled + reserved). */
async function ledger(store: Store, teamId: string, day: string): Promise<{ credits: number; requests: number; teamUsed: number }> {
  const rows = await store.usage({ teamId, fromDay: day, toDay: day });
  const [peek] = await store.applyLedger([{ type: 'peek', teamId, day }]);
  return {
    credits: rows.reduce((sum, row) => sum + row.credits, 0),
    requests: rows.reduce((sum, row) => sum + row.requests, 0),
    teamUsed: peek!.teamUsed,
  };
}

async function newTeamKey(store: Store, dailyCredits: number, key: { dailyCap?: number; allowedNetworks?: string[]; expiresAt?: number } = {}) {
  const team = await store.createTeam({ name: `team-${Math.random().toString(36).slice(2)}`, dailyCredits });
  const { key: created, secret } = await issueKey(store, { teamId: team.id, ...key });
  return { team, keyId: created.id, secret };
}

const creditsCost = (headers: Headers): number => Number(headers.get('x-credits-cost'));
const creditsRemaining = (headers: Headers): number => Number(headers.get('x-credits-remaining'));

// ---------------------------------------------------------------------------------------------
// 1. Exactness under concurrency

describe('a daily balance is exact under concurrency (reserve before forwarding)', () => {
  const START = Date.UTC(2030, 5, 15, 12, 0, 0);
  const clock = createTestClock(START);
  const day = utcDayOf(START);
  let tg: TestGateway;
  let upstream: ScriptedUpstream;

  beforeAll(async () => {
    // 30 ms of upstream latency so the 300 calls overlap. Every request asks for a distinct hash
    // (the block cache stays on with its defaults): no call is a cache hit or a single-flight follower.
    upstream = await scripted(blockUpstream(30));
    tg = await gatewayWith({
      networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'u1', url: upstream.url }] }],
      dailyCredits: 8_000,
      now: clock.now,
    });
  });

  it('300 concurrent single calls at 80 against 8,000 credits: exactly 100 answered, 200 get 402', async () => {
    const before = clock.now();
    const responses = await Promise.all(Array.from({ length: 300 }, (_, i) => rpc(tg.url('eth'), blockCall(uniqueHash(), i))));
    const after = clock.now();

    const answered = responses.filter((res) => res.status === 200);
    const refused = responses.filter((res) => res.status === 402);
    expect(answered).toHaveLength(100);
    expect(refused).toHaveLength(200);
    for (const res of answered) {
      expect(res.body.result).toMatchObject({ number: '0x1' });
      expect(creditsCost(res.headers)).toBe(80);
    }

    const midnight = nextMidnightOf(START);
    for (const res of refused) {
      expect(res.body.error.code).toBe(-32005);
      expect(typeof res.body.id).toBe('number');
      const data = res.body.error.data;
      expect(data).toMatchObject({ reason: 'daily_credits_exhausted', scope: 'team', limit: 8_000, cost: 80 });
      expect(data.resetsAt).toBe(new Date(midnight).toISOString());
      expect(data.resetsAt).toBe('2030-06-16T00:00:00.000Z');
      // `used` is what the team had spent or reserved when this call was refused: too much for one more.
      expect(data.used + 80).toBeGreaterThan(8_000);
      expect(data.used).toBeLessThanOrEqual(8_000);
      // Seconds to 00:00 UTC as of the refusal, which happened between `before` and `after`.
      const retryAfter = Number(res.headers.get('retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(Math.floor((midnight - after) / 1000));
      expect(retryAfter).toBeLessThanOrEqual(Math.ceil((midnight - before) / 1000));
      expect(creditsCost(res.headers)).toBe(0);
    }
    // Refused calls never reach the upstream.
    expect(upstream.calls).toHaveLength(100);

    // team_days.used equals the settled usage: every reservation was settled, none is left.
    expect(await ledger(tg.store, tg.team.id, day)).toEqual({ credits: 8_000, requests: 100, teamUsed: 8_000 });
  });

  it('30 concurrent batches of 10 (300 items) against 8,000 credits: exactly 100 items answered, each refused item has its own -32005', async () => {
    const { team, secret } = await newTeamKey(tg.store, 8_000);
    const upstreamCallsBefore = upstream.calls.length;
    const hashes = Array.from({ length: 30 }, () => Array.from({ length: 10 }, () => uniqueHash()));
    const batches = hashes.map((batch, b) => batch.map((hash, i) => blockCall(hash, `b${b}-${i}`)));
    const responses = await Promise.all(batches.map((batch) => rpc(tg.url('eth', secret), batch)));

    let results = 0;
    let refusals = 0;
    let costSum = 0;
    responses.forEach((res, b) => {
      expect(res.status).toBe(200);
      expect(Array.isArray(res.body)).toBe(true);
      expect(res.body).toHaveLength(10);
      let answeredHere = 0;
      res.body.forEach((reply: any, i: number) => {
        expect(reply.id).toBe(`b${b}-${i}`);
        if ('result' in reply) {
          answeredHere += 1;
          expect(reply.result.hash).toBe(hashes[b]![i]);
        } else {
          refusals += 1;
          expect(reply.error.code).toBe(-32005);
          expect(reply.error.data).toMatchObject({ reason: 'daily_credits_exhausted', limit: 8_000, cost: 80 });
          expect(reply.error.data.resetsAt).toBe('2030-06-16T00:00:00.000Z');
        }
      });
      results += answeredHere;
      // A batch's X-Credits-Cost is the sum of its charged items.
      expect(creditsCost(res.headers)).toBe(80 * answeredHere);
      costSum += creditsCost(res.headers);
    });
    expect(results).toBe(100);
    expect(refusals).toBe(200);
    expect(costSum).toBe(8_000);
    expect(upstream.calls.length - upstreamCallsBefore).toBe(100);
    expect(await ledger(tg.store, team.id, day)).toEqual({ credits: 8_000, requests: 100, teamUsed: 8_000 });
  });
});

// ---------------------------------------------------------------------------------------------
// 2. The charging rule

describe('charging rule: answers cost their price, rejections and upstream failures cost nothing', () => {
  const clock = createTestClock(Date.UTC(2030, 2, 10, 8, 0, 0));
  const NULL_HASH = `0x${'00'.repeat(31)}01`;
  const ERROR_HASH = `0x${'00'.repeat(31)}02`;
  let tg: TestGateway;
  let main: ScriptedUpstream;
  let down: ScriptedUpstream[];
  let priced: ScriptedUpstream;

  const today = (): string => utcDayOf(clock.now());
  const snapshot = () => ledger(tg.store, tg.team.id, today());

  /** Runs `action` and returns how much the ledger moved (settled usage and team_days.used). */
  async function ledgerDelta(action: () => Promise<void>): Promise<{ credits: number; requests: number; teamUsed: number }> {
    const before = await snapshot();
    await action();
    const after = await snapshot();
    return { credits: after.credits - before.credits, requests: after.requests - before.requests, teamUsed: after.teamUsed - before.teamUsed };
  }

  beforeAll(async () => {
    main = await scripted((received) => {
      const item = received.body as RpcItem;
      if (item.method === 'eth_blockNumber') return { kind: 'result', result: '0x10' };
      const hash = (item.params as unknown[])[0];
      if (hash === NULL_HASH) return { kind: 'result', result: null };
      if (hash === ERROR_HASH) return { kind: 'rpc-error', code: -32000, message: 'header not found' };
      return blockUpstream(0);
    });
    down = [await scripted({ kind: 'status', status: 500 }), await scripted({ kind: 'status', status: 500 })];
    priced = await scripted(blockUpstream(0));
    tg = await gatewayWith({
      networks: [
        { id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'main', url: main.url }], methods: { eth_blockNumber: 10 } },
        {
          id: 'eth-down',
          kind: 'evm',
          verification: 'off',
          chainId: 1,
          upstreams: [
            { id: 'down-a', url: down[0]!.url },
            { id: 'down-b', url: down[1]!.url },
          ],
        },
        { id: 'eth-priced', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'priced', url: priced.url }], methods: { eth_getBlockByHash: 100 } },
      ],
      now: clock.now,
    });
  });

  it('a null result costs the full price', async () => {
    const delta = await ledgerDelta(async () => {
      const res = await rpc(tg.url('eth'), blockCall(NULL_HASH));
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ jsonrpc: '2.0', id: 1, result: null });
      expect(creditsCost(res.headers)).toBe(80);
    });
    expect(delta).toEqual({ credits: 80, requests: 1, teamUsed: 80 });
  });

  it('a cache hit costs the full price', async () => {
    const hash = uniqueHash();
    const delta = await ledgerDelta(async () => {
      const first = await rpc(tg.url('eth'), blockCall(hash));
      expect(first.headers.get('x-cache')).toBe('miss');
      expect(creditsCost(first.headers)).toBe(80);
      const second = await rpc(tg.url('eth'), blockCall(hash, 2));
      expect(second.status).toBe(200);
      expect(second.body.result.hash).toBe(hash);
      expect(second.headers.get('x-cache')).toBe('hit');
      expect(creditsCost(second.headers)).toBe(80);
    });
    expect(main.calls.filter((c) => JSON.stringify(c.body).includes(hash))).toHaveLength(1);
    expect(delta).toEqual({ credits: 160, requests: 2, teamUsed: 160 });
  });

  it("an upstream's own JSON-RPC error passed through is charged", async () => {
    const delta = await ledgerDelta(async () => {
      const res = await rpc(tg.url('eth'), blockCall(ERROR_HASH, 'e'));
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ jsonrpc: '2.0', id: 'e', error: { code: -32000, message: 'header not found' } });
      expect(creditsCost(res.headers)).toBe(80);
    });
    expect(delta).toEqual({ credits: 80, requests: 1, teamUsed: 80 });
  });

  it('every upstream failing costs nothing: 502, X-Credits-Cost 0, the reservation refunded', async () => {
    const delta = await ledgerDelta(async () => {
      const res = await rpc(tg.url('eth-down'), blockCall(uniqueHash()));
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe(-32603);
      expect(res.body.error.data.attempts).toHaveLength(2);
      expect(creditsCost(res.headers)).toBe(0);
    });
    expect(down[0]!.calls.length + down[1]!.calls.length).toBe(2);
    expect(delta).toEqual({ credits: 0, requests: 0, teamUsed: 0 });
  });

  it('validation errors, denied and unknown methods and invalid requests are never charged nor forwarded', async () => {
    const upstreamCalls = main.calls.length;
    const delta = await ledgerDelta(async () => {
      const cases: Array<{ body: unknown; code: number }> = [
        { body: { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: ['0x1234', false] }, code: -32602 },
        { body: { jsonrpc: '2.0', id: 2, method: 'eth_getBlockByHash', params: [uniqueHash()] }, code: -32602 },
        { body: { jsonrpc: '2.0', id: 3, method: 'eth_sign', params: [] }, code: -32601 },
        { body: { jsonrpc: '2.0', id: 6, method: 'not a method name', params: [] }, code: -32601 },
        { body: { jsonrpc: '1.0', id: 4, method: 'eth_getBlockByHash', params: [uniqueHash(), false] }, code: -32600 },
        { body: { jsonrpc: '2.0', id: 5, method: 42 }, code: -32600 },
      ];
      for (const { body, code } of cases) {
        const res = await rpc(tg.url('eth'), body);
        expect(res.status).toBe(200);
        expect(res.body.error.code).toBe(code);
        expect(creditsCost(res.headers)).toBe(0);
      }
      // The same, as items of one batch.
      const res = await rpc(tg.url('eth'), cases.map((c) => c.body));
      expect(res.status).toBe(200);
      expect(res.body.map((reply: any) => reply.error.code)).toEqual(cases.map((c) => c.code));
      expect(creditsCost(res.headers)).toBe(0);
    });
    expect(main.calls.length).toBe(upstreamCalls);
    expect(delta).toEqual({ credits: 0, requests: 0, teamUsed: 0 });
  });

  it('notifications are neither executed nor charged, single or in a batch', async () => {
    const upstreamCalls = main.calls.length;
    const notification = (method: string, params: unknown[]) => ({ jsonrpc: '2.0', method, params });
    const delta = await ledgerDelta(async () => {
      const single = await rpc(tg.url('eth'), notification('eth_getBlockByHash', [uniqueHash(), false]));
      expect(single.status).toBe(204);
      expect(single.body).toBeUndefined();
      expect(creditsCost(single.headers)).toBe(0);

      const onlyNotifications = await rpc(tg.url('eth'), [
        notification('eth_getBlockByHash', [uniqueHash(), false]),
        notification('eth_blockNumber', []),
      ]);
      expect(onlyNotifications.status).toBe(204);
      expect(creditsCost(onlyNotifications.headers)).toBe(0);

      const mixed = await rpc(tg.url('eth'), [notification('eth_getBlockByHash', [uniqueHash(), false]), call('eth_chainId', 7)]);
      expect(mixed.status).toBe(200);
      expect(mixed.body).toEqual([{ jsonrpc: '2.0', id: 7, result: '0x1' }]);
      expect(creditsCost(mixed.headers)).toBe(5);
    });
    expect(main.calls.length).toBe(upstreamCalls);
    // Only the eth_chainId of the mixed batch.
    expect(delta).toEqual({ credits: 5, requests: 1, teamUsed: 5 });
  });

  it('an unknown key (401) is never charged nor forwarded', async () => {
    const upstreamCalls = main.calls.length;
    const delta = await ledgerDelta(async () => {
      const res = await rpc(tg.url('eth', 'tg_NotAKeyNotAKeyNotAKeyNotAKey00'), blockCall(uniqueHash()));
      expect(res.status).toBe(401);
      expect(res.body.error.code).toBe(-32016);
    });
    expect(main.calls.length).toBe(upstreamCalls);
    expect(delta).toEqual({ credits: 0, requests: 0, teamUsed: 0 });
  });

  it('eth_chainId and net_version cost 5 each and are answered without an upstream', async () => {
    const upstreamCalls = main.calls.length;
    const delta = await ledgerDelta(async () => {
      const chainId = await rpc(tg.url('eth'), call('eth_chainId'));
      expect(chainId.body.result).toBe('0x1');
      expect(creditsCost(chainId.headers)).toBe(5);
      const netVersion = await rpc(tg.url('eth'), call('net_version'));
      expect(netVersion.body.result).toBe('1');
      expect(creditsCost(netVersion.headers)).toBe(5);
    });
    expect(main.calls.length).toBe(upstreamCalls);
    expect(delta).toEqual({ credits: 10, requests: 2, teamUsed: 10 });
  });

  it("a network's cost override applies (methods: {eth_getBlockByHash: 100})", async () => {
    const delta = await ledgerDelta(async () => {
      const res = await rpc(tg.url('eth-priced'), blockCall(uniqueHash()));
      expect(res.status).toBe(200);
      expect(creditsCost(res.headers)).toBe(100);
    });
    expect(delta).toEqual({ credits: 100, requests: 1, teamUsed: 100 });
    const rows = await tg.store.usage({ teamId: tg.team.id, fromDay: today(), toDay: today() });
    expect(rows.find((row) => row.network === 'eth-priced' && row.method === 'eth_getBlockByHash')).toMatchObject({ credits: 100, requests: 1 });
  });

  it('an extra pass-through method listed with its cost is forwarded and charged that cost', async () => {
    const upstreamCalls = main.calls.length;
    const delta = await ledgerDelta(async () => {
      const res = await rpc(tg.url('eth'), call('eth_blockNumber', 9));
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ jsonrpc: '2.0', id: 9, result: '0x10' });
      expect(creditsCost(res.headers)).toBe(10);
    });
    expect(main.calls.slice(upstreamCalls).map((c) => c.methods)).toEqual([['eth_blockNumber']]);
    expect(delta).toEqual({ credits: 10, requests: 1, teamUsed: 10 });
    const rows = await tg.store.usage({ teamId: tg.team.id, fromDay: today(), toDay: today() });
    expect(rows.find((row) => row.network === 'eth' && row.method === 'eth_blockNumber')).toMatchObject({ credits: 10, requests: 1 });

    // Not re-priced on the other network: the catalogue's price.
    const elsewhere = await rpc(tg.url('eth-priced'), call('eth_blockNumber'));
    expect(elsewhere.body.error).toBeUndefined();
    expect(creditsCost(elsewhere.headers)).toBe(80);
  });
});

// ---------------------------------------------------------------------------------------------
// 3. X-Credits-Cost and X-Credits-Remaining

describe('credit headers follow the balance exactly', () => {
  const clock = createTestClock(Date.UTC(2030, 3, 1, 9, 0, 0));
  let tg: TestGateway;

  beforeAll(async () => {
    // eth_blockNumber always fails (after 100 ms, so that in a batch it is refunded after the
    // block item has settled); blocks are answered at once.
    const upstream = await scripted((received) =>
      (received.body as RpcItem).method === 'eth_blockNumber' ? { kind: 'status', status: 500, delayMs: 100 } : blockUpstream(0),
    );
    tg = await gatewayWith({
      networks: [
        {
          id: 'eth',
          kind: 'evm',
          verification: 'off',
          chainId: 1,
          upstreams: [{ id: 'u1', url: upstream.url }],
          methods: { eth_blockNumber: 10 },
          circuitBreaker: { failureThreshold: 100 },
        },
      ],
      dailyCredits: 300,
      now: clock.now,
    });
  });

  it('every response states its charge and the balance left, down to a 402', async () => {
    const url = tg.url('eth');
    const step = async (body: unknown, expected: { status: number; cost: number; remaining: number }) => {
      const res = await rpc(url, body);
      expect({ status: res.status, cost: creditsCost(res.headers), remaining: creditsRemaining(res.headers) }).toEqual(expected);
      expect(res.headers.get('x-request-id')).toBeTruthy();
      return res;
    };

    await step(call('eth_chainId'), { status: 200, cost: 5, remaining: 295 });
    await step(blockCall(uniqueHash()), { status: 200, cost: 80, remaining: 215 });

    // A batch costs the sum of its charged items: block 80 + chainId 5; invalid params, a denied
    // method and the notification are free.
    const batch = await step(
      [
        blockCall(uniqueHash(), 1),
        call('eth_chainId', 2),
        { jsonrpc: '2.0', id: 3, method: 'eth_getBlockByHash', params: ['0xnothash', false] },
        call('eth_sign', 4),
        { jsonrpc: '2.0', method: 'eth_getBlockByHash', params: [uniqueHash(), false] },
      ],
      { status: 200, cost: 85, remaining: 130 },
    );
    expect(batch.body.map((reply: any) => reply.id)).toEqual([1, 2, 3, 4]);

    // One item answered, one failed on every upstream (refunded after the other settled): the
    // balance after the request counts only the answered item.
    const mixed = await step([blockCall(uniqueHash(), 1), call('eth_blockNumber', 2)], { status: 200, cost: 80, remaining: 50 });
    expect(mixed.body[0].result).toBeDefined();
    expect(mixed.body[1].error.code).toBe(-32603);

    // 50 left: an 80-credit call is refused and changes nothing.
    const refused = await step(blockCall(uniqueHash()), { status: 402, cost: 0, remaining: 50 });
    expect(refused.body.error.data).toMatchObject({ reason: 'daily_credits_exhausted', limit: 300, used: 250, cost: 80 });

    // In a batch, the refused item gets its own -32005 and the rest is charged. The refusal states
    // the spend when the block item was decided: the chainId answer beside it is charged only
    // when the response is written (nothing is charged before it can be delivered), so not yet.
    const partial = await step([call('eth_chainId', 1), blockCall(uniqueHash(), 2)], { status: 200, cost: 5, remaining: 45 });
    expect(partial.body[0].result).toBe('0x1');
    expect(partial.body[1].error).toMatchObject({ code: -32005, data: { reason: 'daily_credits_exhausted', limit: 300, used: 250, cost: 80 } });

    // A single call failing on every upstream: 502, nothing charged, the reservation given back.
    await step(call('eth_blockNumber'), { status: 502, cost: 0, remaining: 45 });
    // A parse error is free too, and still states the balance.
    const parse = await rpc(url, undefined, { rawBody: '{"jsonrpc":' });
    expect(parse.body.error.code).toBe(-32700);
    expect({ cost: creditsCost(parse.headers), remaining: creditsRemaining(parse.headers) }).toEqual({ cost: 0, remaining: 45 });

    expect(await ledger(tg.store, tg.team.id, utcDayOf(clock.now()))).toEqual({ credits: 255, requests: 6, teamUsed: 255 });
  });
});

// ---------------------------------------------------------------------------------------------
// 4. Key settings

describe('key settings: daily cap, network allow-list, expiry', () => {
  const clock = createTestClock(Date.UTC(2030, 4, 20, 15, 0, 0));
  let tg: TestGateway;
  let upstream: ScriptedUpstream;
  const today = (): string => utcDayOf(clock.now());

  beforeAll(async () => {
    upstream = await scripted(blockUpstream(0));
    tg = await gatewayWith({
      networks: [
        { id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'u1', url: upstream.url }] },
        { id: 'other', kind: 'evm', verification: 'off', chainId: 2, upstreams: [{ id: 'u2', url: upstream.url }] },
      ],
      now: clock.now,
    });
  });

  it("a key's daily cap refuses with scope 'key' while the team has credits; the team's other keys still work", async () => {
    const { key, secret } = await issueKey(tg.store, { teamId: tg.team.id, dailyCap: 160 });
    for (let i = 0; i < 2; i += 1) {
      const res = await rpc(tg.url('eth', secret), blockCall(uniqueHash()));
      expect(res.status).toBe(200);
      expect(creditsCost(res.headers)).toBe(80);
    }
    const refused = await rpc(tg.url('eth', secret), blockCall(uniqueHash(), 'third'));
    expect(refused.status).toBe(402);
    expect(refused.body.id).toBe('third');
    expect(refused.body.error.code).toBe(-32005);
    expect(refused.body.error.data).toMatchObject({ reason: 'daily_credits_exhausted', scope: 'key', limit: 160, used: 160, cost: 80 });
    expect(refused.headers.get('retry-after')).not.toBeNull();
    // The team's balance is what X-Credits-Remaining reports, and it is far from exhausted.
    expect(creditsRemaining(refused.headers)).toBe(tg.team.dailyCredits - 160);

    const other = await rpc(tg.url('eth'), blockCall(uniqueHash()));
    expect(other.status).toBe(200);
    expect(creditsCost(other.headers)).toBe(80);

    const keyRows = await tg.store.usage({ keyId: key.id, fromDay: today(), toDay: today() });
    expect(keyRows.reduce((sum, row) => sum + row.credits, 0)).toBe(160);
    expect(await ledger(tg.store, tg.team.id, today())).toMatchObject({ credits: 240, requests: 3, teamUsed: 240 });
  });

  it('a key outside its network allow-list gets 403 -32002 and is not charged', async () => {
    const { secret } = await issueKey(tg.store, { teamId: tg.team.id, allowedNetworks: ['other'] });
    const before = await ledger(tg.store, tg.team.id, today());
    const upstreamCalls = upstream.calls.length;

    const res = await rpc(tg.url('eth', secret), blockCall(uniqueHash()));
    expect(res.status).toBe(403);
    expect(res.body.error.code).toBe(-32002);
    // The team is known, so even this rejection carries the credit headers.
    expect(creditsCost(res.headers)).toBe(0);
    expect(creditsRemaining(res.headers)).toBe(tg.team.dailyCredits - before.teamUsed);
    expect(upstream.calls.length).toBe(upstreamCalls);
    expect(await ledger(tg.store, tg.team.id, today())).toEqual(before);

    const allowed = await rpc(tg.url('other', secret), call('eth_chainId'));
    expect(allowed.status).toBe(200);
    expect(allowed.body.result).toBe('0x2');
    expect(creditsCost(allowed.headers)).toBe(5);
  });

  it('an expired key gets 401 and is not charged', async () => {
    const { secret } = await issueKey(tg.store, { teamId: tg.team.id, expiresAt: clock.now() - 1 });
    const before = await ledger(tg.store, tg.team.id, today());
    const res = await rpc(tg.url('eth', secret), blockCall(uniqueHash()));
    expect(res.status).toBe(401);
    expect(res.body.error).toMatchObject({ code: -32016, message: 'invalid API key' });
    expect(await ledger(tg.store, tg.team.id, today())).toEqual(before);

    // The same key with an expiry an hour away works.
    const { secret: fresh } = await issueKey(tg.store, { teamId: tg.team.id, expiresAt: clock.now() + 3_600_000 });
    expect((await rpc(tg.url('eth', fresh), call('eth_chainId'))).status).toBe(200);
  });
});

// ---------------------------------------------------------------------------------------------
// 5. The day boundary

describe('the balance resets at 00:00 UTC', () => {
  // Frozen, and moved forward by hand. In 2030, ahead of the wall clock: a request deadline taken
  // from the wall clock would already be past by this clock, and every forwarded call would be a 504.
  const clock = createTestClock(Date.UTC(2030, 0, 1, 23, 59, 59), { frozen: true });
  let tg: TestGateway;

  beforeAll(async () => {
    const upstream = await scripted(blockUpstream(0));
    tg = await gatewayWith({
      networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'u1', url: upstream.url }] }],
      dailyCredits: 160,
      now: clock.now,
    });
  });

  it('exhausted at 23:59:59: 402 with Retry-After 1; at 00:00:00 served again; usage kept per day', async () => {
    for (let i = 0; i < 2; i += 1) {
      const res = await rpc(tg.url('eth'), blockCall(uniqueHash()));
      expect(res.status).toBe(200);
    }
    const refused = await rpc(tg.url('eth'), blockCall(uniqueHash()));
    expect(refused.status).toBe(402);
    expect(refused.headers.get('retry-after')).toBe('1');
    expect(refused.body.error.data).toMatchObject({ reason: 'daily_credits_exhausted', limit: 160, used: 160, cost: 80, resetsAt: '2030-01-02T00:00:00.000Z' });
    expect(creditsRemaining(refused.headers)).toBe(0);

    clock.set(Date.UTC(2030, 0, 2, 0, 0, 0));
    const served = await rpc(tg.url('eth'), blockCall(uniqueHash()));
    expect(served.status).toBe(200);
    expect(creditsCost(served.headers)).toBe(80);
    expect(creditsRemaining(served.headers)).toBe(80);

    const rows = await tg.store.usage({ teamId: tg.team.id, fromDay: '2030-01-01', toDay: '2030-01-02' });
    expect(rows.map(({ day, credits, requests }) => ({ day, credits, requests }))).toEqual([
      { day: '2030-01-01', credits: 160, requests: 2 },
      { day: '2030-01-02', credits: 80, requests: 1 },
    ]);
    expect(await ledger(tg.store, tg.team.id, '2030-01-01')).toEqual({ credits: 160, requests: 2, teamUsed: 160 });
    expect(await ledger(tg.store, tg.team.id, '2030-01-02')).toEqual({ credits: 80, requests: 1, teamUsed: 80 });
  });
});

// ---------------------------------------------------------------------------------------------
// 6. Credits-per-second throughput

describe('credits-per-second throughput (token bucket, burst = one second of credits)', () => {
  const RATE = 800;
  const clock = createTestClock(Date.UTC(2030, 6, 4, 10, 0, 0));
  const today = (): string => utcDayOf(clock.now());
  let tg: TestGateway;

  beforeAll(async () => {
    const upstream = await scripted(blockUpstream(5));
    tg = await gatewayWith({
      networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'u1', url: upstream.url }] }],
      // Key lookups are not cached, so the team's new limit is seen at once.
      config: { auth: { keyCacheTtlMs: 0 } },
      now: clock.now,
    });
    await tg.store.updateTeam(tg.team.id, { creditsPerSecond: RATE });
  });

  it('a burst of 30 concurrent 80-credit calls: 10 served, 20 get 429 and are not charged', async () => {
    // The clock stands still during the burst, so the bucket cannot refill between arrivals:
    // exactly one second's credits (800 = 10 calls) get through.
    clock.freeze();
    const responses = await Promise.all(Array.from({ length: 30 }, (_, i) => rpc(tg.url('eth'), blockCall(uniqueHash(), i))));
    const served = responses.filter((res) => res.status === 200);
    const limited = responses.filter((res) => res.status === 429);
    expect(served).toHaveLength(10);
    expect(limited).toHaveLength(20);
    for (const res of limited) {
      expect(res.body.error.code).toBe(-32005);
      expect(res.body.error.data.reason).toBe('rate_limited');
      const { retryAfterMs } = res.body.error.data;
      expect(retryAfterMs).toBeGreaterThan(0);
      expect(retryAfterMs).toBeLessThanOrEqual(1_000);
      // An empty bucket refills 80 credits in 80 / 800 s.
      expect(retryAfterMs).toBe(100);
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(creditsCost(res.headers)).toBe(0);
    }
    expect(await ledger(tg.store, tg.team.id, today())).toEqual({ credits: 800, requests: 10, teamUsed: 800 });
  });

  it('under sustained load it serves rate × duration + burst, exactly', async () => {
    // One second later the bucket is full again. The load then runs for DURATION_MS of the
    // gateway's clock, which the test moves in steps: at each step every caller asks at once,
    // always more than the bucket holds, and whatever it holds is served.
    clock.freeze();
    clock.set(clock.now() + 1_000);
    const before = (await ledger(tg.store, tg.team.id, today())).credits;
    const CALLERS = 8;
    const STEP_MS = 50; // 40 credits: half a call
    const DURATION_MS = 3_000;
    let servedCalls = 0;
    for (let elapsedMs = 0; elapsedMs <= DURATION_MS; elapsedMs += STEP_MS) {
      if (elapsedMs > 0) clock.set(clock.now() + STEP_MS);
      const responses = await Promise.all(Array.from({ length: CALLERS }, () => rpc(tg.url('eth'), blockCall(uniqueHash()))));
      for (const res of responses) {
        if (res.status === 429) expect(res.body.error.data.reason).toBe('rate_limited');
        else expect(res.status).toBe(200);
      }
      servedCalls += responses.filter((res) => res.status === 200).length;
    }
    const served = (await ledger(tg.store, tg.team.id, today())).credits - before;

    // A full bucket (the burst, RATE credits) plus what it refills while the load runs
    // (RATE × DURATION_MS / 1000), to the call: the callers take every credit as it comes.
    expect(served).toBe((RATE * DURATION_MS) / 1000 + RATE);
    expect(servedCalls * 80).toBe(served);
  });
});

// ---------------------------------------------------------------------------------------------
// 7. Reserve, then settle or refund

/** A promise the test resolves when it chooses (Node 20 has no Promise.withResolvers). */
function openable(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((done) => (resolve = done));
  return { promise, resolve };
}

describe('reserve, then settle or refund', () => {
  const clock = createTestClock(Date.UTC(2030, 8, 9, 18, 0, 0));
  const today = (): string => utcDayOf(clock.now());
  let tg: TestGateway;
  let upstream: ScriptedUpstream;
  /**
   * Upstream answers wait for the test to open this gate, so "still in flight" is a state the
   * test holds, not a time it hopes for. Blocks are answered; eth_blockNumber fails (500).
   */
  let gate = openable();

  /** Resolves once the upstream has received `count` calls in all. */
  async function upstreamReceived(count: number): Promise<void> {
    while (upstream.calls.length < count) await new Promise((resolve) => setImmediate(resolve));
  }

  beforeAll(async () => {
    upstream = await scripted(async (received) => {
      await gate.promise;
      return (received.body as RpcItem).method === 'eth_blockNumber' ? { kind: 'status', status: 500 } : blockUpstream(0);
    });
    tg = await gatewayWith({
      networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'u1', url: upstream.url }], methods: { eth_blockNumber: 10 } }],
      dailyCredits: 100,
      now: clock.now,
    });
  });

  it('a call in flight already holds its credits: of two concurrent 80-credit calls on 100 credits, one is refused before the other settles', async () => {
    gate = openable();
    let settled = 0;
    const pending = Promise.all([rpc(tg.url('eth'), blockCall(uniqueHash())), rpc(tg.url('eth'), blockCall(uniqueHash()))].map((p) => p.finally(() => (settled += 1))));

    // One call reached the upstream and waits there; the other was refused without going upstream.
    await upstreamReceived(1);
    while (settled < 1) await new Promise((resolve) => setImmediate(resolve));
    expect(upstream.calls).toHaveLength(1);
    // Mid-flight: 80 credits reserved, nothing settled yet.
    expect(await ledger(tg.store, tg.team.id, today())).toEqual({ credits: 0, requests: 0, teamUsed: 80 });

    gate.resolve();
    const responses = await pending;
    const served = responses.filter((res) => res.status === 200);
    const refused = responses.filter((res) => res.status === 402);
    expect(served).toHaveLength(1);
    expect(refused).toHaveLength(1);
    expect(refused[0]!.body.error.data).toMatchObject({ reason: 'daily_credits_exhausted', limit: 100, used: 80, cost: 80 });
    expect(creditsRemaining(refused[0]!.headers)).toBe(20);
    expect(creditsRemaining(served[0]!.headers)).toBe(20);
    expect(upstream.calls).toHaveLength(1);
    expect(await ledger(tg.store, tg.team.id, today())).toEqual({ credits: 80, requests: 1, teamUsed: 80 });
  });

  it('a call every upstream failed gives its reservation back', async () => {
    gate = openable();
    const before = upstream.calls.length;
    const pending = rpc(tg.url('eth'), call('eth_blockNumber'));
    await upstreamReceived(before + 1);
    // Held while in flight.
    expect(await ledger(tg.store, tg.team.id, today())).toEqual({ credits: 80, requests: 1, teamUsed: 90 });
    gate.resolve();
    const res = await pending;
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe(-32603);
    expect(creditsCost(res.headers)).toBe(0);
    expect(creditsRemaining(res.headers)).toBe(20);
    expect(await ledger(tg.store, tg.team.id, today())).toEqual({ credits: 80, requests: 1, teamUsed: 80 });

    // The refunded credits can be spent: two 10-credit reservations fit in the 20 left. Both are
    // held while the upstream waits, and the two identical realtime calls share its one call.
    gate = openable();
    const pair = Promise.all([rpc(tg.url('eth'), call('eth_blockNumber', 1)), rpc(tg.url('eth'), call('eth_blockNumber', 2))]);
    while ((await ledger(tg.store, tg.team.id, today())).teamUsed < 100) await new Promise((resolve) => setImmediate(resolve));
    await upstreamReceived(before + 2);
    gate.resolve();
    const both = await pair;
    expect(both.map((r) => r.status)).toEqual([502, 502]);
    expect(both.map((r) => creditsCost(r.headers))).toEqual([0, 0]);
    expect(upstream.calls).toHaveLength(before + 2);
    expect(await ledger(tg.store, tg.team.id, today())).toEqual({ credits: 80, requests: 1, teamUsed: 80 });
  });
});
