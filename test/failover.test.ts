// Failover across a network's upstreams (docs/routing.md): real gateway, scripted upstreams that
// fail in every way the contract lists, and a healthy proxy to a real seeded anvil behind them.

import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useSeededAnvil } from './helpers/anvil.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { refusedUrl, startScriptedUpstream, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const anvil = useSeededAnvil({}, { blocks: 8, txPerBlock: 1 });

/** Attempt deadline of upstreams that stall: short, so the file stays fast. */
const STALL_TIMEOUT_MS = 300;
const BREAKER = { failureThreshold: 3, cooldownMs: 400 };
/**
 * The gateway's clock runs at wall speed plus this: a test "waits out" a breaker cooldown by
 * moving it forward instead of sleeping.
 */
let clockSkipMs = 0;

const upstreams: ScriptedUpstream[] = [];
async function scripted(behaviour: Parameters<typeof startScriptedUpstream>[0]): Promise<ScriptedUpstream> {
  const upstream = await startScriptedUpstream(behaviour);
  upstreams.push(upstream);
  return upstream;
}

function proxyToAnvil(): ScriptedBehaviour {
  return { kind: 'proxy', url: anvil.node.url };
}

/** One network per failure kind: a failing first upstream, then a healthy proxy to anvil. */
const FAILURES: Array<{ name: string; behaviour: () => ScriptedBehaviour; reason: RegExp; detail?: RegExp; timeoutMs?: number }> = [
  { name: 'HTTP 500', behaviour: () => ({ kind: 'status', status: 500 }), reason: /500/ },
  { name: 'HTTP 429', behaviour: () => ({ kind: 'status', status: 429, headers: { 'retry-after': '1' } }), reason: /429/ },
  { name: 'a stall past the attempt deadline', behaviour: () => ({ kind: 'stall' }), reason: /timeout|timed/i, timeoutMs: STALL_TIMEOUT_MS },
  { name: 'a connection reset', behaviour: () => ({ kind: 'reset' }), reason: /reset|socket/i },
  {
    name: 'a block with the wrong hash',
    behaviour: () => ({
      kind: 'proxy',
      url: anvil.node.url,
      transform: (body) => {
        const reply = body as { result?: { hash?: string } | null };
        if (reply.result) reply.result.hash = `0x${'ee'.repeat(32)}`;
        return reply;
      },
    }),
    reason: /^unverified_block$/,
    detail: /hash/,
  },
  { name: 'a non-JSON body', behaviour: () => ({ kind: 'raw', body: '<html><body>Bad gateway</body></html>' }), reason: /json|invalid/i },
  { name: 'JSON-RPC -32603', behaviour: () => ({ kind: 'rpc-error', code: -32603, message: 'internal error' }), reason: /-32603/ },
  { name: 'JSON-RPC -32005', behaviour: () => ({ kind: 'rpc-error', code: -32005, message: 'limit exceeded' }), reason: /-32005/ },
];

interface FailoverNetwork {
  id: string;
  bad?: ScriptedUpstream;
  good: ScriptedUpstream;
}

let gateway: TestGateway;
const failoverNetworks = new Map<string, FailoverNetwork>();
let refusedNetwork: FailoverNetwork;
let passThrough: { bad: ScriptedUpstream; good: ScriptedUpstream };
let allFail: ScriptedUpstream[];
let allStall: ScriptedUpstream[];
let breaker: ScriptedUpstream;
let ids: ScriptedUpstream;
let batch: ScriptedUpstream;
/** The block hash the `batch` network's upstream refuses to serve. */
let poisonedHash: string;

beforeAll(async () => {
  const networks: Array<Record<string, unknown> & { id: string }> = [];
  const evm = (id: string, list: Array<Record<string, unknown>>, extra: Record<string, unknown> = {}) =>
    networks.push({ id, kind: 'evm', chainId: 31337, upstreams: list, ...extra });

  let index = 0;
  for (const failure of FAILURES) {
    const id = `f${index++}`;
    const bad = await scripted(failure.behaviour());
    const good = await scripted(proxyToAnvil());
    failoverNetworks.set(failure.name, { id, bad, good });
    evm(id, [
      { id: 'bad', url: bad.url, ...(failure.timeoutMs === undefined ? {} : { timeoutMs: failure.timeoutMs }) },
      { id: 'good', url: good.url },
    ]);
  }

  const refusedGood = await scripted(proxyToAnvil());
  refusedNetwork = { id: 'refused', good: refusedGood };
  evm('refused', [{ id: 'down', url: await refusedUrl() }, { id: 'good', url: refusedGood.url }]);

  passThrough = {
    bad: await scripted({ kind: 'rpc-error', code: -32000, message: 'header not found' }),
    good: await scripted(proxyToAnvil()),
  };
  evm('passthrough', [{ id: 'lagging', url: passThrough.bad.url }, { id: 'good', url: passThrough.good.url }]);

  allFail = [
    await scripted({ kind: 'status', status: 503, body: 'Service Unavailable' }),
    await scripted({ kind: 'raw', body: 'not json at all', contentType: 'application/json' }),
    await scripted({ kind: 'rpc-error', code: -32603, message: 'internal error' }),
  ];
  evm('allfail', [
    { id: 'down', url: await refusedUrl() },
    { id: 'http503', url: allFail[0]!.url },
    { id: 'garbage', url: allFail[1]!.url },
    { id: 'internal', url: allFail[2]!.url },
  ]);

  allStall = [await scripted({ kind: 'stall' }), await scripted({ kind: 'stall' })];
  evm('allstall', [
    { id: 'stall-a', url: allStall[0]!.url, timeoutMs: STALL_TIMEOUT_MS },
    { id: 'stall-b', url: allStall[1]!.url, timeoutMs: STALL_TIMEOUT_MS },
  ]);

  breaker = await scripted({ kind: 'status', status: 500 });
  evm('breaker', [{ id: 'flaky', url: breaker.url }], { circuitBreaker: BREAKER });

  ids = await scripted(proxyToAnvil());
  evm('ids', [{ id: 'anvil', url: ids.url }]);

  poisonedHash = anvil.seed.blocksWithTransactions[1]!;
  batch = await scripted((call) => {
    const params = (call.body as { params?: unknown[] } | undefined)?.params;
    return params?.[0] === poisonedHash ? { kind: 'status', status: 502 } : proxyToAnvil();
  });
  // Two upstreams with the same script, so the poisoned item fails on both and the rest succeed.
  evm('batch', [
    { id: 'one', url: batch.url },
    { id: 'two', url: batch.url },
  ]);

  gateway = await startTestGateway({ networks, now: () => Date.now() + clockSkipMs });
});

afterAll(async () => {
  await gateway?.close();
  await Promise.all(upstreams.map((upstream) => upstream.close()));
});

async function anvilBlock(hash: string, hydrated = false): Promise<unknown> {
  const res = await request(anvil.node.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash, hydrated] }),
  });
  const body = (await res.body.json()) as { result: unknown };
  expect(body.result).not.toBeNull();
  return body.result;
}

function getBlock(id: unknown, hash: string, hydrated = false) {
  return { jsonrpc: '2.0', id, method: 'eth_getBlockByHash', params: [hash, hydrated] };
}

/** The gateway's log line for one response, found by its X-Request-Id. */
function logLineOf(requestId: string | null): Record<string, unknown> {
  const line = gateway.logLines.map((raw) => JSON.parse(raw) as Record<string, unknown>).find((entry) => entry.requestId === requestId && entry.msg === 'request');
  if (line === undefined) throw new Error(`no log line for request ${requestId}`);
  return line;
}

describe('failover to the next upstream', () => {
  for (const failure of FAILURES) {
    it(`fails over on ${failure.name}`, async () => {
      const network = failoverNetworks.get(failure.name)!;
      const hash = anvil.seed.blocksWithTransactions[0]!;
      const expected = await anvilBlock(hash);

      const res = await rpc(gateway.url(network.id), getBlock(41, hash));
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ jsonrpc: '2.0', id: 41, result: expected });
      expect(network.bad!.calls).toHaveLength(1);
      expect(network.bad!.calls[0]!.methods).toEqual(['eth_getBlockByHash']);
      expect(network.good.calls).toHaveLength(1);

      // The failed attempt is recorded on the request's log line with a reason that says why.
      const line = logLineOf(res.headers.get('x-request-id'));
      expect(line.upstream).toBe('good');
      const attempt = { upstream: 'bad', reason: expect.stringMatching(failure.reason) };
      expect(line.attempts).toEqual([failure.detail === undefined ? attempt : { ...attempt, detail: expect.stringMatching(failure.detail) }]);
    });
  }

  it('fails over when the first upstream refuses connections', async () => {
    const hash = anvil.seed.blocksWithTransactions[0]!;
    const expected = await anvilBlock(hash, true);
    const res = await rpc(gateway.url(refusedNetwork.id), getBlock('refused', hash, true));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ jsonrpc: '2.0', id: 'refused', result: expected });
    expect(refusedNetwork.good.calls).toHaveLength(1);
    const line = logLineOf(res.headers.get('x-request-id'));
    expect(line.attempts).toEqual([{ upstream: 'down', reason: expect.stringMatching(/refused/i) }]);
  });

  it('passes an ordinary upstream JSON-RPC error through unchanged, without failing over', async () => {
    const hash = anvil.seed.blocksWithTransactions[0]!;
    const res = await rpc(gateway.url('passthrough'), getBlock('pt', hash));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ jsonrpc: '2.0', id: 'pt', error: { code: -32000, message: 'header not found' } });
    expect(passThrough.bad.calls).toHaveLength(1);
    expect(passThrough.good.calls).toHaveLength(0);
  });
});

describe('when every upstream fails', () => {
  it('answers -32603 listing one attempt per upstream in order, HTTP 502', async () => {
    const hash = anvil.seed.blocksWithTransactions[0]!;
    const res = await rpc(gateway.url('allfail'), getBlock(9, hash));
    expect(res.status).toBe(502);
    expect(res.body).toMatchObject({ jsonrpc: '2.0', id: 9, error: { code: -32603 } });
    expect(res.body.result).toBeUndefined();
    expect(res.body.error.data.attempts).toEqual([
      { upstream: 'down', reason: expect.stringMatching(/refused/i) },
      { upstream: 'http503', reason: expect.stringMatching(/503/) },
      { upstream: 'garbage', reason: expect.stringMatching(/json|invalid/i) },
      { upstream: 'internal', reason: expect.stringMatching(/-32603/) },
    ]);
    for (const upstream of allFail) expect(upstream.calls).toHaveLength(1);
  });

  it('answers HTTP 504 when every upstream stalls past its deadline', async () => {
    const hash = anvil.seed.blocksWithTransactions[0]!;
    const started = Date.now();
    const res = await rpc(gateway.url('allstall'), getBlock(10, hash));
    const elapsed = Date.now() - started;
    expect(res.status).toBe(504);
    expect(res.body).toMatchObject({ jsonrpc: '2.0', id: 10, error: { code: -32603 } });
    expect(res.body.error.data.attempts).toEqual([
      { upstream: 'stall-a', reason: expect.stringMatching(/timeout|timed/i) },
      { upstream: 'stall-b', reason: expect.stringMatching(/timeout|timed/i) },
    ]);
    for (const upstream of allStall) expect(upstream.calls).toHaveLength(1);
    // Each attempt was cut at its own deadline, not the 10 s request deadline.
    expect(elapsed).toBeGreaterThanOrEqual(2 * STALL_TIMEOUT_MS - 50);
    expect(elapsed).toBeLessThan(3_000);
  });
});

describe('circuit breaker', () => {
  it('opens after failureThreshold failures, answers 503 without calling, and retries after cooldown', async () => {
    const hash = anvil.seed.blocksWithTransactions[0]!;
    const url = gateway.url('breaker');
    for (let i = 1; i <= BREAKER.failureThreshold; i++) {
      const res = await rpc(url, getBlock(i, hash));
      expect(res.status).toBe(502);
      expect(res.body.error.code).toBe(-32603);
      expect(breaker.calls).toHaveLength(i);
    }

    // Open: answered at once, the upstream is not reached.
    const open = await rpc(url, getBlock('open', hash));
    expect(open.status).toBe(503);
    expect(open.body).toMatchObject({ id: 'open', error: { code: -32603 } });
    expect(open.body.error.data.attempts).toEqual([{ upstream: 'flaky', reason: expect.stringMatching(/circuit/i) }]);
    expect(breaker.calls).toHaveLength(BREAKER.failureThreshold);

    // Not yet: just before the cooldown ends the circuit is still open.
    clockSkipMs += BREAKER.cooldownMs - 100;
    expect((await rpc(url, getBlock('still-open', hash))).status).toBe(503);
    expect(breaker.calls).toHaveLength(BREAKER.failureThreshold);

    // After the cooldown one trial goes through; it fails, so the circuit opens again at once.
    clockSkipMs += 200;
    const trial = await rpc(url, getBlock('trial', hash));
    expect(trial.status).toBe(502);
    expect(breaker.calls).toHaveLength(BREAKER.failureThreshold + 1);
    const reopened = await rpc(url, getBlock('reopened', hash));
    expect(reopened.status).toBe(503);
    expect(breaker.calls).toHaveLength(BREAKER.failureThreshold + 1);

    // The upstream recovers: after the next cooldown the trial succeeds and the circuit closes.
    breaker.setBehaviour(proxyToAnvil());
    clockSkipMs += BREAKER.cooldownMs + 100;
    const expected = await anvilBlock(hash);
    const recovered = await rpc(url, getBlock('recovered', hash));
    expect(recovered.status).toBe(200);
    expect(recovered.body).toEqual({ jsonrpc: '2.0', id: 'recovered', result: expected });
    expect(breaker.calls).toHaveLength(BREAKER.failureThreshold + 2);
    const after = await rpc(url, getBlock('after', anvil.seed.blocksWithTransactions[2]!));
    expect(after.status).toBe(200);
    expect(breaker.calls).toHaveLength(BREAKER.failureThreshold + 3);
  });
});

describe('request ids', () => {
  it('restores the client id of every JSON-RPC type; the upstream sees gateway-owned numeric ids', async () => {
    const clientIds: unknown[] = ['a-string-id', 0, 123456789, -5, 1.5, null, '7'];
    // A different block per call, so a cache hit cannot stand in for the upstream call.
    const hashes = anvil.seed.blocksWithTransactions.slice(1, 1 + clientIds.length);
    expect(hashes).toHaveLength(clientIds.length);
    for (const [index, id] of clientIds.entries()) {
      const hash = hashes[index]!;
      const expected = await anvilBlock(hash);
      const before = ids.calls.length;
      const res = await rpc(gateway.url('ids'), getBlock(id, hash));
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ jsonrpc: '2.0', id, result: expected });
      expect(ids.calls.length).toBe(before + 1);
      const forwarded = ids.calls[before]!.body as { id: unknown };
      expect(typeof forwarded.id).toBe('number');
    }
    // The upstream never saw a client's id.
    const seen = ids.calls.map((call) => (call.body as { id: unknown }).id);
    expect(seen).not.toContain('a-string-id');
    expect(seen).not.toContain('7');
    expect(new Set(seen).size).toBe(seen.length);
  });
});

describe('batches', () => {
  it('gives a failed item its own -32603 while the others succeed, HTTP 200', async () => {
    const good = anvil.seed.blocksWithTransactions[0]!;
    const other = anvil.seed.blocksWithTransactions[2]!;
    const [expectedGood, expectedOther] = await Promise.all([anvilBlock(good), anvilBlock(other, true)]);

    const res = await rpc(gateway.url('batch'), [
      getBlock('first', good),
      getBlock('poisoned', poisonedHash),
      getBlock(3, other, true),
      { jsonrpc: '2.0', id: 'chain', method: 'eth_chainId' },
    ]);
    expect(res.status).toBe(200);
    expect(Array.isArray(res.body)).toBe(true);
    expect(res.body).toHaveLength(4);
    const byId = new Map((res.body as Array<{ id: unknown }>).map((reply) => [reply.id, reply]));
    expect(byId.get('first')).toEqual({ jsonrpc: '2.0', id: 'first', result: expectedGood });
    expect(byId.get(3)).toEqual({ jsonrpc: '2.0', id: 3, result: expectedOther });
    expect(byId.get('chain')).toEqual({ jsonrpc: '2.0', id: 'chain', result: '0x7a69' });
    const failed = byId.get('poisoned') as unknown as { error: { code: number; data: { attempts: unknown[] } } };
    expect(failed).toMatchObject({ jsonrpc: '2.0', id: 'poisoned', error: { code: -32603 } });
    expect('result' in failed).toBe(false);
    expect(failed.error.data.attempts).toEqual([
      { upstream: 'one', reason: expect.stringMatching(/502/) },
      { upstream: 'two', reason: expect.stringMatching(/502/) },
    ]);
    const poisonedCalls = batch.calls.filter((call) => (call.body as { params?: unknown[] }).params?.[0] === poisonedHash);
    expect(poisonedCalls).toHaveLength(2);
  });
});
