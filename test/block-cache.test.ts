// The eth_getBlockByHash cache (docs/caching.md): hits never reach an upstream and are still
// charged, concurrent misses share one upstream call (single-flight) while each follower keeps its
// own deadline, and only verified blocks are cached — never `null`, errors or a block whose hash is
// not the one asked for. Real gateways and scripted upstreams on loopback, real anvil for the
// hydrated → non-hydrated mapping, and the byte-bounded LRU on its own.

import { afterEach, describe, expect, it } from 'vitest';
import { createBlockCache } from '../src/cache/memory-tier.js';
import { utcDay } from '../src/metering/meter.js';
import { directRpc, useSeededAnvil } from './helpers/anvil.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { useScriptedUpstreams, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const NETWORK = 'eth';
const COST = 80;
const anvil = useSeededAnvil({}, { blocks: 3, txPerBlock: 3 });

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const upstream = useScriptedUpstreams();

async function gatewayOver(
  upstreams: Array<ScriptedUpstream | { upstream: ScriptedUpstream; timeoutMs: number }>,
  options: { requestTimeoutMs?: number; now?: () => number } = {},
): Promise<TestGateway> {
  const tg = await startTestGateway({
    networks: [
      {
        id: NETWORK,
        kind: 'evm',
        chainId: 31337,
        // The cache's own mechanics, with made-up blocks: only their `hash` field is checked here.
        // Verification of real blocks has its own suites (block-verification, verified-blocks).
        verification: 'off',
        ...(options.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: options.requestTimeoutMs }),
        upstreams: upstreams.map((entry, index) =>
          'upstream' in entry ? { id: `u${index}`, url: entry.upstream.url, timeoutMs: entry.timeoutMs } : { id: `u${index}`, url: entry.url },
        ),
      },
    ],
    now: options.now,
  });
  cleanups.push(() => tg.close());
  return tg;
}

/** A distinct, well-formed block hash per test. */
let nextHash = 1;
function freshHash(): string {
  return `0x${(nextHash++).toString(16).padStart(64, 'c')}`;
}

/** A block-shaped answer for `hash` (only `hash` is checked by the gateway). */
function fakeBlock(hash: string): Record<string, unknown> {
  return { hash, number: '0x10', parentHash: `0x${'11'.repeat(32)}`, timestamp: '0x64', transactions: [`0x${'aa'.repeat(32)}`] };
}

/** Answers every eth_getBlockByHash with a block carrying the requested hash. */
const honest: ScriptedBehaviour = { kind: 'result', result: (item: unknown) => fakeBlock((item as { params: [string] }).params[0]) };

function getBlock(hash: string, hydrated = false, id: number | string = 1) {
  return { jsonrpc: '2.0', id, method: 'eth_getBlockByHash', params: [hash, hydrated] };
}

async function teamSpend(tg: TestGateway): Promise<number> {
  const [result] = await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day: utcDay(Date.now()) }]);
  return result!.teamUsed;
}

const anvilCall = (method: string, params: unknown[]): Promise<unknown> => directRpc(anvil.node.url, method, params);

describe('cache hits', () => {
  it('a second identical call never reaches the upstream: X-Cache miss, then hit with the same result', async () => {
    const up = await upstream(honest);
    const tg = await gatewayOver([up]);
    const hash = freshHash();

    const first = await rpc(tg.url(NETWORK), getBlock(hash, false, 1));
    expect(first.status).toBe(200);
    expect(first.headers.get('x-cache')).toBe('miss');
    expect(first.body).toEqual({ jsonrpc: '2.0', id: 1, result: fakeBlock(hash) });
    expect(up.calls).toHaveLength(1);

    const second = await rpc(tg.url(NETWORK), getBlock(hash, false, 'two'));
    expect(second.status).toBe(200);
    expect(second.headers.get('x-cache')).toBe('hit');
    expect(second.body).toEqual({ jsonrpc: '2.0', id: 'two', result: first.body.result });
    expect(up.calls).toHaveLength(1);

    // The hash is canonicalised before the lookup: an upper-case spelling hits the same entry.
    const upper = await rpc(tg.url(NETWORK), getBlock(`0x${hash.slice(2).toUpperCase()}`, false, 3));
    expect(upper.headers.get('x-cache')).toBe('hit');
    expect(upper.body.result).toEqual(first.body.result);
    expect(up.calls).toHaveLength(1);
  });

  it('every hit is metered: X-Credits-Cost 80, the balance falls by 80, the ledger counts it', async () => {
    const up = await upstream(honest);
    const tg = await gatewayOver([up]);
    const hash = freshHash();
    const daily = tg.team.dailyCredits;

    const miss = await rpc(tg.url(NETWORK), getBlock(hash));
    expect(miss.headers.get('x-cache')).toBe('miss');
    expect(miss.headers.get('x-credits-cost')).toBe(String(COST));
    expect(miss.headers.get('x-credits-remaining')).toBe(String(daily - COST));

    for (let n = 2; n <= 4; n += 1) {
      const hit = await rpc(tg.url(NETWORK), getBlock(hash));
      expect(hit.headers.get('x-cache')).toBe('hit');
      expect(hit.headers.get('x-credits-cost')).toBe(String(COST));
      expect(hit.headers.get('x-credits-remaining')).toBe(String(daily - n * COST));
    }
    expect(up.calls).toHaveLength(1);
    expect(await teamSpend(tg)).toBe(4 * COST);
  });
});

describe('single-flight', () => {
  it('50 concurrent misses for one hash make exactly 1 upstream call; all 50 get the same block and are charged', async () => {
    const up = await upstream({ ...honest, delayMs: 200 });
    const tg = await gatewayOver([up]);
    const hash = freshHash();

    const responses = await Promise.all(Array.from({ length: 50 }, (_, index) => rpc(tg.url(NETWORK), getBlock(hash, false, index))));

    expect(up.calls).toHaveLength(1);
    responses.forEach((response, index) => {
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ jsonrpc: '2.0', id: index, result: fakeBlock(hash) });
      expect(response.headers.get('x-credits-cost')).toBe(String(COST));
    });
    expect(await teamSpend(tg)).toBe(50 * COST);

    // And the shared answer was cached for the next caller.
    const after = await rpc(tg.url(NETWORK), getBlock(hash));
    expect(after.headers.get('x-cache')).toBe('hit');
    expect(up.calls).toHaveLength(1);
  });

  it('when the leader stalls, the followers answer -32603 at their deadline and cost nothing', async () => {
    const REQUEST_TIMEOUT_MS = 400;
    const up = await upstream({ kind: 'stall' });
    const tg = await gatewayOver([up], { requestTimeoutMs: REQUEST_TIMEOUT_MS });
    const hash = freshHash();

    const started = performance.now();
    const responses = await Promise.all(
      Array.from({ length: 10 }, async (_, index) => {
        const response = await rpc(tg.url(NETWORK), getBlock(hash, false, index));
        return { ...response, elapsedMs: performance.now() - started };
      }),
    );
    expect(up.calls).toHaveLength(1);
    for (const response of responses) {
      expect(response.status).toBe(504);
      expect(response.body.error.code).toBe(-32603);
      expect(response.headers.get('x-credits-cost')).toBe('0');
      expect(response.elapsedMs).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 50);
      expect(response.elapsedMs).toBeLessThan(REQUEST_TIMEOUT_MS + 600);
    }
    expect(await teamSpend(tg)).toBe(0);
  });

  it('a follower whose deadline comes before the leader\'s gets -32603 at its own deadline, not the leader\'s', async () => {
    // The leader's deadline is made later than the followers' by stepping the wall clock back
    // 10 s while its first attempt is in flight (as NTP may): its second attempt then gets a 5 s
    // budget, while followers sent after the step have only REQUEST_TIMEOUT_MS each.
    const REQUEST_TIMEOUT_MS = 600;
    let offsetMs = 0;
    const now = () => Date.now() + offsetMs;
    const first = await upstream(() => {
      offsetMs -= 10_000;
      return { kind: 'stall' };
    });
    const second = await upstream({ kind: 'stall' });
    const tg = await gatewayOver([{ upstream: first, timeoutMs: 200 }, { upstream: second, timeoutMs: 5_000 }], {
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      now,
    });
    const hash = freshHash();

    let leaderDone = false;
    const leader = rpc(tg.url(NETWORK), getBlock(hash, false, 'leader')).finally(() => {
      leaderDone = true;
    });
    await expect.poll(() => first.calls.length, { timeout: 2_000, interval: 5 }).toBe(1);

    const started = performance.now();
    const followers = await Promise.all(
      Array.from({ length: 5 }, async (_, index) => {
        const response = await rpc(tg.url(NETWORK), getBlock(hash, false, index));
        return { ...response, elapsedMs: performance.now() - started };
      }),
    );
    for (const follower of followers) {
      expect(follower.status).toBe(504);
      expect(follower.body).toMatchObject({ jsonrpc: '2.0', error: { code: -32603 } });
      expect(follower.headers.get('x-credits-cost')).toBe('0');
      expect(follower.elapsedMs).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 50);
      expect(follower.elapsedMs).toBeLessThan(REQUEST_TIMEOUT_MS + 500);
    }
    // The leader is still waiting on its second upstream; the followers did not call anything.
    expect(leaderDone).toBe(false);
    await expect.poll(() => second.calls.length, { timeout: 2_000, interval: 5 }).toBe(1);
    expect(first.calls).toHaveLength(1);

    // End the leader's stall: its attempt fails, and it answers -32603 too.
    await second.close();
    const leaderResponse = await leader;
    expect(leaderResponse.body.error.code).toBe(-32603);
    expect(await teamSpend(tg)).toBe(0);
  });
});

describe('only verified blocks are cached', () => {
  it('a null answer is not cached: the next call goes upstream and gets the block', async () => {
    const hash = freshHash();
    const up = await upstream((_call, index) => (index === 0 ? { kind: 'result', result: null } : honest));
    const tg = await gatewayOver([up]);

    const first = await rpc(tg.url(NETWORK), getBlock(hash));
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ jsonrpc: '2.0', id: 1, result: null });
    expect(first.headers.get('x-cache')).toBe('miss');

    const second = await rpc(tg.url(NETWORK), getBlock(hash));
    expect(second.headers.get('x-cache')).toBe('miss');
    expect(second.body.result).toEqual(fakeBlock(hash));
    expect(up.calls).toHaveLength(2);

    const third = await rpc(tg.url(NETWORK), getBlock(hash));
    expect(third.headers.get('x-cache')).toBe('hit');
    expect(up.calls).toHaveLength(2);
  });

  it('upstream errors are not cached: the next call goes upstream again', async () => {
    const hash = freshHash();
    const up = await upstream({ kind: 'rpc-error', code: -32000, message: 'header not found' });
    const tg = await gatewayOver([up]);

    for (let n = 1; n <= 2; n += 1) {
      const response = await rpc(tg.url(NETWORK), getBlock(hash));
      expect(response.status).toBe(200);
      expect(response.body).toEqual({ jsonrpc: '2.0', id: 1, error: { code: -32000, message: 'header not found' } });
      expect(response.headers.get('x-cache')).toBe('miss');
      expect(up.calls).toHaveLength(n);
    }

    // A failure of every upstream is not cached either.
    up.setBehaviour({ kind: 'status', status: 500 });
    expect((await rpc(tg.url(NETWORK), getBlock(hash))).status).toBe(502);
    up.setBehaviour(honest);
    const recovered = await rpc(tg.url(NETWORK), getBlock(hash));
    expect(recovered.body.result).toEqual(fakeBlock(hash));
    expect(recovered.headers.get('x-cache')).toBe('miss');
    expect(up.calls).toHaveLength(4);
  });

  it('a block with the wrong hash is never cached, under the asked hash or its own', async () => {
    const asked = freshHash();
    const other = freshHash();
    // Whatever it is asked, the liar answers with the block of `other`.
    const liar = await upstream({ kind: 'result', result: fakeBlock(other) });
    const honestUpstream = await upstream(honest);
    const tg = await gatewayOver([liar, honestUpstream]);

    // The lie is an upstream failure: the gateway fails over and answers with the honest block.
    const first = await rpc(tg.url(NETWORK), getBlock(asked));
    expect(first.status).toBe(200);
    expect(first.body.result).toEqual(fakeBlock(asked));
    expect(first.headers.get('x-cache')).toBe('miss');
    expect(liar.calls).toHaveLength(1);
    expect(honestUpstream.calls).toHaveLength(1);

    // What is cached for `asked` is the honest block.
    const again = await rpc(tg.url(NETWORK), getBlock(asked));
    expect(again.headers.get('x-cache')).toBe('hit');
    expect(again.body.result).toEqual(fakeBlock(asked));

    // The liar's block was not cached under its own hash either: asking for it goes upstream.
    const lying = await rpc(tg.url(NETWORK), getBlock(other));
    expect(lying.headers.get('x-cache')).toBe('miss');
    expect(liar.calls.length + honestUpstream.calls.length).toBe(3);
  });

  it('with only a lying upstream every call fails with -32603 and goes upstream again', async () => {
    const asked = freshHash();
    const liar = await upstream({ kind: 'result', result: fakeBlock(freshHash()) });
    const tg = await gatewayOver([liar]);

    for (let n = 1; n <= 2; n += 1) {
      const response = await rpc(tg.url(NETWORK), getBlock(asked));
      expect(response.status).toBe(502);
      expect(response.body.error.code).toBe(-32603);
      expect(JSON.stringify(response.body.error.data.attempts)).toMatch(/hash/);
      expect(response.headers.get('x-cache')).toBe('miss');
      expect(response.headers.get('x-credits-cost')).toBe('0');
      expect(liar.calls).toHaveLength(n);
    }
  });
});

describe('hydrated entries answer non-hydrated calls (real anvil)', () => {
  it('hydrated=true then hydrated=false: one upstream call, and exactly the hashes anvil returns', async () => {
    const proxy = await upstream({ kind: 'proxy', url: anvil.node.url });
    const tg = await gatewayOver([proxy]);
    const hash = anvil.seed.blocksWithTransactions[0]!;

    const full = await rpc(tg.url(NETWORK), getBlock(hash, true));
    expect(full.headers.get('x-cache')).toBe('miss');
    expect(full.body.result).toEqual(await anvilCall('eth_getBlockByHash', [hash, true]));
    expect(proxy.calls).toHaveLength(1);

    const hashesOnly = await rpc(tg.url(NETWORK), getBlock(hash, false));
    expect(hashesOnly.headers.get('x-cache')).toBe('hit');
    expect(hashesOnly.headers.get('x-credits-cost')).toBe(String(COST));
    expect(proxy.calls).toHaveLength(1);
    const expected = (await anvilCall('eth_getBlockByHash', [hash, false])) as { transactions: string[] };
    expect(expected.transactions.length).toBeGreaterThan(0);
    expect(hashesOnly.body.result).toEqual(expected);
  });

  it('a non-hydrated entry does not answer a hydrated call', async () => {
    const proxy = await upstream({ kind: 'proxy', url: anvil.node.url });
    const tg = await gatewayOver([proxy]);
    const hash = anvil.seed.blocksWithTransactions[1]!;

    await rpc(tg.url(NETWORK), getBlock(hash, false));
    const full = await rpc(tg.url(NETWORK), getBlock(hash, true));
    expect(full.headers.get('x-cache')).toBe('miss');
    expect(full.body.result).toEqual(await anvilCall('eth_getBlockByHash', [hash, true]));
    expect(proxy.calls).toHaveLength(2);
  });
});

describe('createBlockCache (byte-bounded LRU)', () => {
  const BLOCK_BYTES = 2_000;
  const blockBytes = (hash: string) => {
    const json = JSON.stringify({ hash, extraData: `0x${'00'.repeat(BLOCK_BYTES / 2)}`, transactions: [] });
    return Buffer.from(json);
  };
  const hashOf = (n: number) => `0x${n.toString(16).padStart(64, '0')}`;

  it('filling it with twice maxBytes of blocks keeps its size within maxBytes', () => {
    const maxBytes = 64 * 1024;
    const cache = createBlockCache({ maxBytes });
    let inserted = 0;
    let insertedBytes = 0;
    while (insertedBytes < 2 * maxBytes) {
      const value = blockBytes(hashOf(inserted));
      cache.set('net', hashOf(inserted), false, value);
      inserted += 1;
      insertedBytes += value.length;
      const stats = cache.stats();
      expect(stats.bytes).toBeLessThanOrEqual(maxBytes);
      expect(stats.maxBytes).toBe(maxBytes);
    }
    const stats = cache.stats();
    expect(stats.entries).toBeLessThan(inserted);
    expect(stats.entries).toBeGreaterThan(0);
    expect(stats.evictions).toBe(inserted - stats.entries);
    // More than half full: the bound is used, not just respected.
    expect(stats.bytes).toBeGreaterThan(maxBytes / 2);
    // The newest entry is there, the oldest is gone.
    expect(cache.get('net', hashOf(inserted - 1), false)?.equals(blockBytes(hashOf(inserted - 1)))).toBe(true);
    expect(cache.get('net', hashOf(0), false)).toBeUndefined();
  });

  it('evicts the least recently used entry: a recently read entry survives', () => {
    const entryBytes = blockBytes(hashOf(0)).length;
    const cache = createBlockCache({ maxBytes: 10 * (entryBytes + 400) });
    let n = 0;
    while (cache.stats().evictions === 0) {
      cache.set('net', hashOf(n), false, blockBytes(hashOf(n)));
      n += 1;
    }
    // hashOf(0) went first. Read hashOf(1) (now the oldest), then insert more.
    expect(cache.get('net', hashOf(0), false)).toBeUndefined();
    expect(cache.get('net', hashOf(1), false)).toBeDefined();
    cache.set('net', hashOf(n), false, blockBytes(hashOf(n)));
    cache.set('net', hashOf(n + 1), false, blockBytes(hashOf(n + 1)));
    expect(cache.get('net', hashOf(1), false)).toBeDefined();
    expect(cache.get('net', hashOf(2), false)).toBeUndefined();
    expect(cache.get('net', hashOf(3), false)).toBeUndefined();
    expect(cache.get('net', hashOf(4), false)).toBeDefined();
  });

  it('keys by network and hydrated flag; a hydrated entry yields the hashes-only form', () => {
    const cache = createBlockCache({ maxBytes: 1024 * 1024 });
    const hash = hashOf(7);
    const hydrated = { hash, number: '0x7', transactions: [{ hash: `0x${'01'.repeat(32)}`, from: '0xabc' }, { hash: `0x${'02'.repeat(32)}`, from: '0xdef' }] };
    cache.set('net', hash, true, Buffer.from(JSON.stringify(hydrated)));

    expect(cache.get('other-net', hash, true)).toBeUndefined();
    expect(JSON.parse(cache.get('net', hash, true)!.toString())).toEqual(hydrated);
    expect(JSON.parse(cache.get('net', hash, false)!.toString())).toEqual({ ...hydrated, transactions: [`0x${'01'.repeat(32)}`, `0x${'02'.repeat(32)}`] });

    // The derived form is an entry of its own, counted in entries and bytes.
    expect(cache.stats().entries).toBe(2);

    // The other way round does not hold: hashes cannot become transactions.
    const hashOnly = hashOf(8);
    cache.set('net', hashOnly, false, Buffer.from(JSON.stringify({ hash: hashOnly, transactions: [] })));
    expect(cache.get('net', hashOnly, true)).toBeUndefined();
  });

  it('keeps one hash on two networks apart, and evicts all forms of a hash together', () => {
    const hash = hashOf(9);
    const onNet = blockBytes(hash);
    const onFork = Buffer.from(JSON.stringify({ hash, extraData: '0xf0', transactions: [] }));
    const bytesOf = (forms: Buffer[]) => forms.reduce((sum, bytes) => sum + bytes.length + 160, hash.length);
    const cache = createBlockCache({ maxBytes: bytesOf([onNet, onFork]) + 10 });
    cache.set('net', hash, false, onNet);
    cache.set('fork', hash, false, onFork);
    expect(cache.get('net', hash, false)?.equals(onNet)).toBe(true);
    expect(cache.get('fork', hash, false)?.equals(onFork)).toBe(true);
    expect(cache.stats()).toMatchObject({ entries: 2, bytes: bytesOf([onNet, onFork]), evictions: 0 });
    // Storing a form again replaces it: the size follows.
    const smaller = Buffer.from(JSON.stringify({ hash, transactions: [] }));
    cache.set('fork', hash, false, smaller);
    expect(cache.get('fork', hash, false)?.equals(smaller)).toBe(true);
    expect(cache.stats()).toMatchObject({ entries: 2, bytes: bytesOf([onNet, smaller]) });
    // Another block needs the room: both forms of the least recently used hash go.
    const other = hashOf(10);
    cache.set('net', other, false, blockBytes(other));
    expect(cache.get('net', hash, false)).toBeUndefined();
    expect(cache.get('fork', hash, false)).toBeUndefined();
    expect(cache.stats()).toMatchObject({ entries: 1, evictions: 2 });
  });
});
