// Archive depth (docs/routing.md#archive-depth): a pruned upstream keeps state for its last N
// blocks. Through a real gateway in front of two recording proxies of one real anvil (300+ blocks
// mined), one of which plays a pruned node and answers "missing trie node" for state older than
// head − 128: a declared `blockHistory` keeps old state reads away from it, an undeclared one is
// learned from its first such answer while the client still gets the archive's answer, charged
// once; every upstream pruned passes the node's error through; a learned depth expires (manual
// clock); the block locating of the state-read table; the filter, the learning and the policy alone.

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { METHOD_CACHING } from '../src/cache/method-classes.js';
import { ConfigError, parseConfig } from '../src/config/load.js';
import { utcDay } from '../src/metering/meter.js';
import { startAnvil, type AnvilNode } from '../src/devnet/anvil.js';
import { createArchiveDepth, LEARNED_DEPTH_TTL_MS, STATE_READS, stateBlockOf } from '../src/routing/archive-depth.js';
import { createForwarder, type Forwarder } from '../src/routing/forward.js';
import { isPrunedState, PRUNED_STATE, prunedStatePolicy } from '../src/routing/policies/pruned-state.js';
import type { Execution } from '../src/routing/policies/types.js';
import { UpstreamHealth } from '../src/routing/upstream-health.js';
import type { AttemptOutcome, RoutedUpstream } from '../src/routing/upstream.js';
import { directRpc } from './helpers/anvil.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { ManualClock } from './helpers/manual-clock.js';
import { useScriptedUpstreams, type BehaviourFn, type ReceivedCall, type RpcItem } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';
import { CallController } from '../src/routing/abort-signals.js';

/** Blocks with one transfer each from the first dev account: its nonce at block n is n. */
const TRANSFER_BLOCKS = 10;
const EMPTY_BLOCKS = 300;
const HEAD = TRANSFER_BLOCKS + EMPTY_BLOCKS;
const KEPT = 128;
/** The catalogue price of `eth_getTransactionCount`. */
const COST = 80;
const hex = (n: number) => `0x${n.toString(16)}`;

let anvil: AnvilNode;
let sender: string;
beforeAll(async () => {
  anvil = await startAnvil();
  [sender] = (await directRpc(anvil.url, 'eth_accounts', [])) as [string];
  for (let n = 1; n <= TRANSFER_BLOCKS; n += 1) {
    await directRpc(anvil.url, 'eth_sendTransaction', [{ from: sender, to: `0x${'11'.repeat(20)}`, value: hex(n) }]);
    // anvil answers the send before its block is the head: wait for it, so each transfer has its own block.
    await until(async () => (await directRpc(anvil.url, 'eth_blockNumber', [])) === hex(n), `block ${n}`);
  }
  await directRpc(anvil.url, 'anvil_mine', [hex(EMPTY_BLOCKS)]);
  expect(await directRpc(anvil.url, 'eth_blockNumber', [])).toBe(hex(HEAD));
}, 60_000);
afterAll(async () => {
  await anvil?.stop();
});

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const scripted = useScriptedUpstreams();

/** The block number of a state read this test sends (`[address, block]`), or undefined. */
function stateReadBlock(item: RpcItem): number | undefined {
  if (item.method !== 'eth_getTransactionCount' && item.method !== 'eth_getBalance') return undefined;
  const block = (item.params as unknown[])[1];
  const number = typeof block === 'object' && block !== null ? (block as { blockNumber?: unknown }).blockNumber : block;
  return typeof number === 'string' && number.startsWith('0x') ? Number.parseInt(number, 16) : undefined;
}

const isOldStateRead = (call: ReceivedCall) => {
  const block = stateReadBlock(call.body as RpcItem);
  return block !== undefined && block < HEAD - KEPT;
};
const isStateRead = (call: ReceivedCall) => call.methods[0] === 'eth_getTransactionCount' || call.methods[0] === 'eth_getBalance';

/** A proxy to anvil that answers like a geth node keeping the state of its last 128 blocks. */
function prunedNode(): BehaviourFn {
  return (call) =>
    isOldStateRead(call)
      ? { kind: 'rpc-error', code: -32000, message: `missing trie node ${'8b'.repeat(32)} (path )` }
      : { kind: 'proxy', url: anvil.url };
}

async function metricsText(tg: TestGateway): Promise<string> {
  const response = await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
  return response.text();
}

function metricValue(text: string, name: string, labels: string): number | undefined {
  const line = text.split('\n').find((entry) => entry.startsWith(`${name}{${labels}} `));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

async function teamSpend(tg: TestGateway): Promise<number> {
  const [result] = await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day: utcDay(Date.now()) }]);
  return result!.teamUsed;
}

/**
 * A gateway whose first attempts go to `pruned` (weighted, the archive at weight 0: only a
 * fallback), with probes on so that the head is known, hedges off and the number cache off so
 * that every call reaches an upstream and counts are exact.
 */
async function gatewayOver(upstreams: Array<Record<string, unknown> & { id: string; url: string }>): Promise<TestGateway> {
  const tg = await startTestGateway({
    networks: [
      {
        id: 'eth',
        kind: 'evm',
        chainId: 31337,
        selection: 'weighted',
        hedge: { enabled: false },
        healthCheck: { intervalMs: 200 },
        cache: { disable: ['finalized', 'pinned'] },
        upstreams,
      },
    ],
  });
  cleanups.push(() => tg.close());
  await until(async () => {
    const text = await metricsText(tg);
    return upstreams.every(({ id }) => metricValue(text, 'tollgate_upstream_head_block', `network="eth",upstream="${id}"`) === HEAD);
  }, 'every upstream probed at the head');
  return tg;
}

async function nonceAt(tg: TestGateway, block: unknown) {
  const before = await teamSpend(tg);
  const res = await rpc(tg.url('eth'), { jsonrpc: '2.0', id: 1, method: 'eth_getTransactionCount', params: [sender, block] });
  return { ...res, charged: (await teamSpend(tg)) - before };
}

describe('a declared pruned upstream (blockHistory: 128)', () => {
  it('never receives an older state read; recent ones still go to it first; the archive answers old ones, charged once', async () => {
    const pruned = await scripted(prunedNode());
    const archive = await scripted({ kind: 'proxy', url: anvil.url });
    const tg = await gatewayOver([
      { id: 'pruned', url: pruned.url, weight: 1, blockHistory: KEPT },
      { id: 'archive', url: archive.url, weight: 0 },
    ]);

    // Old blocks, by number and as EIP-1898 objects: the archive's (and anvil's) answers.
    for (const block of [hex(3), { blockNumber: hex(7) }, hex(HEAD - KEPT - 1)]) {
      const res = await nonceAt(tg, block);
      const expected = await directRpc(anvil.url, 'eth_getTransactionCount', [sender, block]);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ jsonrpc: '2.0', id: 1, result: expected });
      expect(res.headers.get('x-credits-cost')).toBe(String(COST));
      expect(res.charged).toBe(COST);
    }
    expect(pruned.calls.filter(isOldStateRead)).toEqual([]);
    expect(archive.calls.filter(isStateRead)).toHaveLength(3);

    // At head − 128 and at `latest` the pruned upstream keeps the state and, ranked first, answers.
    for (const block of [hex(HEAD - KEPT), 'latest']) {
      const res = await nonceAt(tg, block);
      expect(res.body.result).toBe(hex(TRANSFER_BLOCKS));
      expect(res.charged).toBe(COST);
    }
    expect(pruned.calls.filter(isStateRead)).toHaveLength(2);
    expect(archive.calls.filter(isStateRead)).toHaveLength(3);

    const text = await metricsText(tg);
    expect(metricValue(text, 'tollgate_upstream_archive_skips_total', 'network="eth",upstream="pruned"')).toBe(3);
    expect(metricValue(text, 'tollgate_upstream_state_depth_blocks', 'network="eth",upstream="pruned"')).toBe(KEPT);
    expect(metricValue(text, 'tollgate_upstream_state_depth_blocks', 'network="eth",upstream="archive"')).toBeUndefined();
  });
});

describe('an undeclared pruned upstream', () => {
  it('is learned after its first "missing trie node": the client gets the archive answer, charged once, and later old reads skip it', async () => {
    const pruned = await scripted(prunedNode());
    const archive = await scripted({ kind: 'proxy', url: anvil.url });
    const tg = await gatewayOver([
      { id: 'pruned', url: pruned.url, weight: 1 },
      { id: 'archive', url: archive.url, weight: 0 },
    ]);

    // First old read: the pruned node is asked first, says "missing trie node", the archive answers.
    const first = await nonceAt(tg, hex(9));
    expect(first.body).toEqual({ jsonrpc: '2.0', id: 1, result: hex(9) });
    expect(first.headers.get('x-credits-cost')).toBe(String(COST));
    expect(first.charged).toBe(COST);
    expect(pruned.calls.filter(isOldStateRead)).toHaveLength(1);
    expect(archive.calls.filter(isStateRead)).toHaveLength(1);

    // Learned at depth 310 − 9 − 1 = 300: older reads skip it, newer ones (still kept) go to it.
    for (const block of [hex(3), { blockNumber: hex(5) }]) {
      const res = await nonceAt(tg, block);
      expect(res.body.result).toBe(await directRpc(anvil.url, 'eth_getTransactionCount', [sender, block]));
      expect(res.charged).toBe(COST);
    }
    expect(pruned.calls.filter(isOldStateRead)).toHaveLength(1);
    expect(archive.calls.filter(isStateRead)).toHaveLength(3);
    const recent = await nonceAt(tg, hex(HEAD - 100));
    expect(recent.body.result).toBe(hex(TRANSFER_BLOCKS));
    expect(pruned.calls.filter(isStateRead)).toHaveLength(2);
    expect(archive.calls.filter(isStateRead)).toHaveLength(3);

    const text = await metricsText(tg);
    expect(metricValue(text, 'tollgate_upstream_state_depth_blocks', 'network="eth",upstream="pruned"')).toBe(HEAD - 9 - 1);
    expect(metricValue(text, 'tollgate_upstream_archive_skips_total', 'network="eth",upstream="pruned"')).toBe(2);
    expect(metricValue(text, 'tollgate_upstream_requests_total', 'network="eth",upstream="pruned",outcome="pruned_state"')).toBe(1);
    // A pruned answer is a healthy node's answer: its circuit stays closed.
    expect(metricValue(text, 'tollgate_upstream_circuit_state', 'network="eth",upstream="pruned"')).toBe(0);
  });

  it('when every upstream is pruned, the client gets the node error passed through, charged like any node error', async () => {
    const first = await scripted(prunedNode());
    const second = await scripted(prunedNode());
    const tg = await gatewayOver([
      { id: 'pruned-a', url: first.url, weight: 1 },
      { id: 'pruned-b', url: second.url, weight: 0 },
    ]);

    const res = await nonceAt(tg, hex(4));
    expect(res.status).toBe(200);
    expect(res.body.error).toEqual({ code: -32000, message: `missing trie node ${'8b'.repeat(32)} (path )` });
    expect(res.headers.get('x-credits-cost')).toBe(String(COST));
    expect(res.charged).toBe(COST);
    expect(first.calls.filter(isOldStateRead)).toHaveLength(1);
    expect(second.calls.filter(isOldStateRead)).toHaveLength(1);

    // Both are learned now, and neither keeps the state: both are still asked, best first.
    const again = await nonceAt(tg, hex(2));
    expect(again.body.error.message).toMatch(/^missing trie node/);
    expect(first.calls.filter(isOldStateRead)).toHaveLength(2);
    expect(second.calls.filter(isOldStateRead)).toHaveLength(2);
  });
});

describe('a learned depth expires', () => {
  it('holds for LEARNED_DEPTH_TTL_MS, then the upstream is asked again (and learned again)', async () => {
    const pruned = await scripted(prunedNode());
    const archive = await scripted({ kind: 'proxy', url: anvil.url });
    const clock = new ManualClock();
    const [network] = parseConfig(
      {
        networks: [
          {
            id: 'eth',
            kind: 'evm',
            chainId: 31337,
            baseUrls: ['*/eth'],
            selection: 'weighted',
            hedge: { enabled: false },
            // Probed only when the test asks (probeAll): no interval passes within the test.
            healthCheck: { intervalMs: 4 * LEARNED_DEPTH_TTL_MS },
            upstreams: [
              { id: 'pruned', url: pruned.url, weight: 1 },
              { id: 'archive', url: archive.url, weight: 0 },
            ],
          },
        ],
      },
      {},
      'test config',
    ).networks;
    const forwarder: Forwarder = createForwarder(network!, { clock });
    cleanups.push(() => forwarder.close());
    await forwarder.probeAll();
    expect(forwarder.selector.bestHead()).toBe(HEAD);

    const nonceAt = async (block: number) => {
      const outcome = await forwarder.forward({ kind: 'pass-through', method: 'eth_getTransactionCount', cost: COST, params: [sender, hex(block)] }, clock.now() + 10_000);
      if (outcome.kind !== 'result') throw new Error(`expected a result, got ${JSON.stringify(outcome)}`);
      return JSON.parse(outcome.resultBytes.toString('utf8')) as unknown;
    };

    expect(await nonceAt(9)).toBe(hex(9));
    expect(forwarder.stateDepthOf('pruned')).toBe(HEAD - 9 - 1);
    expect(pruned.calls.filter(isOldStateRead)).toHaveLength(1);

    await clock.advance(LEARNED_DEPTH_TTL_MS - 1);
    expect(await nonceAt(8)).toBe(hex(8));
    expect(pruned.calls.filter(isOldStateRead)).toHaveLength(1);

    await clock.advance(1);
    expect(forwarder.stateDepthOf('pruned')).toBeUndefined();
    expect(await nonceAt(6)).toBe(hex(6));
    expect(pruned.calls.filter(isOldStateRead)).toHaveLength(2);
    expect(forwarder.stateDepthOf('pruned')).toBe(HEAD - 6 - 1);
    expect(archive.calls.filter(isStateRead)).toHaveLength(3);
  });
});

describe('locating the block of a state read', () => {
  const hash = `0x${'ab'.repeat(32)}`;
  it.each<[string, unknown, unknown]>([
    ['a number', ['0xaddr', '0x1f'], { kind: 'number', number: 31 }],
    ['earliest', ['0xaddr', 'earliest'], { kind: 'number', number: 0 }],
    ['latest', ['0xaddr', 'latest'], { kind: 'tag', tag: 'latest' }],
    ['safe', ['0xaddr', 'safe'], { kind: 'tag', tag: 'safe' }],
    ['finalized', ['0xaddr', 'finalized'], { kind: 'tag', tag: 'finalized' }],
    ['pending', ['0xaddr', 'pending'], { kind: 'tag', tag: 'pending' }],
    ['no block (latest)', ['0xaddr'], { kind: 'tag', tag: 'latest' }],
    ['a hash', ['0xaddr', hash.toUpperCase().replace('0X', '0x')], { kind: 'hash', hash }],
    ['EIP-1898 {blockNumber}', ['0xaddr', { blockNumber: '0x10' }], { kind: 'number', number: 16 }],
    ['EIP-1898 {blockHash}', ['0xaddr', { blockHash: hash }], { kind: 'hash', hash }],
    ['EIP-1898 {blockHash, requireCanonical}', ['0xaddr', { blockHash: hash, requireCanonical: true }], { kind: 'hash', hash }],
    ['both blockHash and blockNumber', ['0xaddr', { blockHash: hash, blockNumber: '0x1' }], { kind: 'unknown' }],
    ['a malformed number', ['0xaddr', '0xzz'], { kind: 'unknown' }],
    ['params that are not a list', { address: '0xaddr' }, { kind: 'unknown' }],
  ])('eth_getBalance at %s', (_what, params, expected) => {
    expect(stateBlockOf('eth_getBalance', params)).toEqual(expected);
  });

  it('finds the block at each method’s own index, and none for methods that read no state', () => {
    expect(stateBlockOf('eth_getStorageAt', ['0xaddr', '0x0', '0x5'])).toEqual({ kind: 'number', number: 5 });
    expect(stateBlockOf('trace_block', ['0x6'])).toEqual({ kind: 'number', number: 6 });
    expect(stateBlockOf('trace_call', [{}, ['trace'], '0x7'])).toEqual({ kind: 'number', number: 7 });
    expect(stateBlockOf('debug_traceBlockByHash', [hash])).toEqual({ kind: 'hash', hash });
    expect(stateBlockOf('debug_traceTransaction', [hash])).toEqual({ kind: 'unknown' });
    expect(stateBlockOf('eth_getBlockByNumber', ['0x1', false])).toBeUndefined();
    expect(stateBlockOf('constructor', [])).toBeUndefined();
  });

  it('agrees with the response cache on where each method names its block', () => {
    for (const [method, where] of Object.entries(STATE_READS)) {
      const caching = METHOD_CACHING.evm[method];
      if (caching === undefined) continue;
      if (where === 'transaction') expect(caching.block, method).toEqual({ in: 'transaction', index: 0 });
      else expect(caching.block, method).toEqual({ in: 'params', index: where });
    }
  });
});

describe('recognising a pruned answer', () => {
  it.each([
    'missing trie node 8b1604e0d19d9be9a94cab027e74134e674bccdbf8d6a3f09a23abe52fd356fa (path )',
    'header not found',
    'required historical state unavailable (reexec=128)',
    'historical state not available in path scheme yet',
    "state histories haven't been fully indexed yet",
    'No state available for block 0x9a1c3d',
    'distance to target block exceeds maximum proof window',
    'state at block #1234 is pruned',
    'This request is not supported because your node is running with state pruning. Run with --pruning=archive.',
  ])('%s', (message) => {
    expect(isPrunedState(message)).toBe(true);
  });

  it('reads a string data (nethermind puts its exception there) but not a revert or other node errors', () => {
    expect(isPrunedState('Internal error', 'Nethermind.Trie.MissingTrieNodeException: Node A is missing from the DB')).toBe(true);
    expect(isPrunedState('execution reverted: header not found')).toBe(false);
    expect(isPrunedState('nonce too low')).toBe(false);
    expect(isPrunedState('insufficient funds for gas * price + value')).toBe(false);
    expect(isPrunedState('Internal error', { trace: 'missing trie node' })).toBe(false);
  });
});

describe('the archive depth filter and its learning, alone', () => {
  const BEST_HEAD = 1_000;
  function setup(declared: Record<string, number> = {}, bestHead: () => number | undefined = () => BEST_HEAD) {
    const clock = new ManualClock();
    const upstream = (id: string): RoutedUpstream => ({ id, health: new UpstreamHealth({ failureThreshold: 3, cooldownMs: 1_000 }, clock.now), timeoutMs: 500, weight: 1 });
    const archive = createArchiveDepth({ declared: new Map(Object.entries(declared)), clock, bestHead });
    return { clock, archive, a: upstream('a'), b: upstream('b') };
  }
  const ids = (upstreams: readonly RoutedUpstream[]) => upstreams.map((upstream) => upstream.id);
  const at = (block: unknown) => ['0xaddr', block];

  it('skips an upstream for blocks older than head − blockHistory only, and tells which', () => {
    const { archive, a, b } = setup({ a: 128 });
    const skipped: string[] = [];
    expect(ids(archive.keeping([a, b], 'eth_getBalance', at(hex(BEST_HEAD - 128)), (id) => skipped.push(id)))).toEqual(['a', 'b']);
    expect(ids(archive.keeping([a, b], 'eth_getBalance', at(hex(BEST_HEAD - 129)), (id) => skipped.push(id)))).toEqual(['b']);
    expect(ids(archive.keeping([a, b], 'eth_getBalance', at({ blockNumber: '0x0' }), (id) => skipped.push(id)))).toEqual(['b']);
    expect(skipped).toEqual(['a', 'a']);
    // Tags, hashes and methods that read no state never skip.
    for (const block of ['latest', 'finalized', 'safe', `0x${'ab'.repeat(32)}`, { blockHash: `0x${'ab'.repeat(32)}` }]) {
      expect(ids(archive.keeping([a, b], 'eth_getBalance', at(block)))).toEqual(['a', 'b']);
    }
    expect(ids(archive.keeping([a, b], 'eth_getBlockByNumber', ['0x1', false]))).toEqual(['a', 'b']);
  });

  it('keeps every candidate, in order, when none keeps the state; skips nothing without a head', () => {
    const pruned = setup({ a: 10, b: 20 });
    const skipped: string[] = [];
    expect(ids(pruned.archive.keeping([pruned.b, pruned.a], 'eth_call', [{}, '0x1'], (id) => skipped.push(id)))).toEqual(['b', 'a']);
    expect(skipped).toEqual([]);
    const headless = setup({ a: 10 }, () => undefined);
    expect(ids(headless.archive.keeping([headless.a, headless.b], 'eth_call', [{}, '0x1']))).toEqual(['a', 'b']);
  });

  it('learns depth D − 1 from a pruned answer D blocks behind the head, keeps the smallest, and not from a node that is behind', () => {
    const { archive, a, b } = setup({ b: 50 });
    archive.learnPruned(a, 'eth_getBalance', at(hex(BEST_HEAD - 300)));
    expect(archive.depthOf('a')).toBe(299);
    archive.learnPruned(a, 'eth_getBalance', at(hex(BEST_HEAD - 400)));
    expect(archive.depthOf('a')).toBe(299);
    archive.learnPruned(a, 'eth_getBalance', at({ blockNumber: hex(BEST_HEAD - 200) }));
    expect(archive.depthOf('a')).toBe(199);
    // A declared depth and a learned one: the smaller holds.
    archive.learnPruned(b, 'eth_getBalance', at(hex(BEST_HEAD - 100)));
    expect(archive.depthOf('b')).toBe(50);
    archive.learnPruned(b, 'eth_getBalance', at(hex(BEST_HEAD - 20)));
    expect(archive.depthOf('b')).toBe(19);

    const behind = setup();
    behind.a.health.recordHead(BEST_HEAD - 10);
    behind.archive.learnPruned(behind.a, 'eth_getBalance', at(hex(BEST_HEAD - 5)));
    expect(behind.archive.depthOf('a')).toBeUndefined();
    for (const block of ['latest', `0x${'ab'.repeat(32)}`]) behind.archive.learnPruned(behind.a, 'eth_getBalance', at(block));
    behind.archive.learnPruned(behind.a, 'debug_traceTransaction', [`0x${'ab'.repeat(32)}`]);
    expect(behind.archive.depthOf('a')).toBeUndefined();
  });

  it('forgets a learned depth LEARNED_DEPTH_TTL_MS after the last answer that taught it', async () => {
    const { clock, archive, a } = setup();
    archive.learnPruned(a, 'eth_getBalance', at(hex(BEST_HEAD - 300)));
    await clock.advance(LEARNED_DEPTH_TTL_MS / 2);
    archive.learnPruned(a, 'eth_getBalance', at(hex(BEST_HEAD - 400)));
    await clock.advance(LEARNED_DEPTH_TTL_MS - 1);
    expect(archive.depthOf('a')).toBe(299);
    await clock.advance(1);
    expect(archive.depthOf('a')).toBeUndefined();
  });
});

describe('pruned state policy, alone', () => {
  const clock = new ManualClock();
  const upstream: RoutedUpstream = { id: 'a', health: new UpstreamHealth({ failureThreshold: 3, cooldownMs: 1_000 }, clock.now), timeoutMs: 500, weight: 1 };
  upstream.health.recordHead(1_000);
  function executionFor(method: string, params: unknown[]): Execution {
    return {
      method,
      deadline: clock.now() + 10_000,
      trace: undefined,
      attemptsStarted: 0,
      attempts: [],
      running: new Set(),
      check: undefined,
      paramsFor: () => params,
      takeCandidate: () => undefined,
      peekCandidate: () => undefined,
      othersThan: () => [],
      passedOverErrors: [],
    };
  }
  const run = async (outcome: AttemptOutcome, method = 'eth_getBalance', params: unknown[] = ['0xaddr', '0x64']) => {
    const archive = createArchiveDepth({ declared: new Map(), clock, bestHead: () => 1_000 });
    const execution = executionFor(method, params);
    const ended = await prunedStatePolicy(archive)(async () => outcome)(upstream, execution, new CallController().signal);
    return { ended, archive, execution };
  };
  const missingTrieNode = { code: -32000, message: 'missing trie node abcd (path )' };

  it('turns a pruned answer to a state read into a pruned_state failure, learns, and keeps the node error', async () => {
    const { ended, archive, execution } = await run({ kind: 'rpc-error', error: missingTrieNode, durationMs: 7 });
    expect(ended).toEqual({ kind: 'failure', reason: PRUNED_STATE, rpcError: missingTrieNode, timedOut: false, durationMs: 7 });
    expect(archive.depthOf('a')).toBe(1_000 - 100 - 1);
    expect(execution.passedOverErrors).toEqual([{ upstream: 'a', error: missingTrieNode }]);
  });

  it('reads failover codes too (nethermind: -32603 with the exception in data)', async () => {
    const error = { code: -32603, message: 'Internal error', data: 'Nethermind.Trie.MissingTrieNodeException: Node is missing from the DB' };
    const { ended } = await run({ kind: 'failure', reason: 'rpc_error_-32603', rpcError: error, timedOut: false, durationMs: 3 });
    expect(ended).toMatchObject({ kind: 'failure', reason: PRUNED_STATE });
  });

  it('leaves other errors, reverts and other methods alone', async () => {
    const revert: AttemptOutcome = { kind: 'rpc-error', error: { code: 3, message: 'execution reverted: header not found' }, durationMs: 1 };
    expect((await run(revert, 'eth_call', [{}, '0x64'])).ended).toBe(revert);
    const nonce: AttemptOutcome = { kind: 'rpc-error', error: { code: -32000, message: 'nonce too low' }, durationMs: 1 };
    expect((await run(nonce)).ended).toBe(nonce);
    const block: AttemptOutcome = { kind: 'rpc-error', error: { code: -32000, message: 'header not found' }, durationMs: 1 };
    const { ended, archive } = await run(block, 'eth_getBlockByNumber', ['0x64', false]);
    expect(ended).toBe(block);
    expect(archive.depthOf('a')).toBeUndefined();
  });
});

describe('upstreams[].blockHistory in the config', () => {
  const configWith = (upstream: Record<string, unknown>) => ({
    networks: [{ id: 'eth', kind: 'evm', chainId: 1, baseUrls: ['*/eth'], upstreams: [{ id: 'a', url: 'http://127.0.0.1:1', ...upstream }] }],
  });
  it('is optional (an archive) or a positive number of blocks', () => {
    expect(parseConfig(configWith({}), {}).networks[0]!.upstreams[0]!.blockHistory).toBeUndefined();
    expect(parseConfig(configWith({ blockHistory: 128 }), {}).networks[0]!.upstreams[0]!.blockHistory).toBe(128);
  });
  it.each([0, -1, 1.5, '128'])('refuses %j, naming the path', (value) => {
    expect(() => parseConfig(configWith({ blockHistory: value }), {})).toThrow(ConfigError);
    expect(() => parseConfig(configWith({ blockHistory: value }), {})).toThrow(/networks\.0\.upstreams\.0\.blockHistory: /);
  });
});
