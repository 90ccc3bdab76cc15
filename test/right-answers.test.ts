// Only right answers (docs/routing.md, docs/verification.md), through a real gateway in front of
// scripted upstreams that proxy a real seeded anvil and lie, lag, send broken JSON, fail once or
// stall. One test per defect the right-answers issue lists; each compares what the client got with
// anvil's own answer and the ledger with the credits of the answers received.

import { afterEach, describe, expect, it } from 'vitest';
import { utcDay } from '../src/metering/meter.js';
import { directRpc, useSeededAnvil } from './helpers/anvil.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { until } from './helpers/until.js';
import { useScriptedUpstreams, type BehaviourFn, type ScriptedBehaviour } from './helpers/scripted-upstream.js';

const anvil = useSeededAnvil({}, { blocks: 12, txPerBlock: 3 });
const COST = 80;

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const upstream = useScriptedUpstreams();

async function gatewayOver(upstreams: Array<{ id: string; url: string } & Record<string, unknown>>, network: Record<string, unknown> = {}, now?: () => number): Promise<TestGateway> {
  const tg = await startTestGateway({ networks: [{ id: 'eth', kind: 'evm', chainId: 31337, upstreams, ...network }], now });
  cleanups.push(() => tg.close());
  return tg;
}

const honest = (): ScriptedBehaviour => ({ kind: 'proxy', url: anvil.node.url });

/** A proxy to anvil that rewrites each block it returns (keeping its real hash). */
function lying(alter: (block: Record<string, unknown>) => void): ScriptedBehaviour {
  return {
    kind: 'proxy',
    url: anvil.node.url,
    transform: (body) => {
      const reply = body as { result?: Record<string, unknown> | null };
      if (reply.result !== null && typeof reply.result === 'object' && 'hash' in reply.result) alter(reply.result);
      return reply;
    },
  };
}

const getBlock = (hash: string, hydrated: boolean, id: unknown = 1) => ({ jsonrpc: '2.0', id, method: 'eth_getBlockByHash', params: [hash, hydrated] });
const anvilBlock = (hash: string, hydrated: boolean) => directRpc(anvil.node.url, 'eth_getBlockByHash', [hash, hydrated]);

async function teamSpend(tg: TestGateway): Promise<number> {
  const [result] = await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day: utcDay(Date.now()) }]);
  return result!.teamUsed;
}

async function metricsText(tg: TestGateway): Promise<string> {
  const response = await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
  return response.text();
}

function logLine(tg: TestGateway, requestId: string | null): Record<string, any> {
  const line = tg.logLines.map((raw) => JSON.parse(raw) as Record<string, any>).find((entry) => entry.requestId === requestId && entry.msg === 'request');
  if (line === undefined) throw new Error(`no log line for ${requestId}`);
  return line;
}

const ALTERATIONS: Array<[string, (block: Record<string, any>) => void]> = [
  ['stateRoot', (block) => (block.stateRoot = `0x${'5a'.repeat(32)}`)],
  ['miner', (block) => (block.miner = `0x${'77'.repeat(20)}`)],
  ['gasUsed', (block) => (block.gasUsed = '0x1')],
  ['a dropped transaction', (block) => (block.transactions as unknown[]).pop()],
  ['a transaction value', (block) => {
    const transaction = (block.transactions as Array<Record<string, unknown> | string>)[0];
    if (typeof transaction === 'object') transaction.value = '0xdeadbeef';
  }],
];

describe('a lying upstream: the real hash with altered contents', () => {
  for (const [field, alter] of ALTERATIONS) {
    it(`never answers or caches a block with an altered ${field}, charges only the verified answer`, async () => {
      const liar = await upstream(lying(alter));
      const good = await upstream(honest());
      const tg = await gatewayOver([{ id: 'liar', url: liar.url }, { id: 'good', url: good.url }]);
      const hash = anvil.seed.blocksWithTransactions[0]!;

      for (const hydrated of [false, true]) {
        const res = await rpc(tg.url('eth'), getBlock(hash, hydrated, `h-${hydrated}`));
        expect(res.status).toBe(200);
        expect(res.body.result).toEqual(await anvilBlock(hash, hydrated));
      }
      // The first call was a miss answered by the honest upstream after the liar's block failed.
      expect(liar.calls.length).toBeGreaterThanOrEqual(1);
      expect(good.calls.length).toBeGreaterThanOrEqual(1);
      // The liar turns honest; what the cache holds is still the verified block.
      liar.setBehaviour(honest());
      const again = await rpc(tg.url('eth'), getBlock(hash, true, 'again'));
      expect(again.headers.get('x-cache')).toBe('hit');
      expect(again.body.result).toEqual(await anvilBlock(hash, true));
      expect(await teamSpend(tg)).toBe(3 * COST);
      expect(await metricsText(tg)).toMatch(/tollgate_upstream_requests_total\{network="eth",upstream="liar",outcome="unverified_block"\} [1-9]/);
    });
  }

  it('answers -32603 and charges nothing when every upstream lies; the log says which check failed', async () => {
    const liars = [await upstream(lying((block) => (block.gasUsed = '0x2'))), await upstream(lying((block) => (block.transactions as unknown[]).reverse()))];
    const tg = await gatewayOver(liars.map((liar, index) => ({ id: `liar${index}`, url: liar.url })));
    const hash = anvil.seed.blocksWithTransactions[1]!;
    const res = await rpc(tg.url('eth'), getBlock(hash, false));
    expect(res.status).toBe(502);
    expect(res.body.error.code).toBe(-32603);
    expect(res.body.error.data.attempts).toEqual([
      { upstream: 'liar0', reason: 'unverified_block', detail: expect.stringMatching(/header/) },
      { upstream: 'liar1', reason: 'unverified_block', detail: expect.stringMatching(/transaction/) },
    ]);
    expect(await teamSpend(tg)).toBe(0);
    expect(res.headers.get('x-credits-cost')).toBe('0');
  });
});

describe('a lagging upstream that answers null', () => {
  it("is not believed while another upstream has the block; the null is confirmed when nobody has it", async () => {
    const lagging = await upstream(lying(() => undefined));
    lagging.setBehaviour({ kind: 'proxy', url: anvil.node.url, transform: (body) => ({ ...(body as object), result: null }) });
    const good = await upstream(honest());
    const tg = await gatewayOver([{ id: 'lagging', url: lagging.url }, { id: 'good', url: good.url }]);
    const hash = anvil.seed.blocksWithTransactions[2]!;

    const res = await rpc(tg.url('eth'), getBlock(hash, false, 'known'));
    expect(res.body.result).toEqual(await anvilBlock(hash, false));
    expect(lagging.calls).toHaveLength(1);
    expect(good.calls).toHaveLength(1);

    const unknown = `0x${'ab'.repeat(32)}`;
    const missing = await rpc(tg.url('eth'), getBlock(unknown, false, 'unknown'));
    expect(missing.status).toBe(200);
    expect(missing.body).toEqual({ jsonrpc: '2.0', id: 'unknown', result: null });
    expect(await teamSpend(tg)).toBe(2 * COST);

    const metrics = await metricsText(tg);
    expect(metrics).toMatch(/tollgate_null_confirmations_total\{network="eth",result="contradicted"\} 1/);
    expect(metrics).toMatch(/tollgate_null_confirmations_total\{network="eth",result="confirmed"\} 1/);
  });
});

describe('invalid JSON from an upstream', () => {
  const broken = (literal: string): BehaviourFn => (call) => ({
    kind: 'raw',
    contentType: 'application/json',
    body: `{"jsonrpc":"2.0","id":${JSON.stringify((call.body as { id: unknown }).id)},"result":${literal}}`,
  });

  for (const literal of ['{"a":tru}', '[1,2,]', '"unterminated', '{"n":01}', '{"s":"\u0001"}']) {
    it(`fails over on a result of ${JSON.stringify(literal)} and never passes it on`, async () => {
      const bad = await upstream(broken(literal));
      const good = await upstream({ kind: 'result', result: { ok: true } });
      const tg = await gatewayOver([{ id: 'bad', url: bad.url }, { id: 'good', url: good.url }], { methods: { eth_call: 80 } });
      const res = await rpc(tg.url('eth'), { jsonrpc: '2.0', id: 7, method: 'eth_call', params: [{ to: `0x${'11'.repeat(20)}` }, 'latest'] });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ jsonrpc: '2.0', id: 7, result: { ok: true } });
      expect(logLine(tg, res.headers.get('x-request-id')).attempts).toEqual([{ upstream: 'bad', reason: 'bad_json' }]);
    });
  }

  it('charges nothing when no upstream answers valid JSON', async () => {
    const bad = await upstream(broken('{"a":tru}'));
    const tg = await gatewayOver([{ id: 'bad', url: bad.url }], { methods: { eth_call: 80 } });
    const res = await rpc(tg.url('eth'), { jsonrpc: '2.0', id: 8, method: 'eth_call', params: [] });
    expect(res.status).toBe(502);
    expect(res.body.error.data.attempts).toEqual([{ upstream: 'bad', reason: 'bad_json' }]);
    expect(await teamSpend(tg)).toBe(0);
  });
});

describe('selection that learns and recovers', () => {
  it('sends traffic to an upstream again after a single HTTP 500, while its peer stays healthy', async () => {
    let offsetMs = 0;
    const now = () => Date.now() + offsetMs;
    const first = await upstream(honest());
    const second = await upstream(honest());
    const tg = await gatewayOver([{ id: 'first', url: first.url }, { id: 'second', url: second.url }], { hedge: { enabled: false } }, now);
    const blocks = anvil.seed.blockHashes;
    let next = 0;
    const call = () => rpc(tg.url('eth'), getBlock(blocks[next++ % blocks.length]!, true, next)).then((res) => expect(res.status).toBe(200));

    first.setBehaviour((_call, index) => (index === 0 ? { kind: 'status', status: 500 } : honest()));
    await call(); // first fails once, second answers
    const before = first.calls.length;
    await call();
    expect(first.calls.length).toBe(before); // ranked behind its peer right after the failure
    // A minute later (twelve half-lives) the failure has faded: the first upstream is tried again.
    offsetMs += 60_000;
    for (let n = 0; n < 3; n += 1) await call();
    expect(first.calls.length).toBeGreaterThan(before);
  });

  it('lets a recovered upstream take traffic again after its circuit opened: the probe takes the trial', async () => {
    let offsetMs = 0;
    const now = () => Date.now() + offsetMs;
    const flaky = await upstream({ kind: 'status', status: 503 });
    const good = await upstream(honest());
    const tg = await gatewayOver([{ id: 'flaky', url: flaky.url }, { id: 'good', url: good.url }], {
      circuitBreaker: { failureThreshold: 2, cooldownMs: 300 },
      healthCheck: { intervalMs: 100, timeoutMs: 500 },
      hedge: { enabled: false },
      // Equal weights: once its circuit is closed the recovered upstream gets half the first
      // attempts, whichever of the two the latency estimates happen to favour at the moment.
      selection: 'weighted',
    }, now);
    const hash = anvil.seed.blockHashes[3]!;
    // Probes alone open the circuit of the failing upstream.
    await expect.poll(async () => (await metricsText(tg)).match(/tollgate_upstream_circuit_state\{network="eth",upstream="flaky"\} (\d)/)?.[1], { timeout: 5_000 }).toBe('2');
    flaky.setBehaviour(honest());
    // After the cooldown a probe is the trial; it succeeds and the circuit closes without any client request.
    await expect.poll(async () => (await metricsText(tg)).match(/tollgate_upstream_circuit_state\{network="eth",upstream="flaky"\} (\d)/)?.[1], { timeout: 5_000 }).toBe('0');
    const before = flaky.calls.filter((c) => c.methods.includes('eth_getBlockByHash')).length;
    // Its failed probes still weigh on its share of the draw until they fade (half-life 5 s):
    // a minute later on the gateway's clock (twelve half-lives) they have, whatever the machine's speed.
    offsetMs += 60_000;
    // Both healthy again: requests reach the recovered one too. Not a fixed number of draws: on a
    // loaded machine a probe may time out (500 ms) and shut the circuit for a cooldown, during
    // which every draw goes to the peer. Requests go on until one reaches it, each answered.
    let sent = 0;
    await until(async () => {
      const n = sent++;
      const reply = await rpc(tg.url('eth'), getBlock(anvil.seed.blockHashes[n % anvil.seed.blockHashes.length]!, n % 2 === 0, n));
      expect(reply.status).toBe(200);
      return flaky.calls.filter((c) => c.methods.includes('eth_getBlockByHash')).length > before;
    }, 'a call to reach the recovered upstream');
    expect((await rpc(tg.url('eth'), getBlock(hash, false))).status).toBe(200);
    const metrics = await metricsText(tg);
    expect(metrics).toMatch(/tollgate_upstream_head_block\{network="eth",upstream="flaky"\} \d+/);
    expect(metrics).toMatch(/tollgate_upstream_probes_total\{network="eth",upstream="flaky",outcome="http_503"\} [1-9]/);
  });

  it('spreads load across healthy upstreams by weight under selection: weighted', async () => {
    const [a, b] = [await upstream(honest()), await upstream(honest())];
    const tg = await gatewayOver([{ id: 'a', url: a.url, weight: 1 }, { id: 'b', url: b.url, weight: 1 }], {
      selection: 'weighted',
      hedge: { enabled: false },
      methods: { eth_blockNumber: 80 },
    });
    for (let n = 0; n < 40; n += 1) {
      const res = await rpc(tg.url('eth'), { jsonrpc: '2.0', id: n, method: 'eth_blockNumber' });
      expect(res.status).toBe(200);
    }
    // 40 fair draws: each side gets at least 8 with probability > 0.9999.
    expect(a.calls.length).toBeGreaterThanOrEqual(8);
    expect(b.calls.length).toBeGreaterThanOrEqual(8);
  });
});

describe('a stalled upstream', () => {
  it('holds no request for its attempt timeout: hedged reads are answered by the healthy peer, single-flight followers too', async () => {
    const stalled = await upstream({ kind: 'stall' });
    const good = await upstream(honest());
    const tg = await gatewayOver(
      [
        { id: 'stalled', url: stalled.url, timeoutMs: 5_000 },
        { id: 'good', url: good.url },
      ],
      { hedge: { delayMs: 100 } },
    );
    const hash = anvil.seed.blocksWithTransactions[4]!;
    const expected = await anvilBlock(hash, false);
    const started = performance.now();
    // Ten concurrent identical misses: one leader, nine single-flight followers.
    const answers = await Promise.all(Array.from({ length: 10 }, (_, id) => rpc(tg.url('eth'), getBlock(hash, false, id))));
    const elapsed = performance.now() - started;
    for (const answer of answers) expect(answer.body.result).toEqual(expected);
    // Far inside the stalled attempt's 5 s timeout: the hedge after 100 ms answered everyone.
    expect(elapsed).toBeLessThan(2_500);
    expect(logLine(tg, answers[0]!.headers.get('x-request-id')).upstream).toBe('good');
    expect(await teamSpend(tg)).toBe(10 * COST);
    // New calls now rank the stalled upstream behind its peer without waiting for the hedge.
    const stalledBefore = stalled.calls.length;
    for (let n = 0; n < 3; n += 1) await rpc(tg.url('eth'), getBlock(anvil.seed.blockHashes[n]!, true, `n${n}`));
    expect(stalled.calls.length).toBe(stalledBefore);
    expect(await metricsText(tg)).toMatch(/tollgate_hedges_total\{network="eth",result="won"\} 1/);
  });
});
