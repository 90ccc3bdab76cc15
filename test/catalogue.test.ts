// The method catalogue on the wire (docs/methods.md, issue 12 items 1, 2, 5): default prices,
// re-pricing, `"*"`, methods denied by default and by config, per-upstream denies and batches
// that mix all of them. A real gateway on loopback with scripted upstreams that count what
// reaches them, and the store's usage rows as the ledger.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/load.js';
import { CATALOGUE } from '../src/methods/catalogue.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const ANSWER: ScriptedBehaviour = { kind: 'result', result: '0x1' };

let tg: TestGateway;
/** `evm`: `preferred` gets every first attempt (weight), `fallback` only what `preferred` does not serve. */
let preferred: ScriptedUpstream;
let fallback: ScriptedUpstream;
let plain: ScriptedUpstream;
let das: ScriptedUpstream;

beforeAll(async () => {
  preferred = await startScriptedUpstream(ANSWER);
  fallback = await startScriptedUpstream(ANSWER);
  plain = await startScriptedUpstream(ANSWER);
  das = await startScriptedUpstream(ANSWER);
  tg = await startTestGateway({
    networks: [
      {
        id: 'evm',
        kind: 'evm',
        chainId: 1,
        selection: 'weighted',
        hedge: { enabled: false },
        upstreams: [
          { id: 'preferred', url: preferred.url, weight: 1, methods: { deny: ['debug_*', 'trace_*', 'erigon_*'] } },
          { id: 'fallback', url: fallback.url, weight: 0, methods: { deny: ['eth_getProof', 'erigon_*'] } },
        ],
        methods: { eth_call: 100, eth_customThing: 42, '*': 7 },
        denyMethods: ['ots_*', 'debug_storageRangeAt'],
        allowMethods: ['txpool_*'],
      },
      { id: 'plain', kind: 'evm', chainId: 1, upstreams: [{ id: 'plain', url: plain.url }] },
      { id: 'das', kind: 'asset', upstreams: [{ id: 'das', url: das.url }] },
    ],
  });
}, 30_000);

afterAll(async () => {
  await tg?.close();
  await Promise.all([preferred, fallback, plain, das].map((upstream) => upstream?.close()));
});

const today = (): string => new Date().toISOString().slice(0, 10);

/** Charged credits and requests per network|method so far. */
async function usage(): Promise<Map<string, { credits: number; requests: number }>> {
  const rows = await tg.store.usage({ teamId: tg.team.id, fromDay: today(), toDay: today() });
  const byMethod = new Map<string, { credits: number; requests: number }>();
  for (const row of rows) {
    const key = `${row.network}|${row.method}`;
    const seen = byMethod.get(key) ?? { credits: 0, requests: 0 };
    byMethod.set(key, { credits: seen.credits + row.credits, requests: seen.requests + row.requests });
  }
  return byMethod;
}

/** What changed in usage between two snapshots (only changed entries). */
function usageDelta(before: Map<string, { credits: number; requests: number }>, after: Map<string, { credits: number; requests: number }>) {
  const delta: Record<string, { credits: number; requests: number }> = {};
  for (const [key, value] of after) {
    const was = before.get(key) ?? { credits: 0, requests: 0 };
    if (value.credits !== was.credits || value.requests !== was.requests) delta[key] = { credits: value.credits - was.credits, requests: value.requests - was.requests };
  }
  return delta;
}

const call = (method: string, params: unknown[] = [], id: number | string = 1) => ({ jsonrpc: '2.0', id, method, params });
const totalCalls = (): number => [preferred, fallback, plain, das].reduce((sum, upstream) => sum + upstream.calls.length, 0);

describe('default prices from the catalogue', () => {
  it('charges each EVM catalogue tier its price and forwards the call unchanged', async () => {
    const samples: Array<[string, number]> = [
      ['net_listening', 5],
      ['eth_blockNumber', 80],
      ['eth_getTransactionReceipt', 80],
      ['eth_getUncleCountByBlockNumber', 150],
      ['eth_getLogs', 255],
      ['eth_estimateGas', 300],
      ['eth_getBlockReceipts', 1000],
    ];
    for (const [method, price] of samples) {
      const sent = plain.calls.length;
      const r = await rpc(tg.url('plain'), call(method, [{ any: 'params' }]));
      expect(r.body, method).toEqual({ jsonrpc: '2.0', id: 1, result: '0x1' });
      expect(r.headers.get('x-credits-cost'), method).toBe(String(price));
      expect(plain.calls.slice(sent).map((received) => received.methods), method).toEqual([[method]]);
      expect((plain.calls.at(-1)!.body as { params: unknown }).params).toEqual([{ any: 'params' }]);
    }
    // The filter tier: a filter id is the gateway's own (pinned to its upstream, docs/routing.md),
    // so polling takes one created through the gateway; the upstream gets back its own id.
    const created = await rpc(tg.url('plain'), call('eth_newBlockFilter'));
    expect(created.headers.get('x-credits-cost')).toBe('80');
    const sent = plain.calls.length;
    const polled = await rpc(tg.url('plain'), call('eth_getFilterChanges', [created.body.result]));
    expect(polled.body).toEqual({ jsonrpc: '2.0', id: 1, result: '0x1' });
    expect(polled.headers.get('x-credits-cost')).toBe('140');
    expect(plain.calls.slice(sent).map((received) => received.methods)).toEqual([['eth_getFilterChanges']]);
    expect((plain.calls.at(-1)!.body as { params: unknown }).params).toEqual(['0x1']);
  });

  it('prices DAS methods at 160 and standard Solana methods at 80 on asset networks', async () => {
    for (const [method, price] of [
      ['getAsset', 160],
      ['searchAssets', 160],
      ['getNftEditions', 160],
      ['getBalance', 80],
      ['getLatestBlockhash', 80],
      ['getSomethingNew', 80],
    ] as const) {
      const r = await rpc(tg.url('das'), { jsonrpc: '2.0', id: 'x', method, params: { id: 'abc' } });
      expect(r.body.result, method).toBe('0x1');
      expect(r.headers.get('x-credits-cost'), method).toBe(String(price));
      expect(das.calls.at(-1)!.methods).toEqual([method]);
    }
  });

  it('an unlisted method costs 80 by default and is forwarded; a name that is no method name is -32601 without an upstream call', async () => {
    const r = await rpc(tg.url('plain'), call('ots_getApiLevel'));
    expect(r.body.result).toBe('0x1');
    expect(r.headers.get('x-credits-cost')).toBe('80');
    expect(plain.calls.at(-1)!.methods).toEqual(['ots_getApiLevel']);

    const before = totalCalls();
    for (const method of ['has space', '_leading', 'a.b', 'x'.repeat(101), '__proto__']) {
      const bad = await rpc(tg.url('plain'), call(method));
      expect(bad.body.error, method).toEqual({ code: -32601, message: `the method ${method} does not exist/is not available` });
      expect(bad.headers.get('x-credits-cost')).toBe('0');
    }
    expect(totalCalls()).toBe(before);
  });

  it("an upstream's own -32601 for a forwarded method is passed on uncharged; its other errors are charged", async () => {
    plain.setBehaviour((received) =>
      received.methods[0] === 'eth_notHere'
        ? { kind: 'rpc-error', code: -32601, message: 'the method eth_notHere does not exist/is not available' }
        : { kind: 'rpc-error', code: 3, message: 'execution reverted' },
    );
    try {
      const usageBefore = await usage();
      const missing = await rpc(tg.url('plain'), call('eth_notHere'));
      expect(missing.body).toEqual({ jsonrpc: '2.0', id: 1, error: { code: -32601, message: 'the method eth_notHere does not exist/is not available' } });
      expect(missing.headers.get('x-credits-cost')).toBe('0');
      expect(plain.calls.at(-1)!.methods).toEqual(['eth_notHere']);
      const reverted = await rpc(tg.url('plain'), call('eth_call', [{}, 'latest']));
      expect(reverted.body.error).toEqual({ code: 3, message: 'execution reverted' });
      expect(reverted.headers.get('x-credits-cost')).toBe('80');
      expect(usageDelta(usageBefore, await usage())).toEqual({ 'plain|eth_call': { credits: 80, requests: 1 } });
    } finally {
      plain.setBehaviour(ANSWER);
    }
  });

  it('eth_subscribe and eth_unsubscribe are WebSocket methods: -32601 over HTTP, uncharged', async () => {
    const before = totalCalls();
    for (const method of ['eth_subscribe', 'eth_unsubscribe']) {
      const r = await rpc(tg.url('plain'), call(method, ['newHeads']));
      expect(r.body.error).toEqual({ code: -32601, message: `the method ${method} does not exist/is not available` });
      expect(r.headers.get('x-credits-cost')).toBe('0');
    }
    expect(totalCalls()).toBe(before);
  });
});

describe('denied by default', () => {
  const denied = [
    'eth_sign',
    'eth_signTransaction',
    'eth_signTypedData_v4',
    'eth_sendTransaction',
    'eth_accounts',
    'personal_sign',
    'personal_unlockAccount',
    'admin_peers',
    'miner_start',
    'txpool_content',
    'engine_newPayloadV3',
    'anvil_setBalance',
    'evm_mine',
    'hardhat_impersonateAccount',
  ];

  it.each(denied)('%s: -32601 "disabled on this gateway", no upstream call, no charge', async (method) => {
    const before = totalCalls();
    const usageBefore = await usage();
    const r = await rpc(tg.url('plain'), call(method, ['0x0000000000000000000000000000000000000001', '0x00']));
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ jsonrpc: '2.0', id: 1, error: { code: -32601, message: `the method ${method} is disabled on this gateway` } });
    expect(r.headers.get('x-credits-cost')).toBe('0');
    expect(totalCalls()).toBe(before);
    expect(usageDelta(usageBefore, await usage())).toEqual({});
  });

  it('every default-denied pattern of the catalogue is among those tried above', () => {
    const patterns = CATALOGUE.evm.denied.flatMap((group) => group.patterns);
    for (const pattern of patterns) {
      const regex = new RegExp(`^${pattern.replace('*', '.*')}$`);
      expect(denied.some((method) => regex.test(method)), pattern).toBe(true);
    }
  });

  it('allowMethods lets a default-denied family through, priced at "*"; the rest stays denied', async () => {
    const r = await rpc(tg.url('evm'), call('txpool_content'));
    expect(r.body.result).toBe('0x1');
    expect(r.headers.get('x-credits-cost')).toBe('7');
    expect(preferred.calls.at(-1)!.methods).toEqual(['txpool_content']);

    const still = await rpc(tg.url('evm'), call('personal_sign'));
    expect(still.body.error).toEqual({ code: -32601, message: 'the method personal_sign is disabled on this gateway' });
  });
});

describe('network method settings', () => {
  it('re-prices a catalogue method and adds one, each counted under its name', async () => {
    const before = await usage();
    const priced = await rpc(tg.url('evm'), call('eth_call', [{ to: '0x0000000000000000000000000000000000000001' }, 'latest']));
    expect(priced.body.result).toBe('0x1');
    expect(priced.headers.get('x-credits-cost')).toBe('100');
    const added = await rpc(tg.url('evm'), call('eth_customThing'));
    expect(added.body.result).toBe('0x1');
    expect(added.headers.get('x-credits-cost')).toBe('42');
    // Catalogue prices this network does not override stay as they are.
    const logs = await rpc(tg.url('evm'), call('eth_getLogs', [{}]));
    expect(logs.headers.get('x-credits-cost')).toBe('255');
    expect(usageDelta(before, await usage())).toEqual({
      'evm|eth_call': { credits: 100, requests: 1 },
      'evm|eth_customThing': { credits: 42, requests: 1 },
      'evm|eth_getLogs': { credits: 255, requests: 1 },
    });
  });

  it('"*" prices unlisted methods, which are counted as `other` in usage and metrics', async () => {
    const before = await usage();
    const r = await rpc(tg.url('evm'), call('eth_somethingNew', [1]));
    expect(r.body.result).toBe('0x1');
    expect(r.headers.get('x-credits-cost')).toBe('7');
    expect(preferred.calls.at(-1)!.methods).toEqual(['eth_somethingNew']);
    expect(usageDelta(before, await usage())).toEqual({ 'evm|other': { credits: 7, requests: 1 } });

    const metrics = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    expect(metrics).toMatch(/tollgate_credits_charged_total\{[^}]*method="other"[^}]*\} \d+/);
    expect(metrics).toMatch(/method="eth_customThing"/);
    expect(metrics).not.toMatch(/eth_somethingNew/);
  });

  it('denyMethods denies by glob and by name, catalogue methods included; other networks are unaffected', async () => {
    const before = totalCalls();
    for (const method of ['ots_getApiLevel', 'ots_traceTransaction', 'debug_storageRangeAt']) {
      const r = await rpc(tg.url('evm'), call(method));
      expect(r.body.error).toEqual({ code: -32601, message: `the method ${method} is disabled on this gateway` });
      expect(r.headers.get('x-credits-cost')).toBe('0');
    }
    expect(totalCalls()).toBe(before);
    const elsewhere = await rpc(tg.url('plain'), call('debug_storageRangeAt'));
    expect(elsewhere.body.result).toBe('0x1');
    expect(elsewhere.headers.get('x-credits-cost')).toBe('1000');
  });
});

describe('per-upstream method support', () => {
  it('the preferred upstream takes what it serves; what it denies goes to the one that serves it, every time', async () => {
    const preferredBefore = preferred.calls.length;
    const fallbackBefore = fallback.calls.length;
    for (let round = 0; round < 10; round++) {
      expect((await rpc(tg.url('evm'), call('eth_blockNumber'))).body.result).toBe('0x1');
      const traced = await rpc(tg.url('evm'), call('debug_traceTransaction', ['0xabc']));
      expect(traced.body.result).toBe('0x1');
      expect(traced.headers.get('x-credits-cost')).toBe('1000');
      expect((await rpc(tg.url('evm'), call('trace_block', ['latest']))).headers.get('x-credits-cost')).toBe('300');
    }
    const toPreferred = preferred.calls.slice(preferredBefore).flatMap((received) => received.methods);
    const toFallback = fallback.calls.slice(fallbackBefore).flatMap((received) => received.methods);
    // A trace names no block, so the response cache asks for the traced transaction (to learn whether its
    // block is final before keeping the trace): that lookup goes to the preferred upstream, which serves it.
    expect(toPreferred).toEqual(Array(10).fill(['eth_blockNumber', 'eth_getTransactionByHash']).flat());
    expect(toFallback).toEqual(Array(10).fill(['debug_traceTransaction', 'trace_block']).flat());
  });

  it('a failing upstream is not replaced by one that denies the method: the call fails over to nobody, uncharged', async () => {
    fallback.setBehaviour({ kind: 'status', status: 500 });
    try {
      const preferredBefore = preferred.calls.length;
      const r = await rpc(tg.url('evm'), call('debug_traceTransaction', ['0xabc']));
      expect(r.status).toBe(502);
      expect(r.body.error.code).toBe(-32603);
      expect(r.body.error.data.attempts).toEqual([{ upstream: 'fallback', reason: 'http_500' }]);
      expect(r.headers.get('x-credits-cost')).toBe('0');
      expect(preferred.calls.length).toBe(preferredBefore);
    } finally {
      fallback.setBehaviour(ANSWER);
    }
  });

  it('a method every upstream denies is -32601, decided before credits: no upstream call, no charge', async () => {
    const before = totalCalls();
    const usageBefore = await usage();
    const r = await rpc(tg.url('evm'), call('erigon_getHeaderByNumber', [1]));
    expect(r.body.error).toEqual({ code: -32601, message: 'the method erigon_getHeaderByNumber does not exist/is not available' });
    expect(r.headers.get('x-credits-cost')).toBe('0');
    expect(totalCalls()).toBe(before);
    expect(usageDelta(usageBefore, await usage())).toEqual({});
  });
});

describe('batches mix methods freely', () => {
  it('prices, allows and routes each item on its own; only answered items are charged', async () => {
    const usageBefore = await usage();
    const preferredBefore = preferred.calls.length;
    const fallbackBefore = fallback.calls.length;
    const r = await rpc(tg.url('evm'), [
      call('eth_call', [{}, 'latest'], 'call'),
      call('eth_sign', ['0x0000000000000000000000000000000000000001', '0x00'], 'sign'),
      call('eth_somethingNew', [], 'unlisted'),
      call('debug_traceTransaction', ['0xabc'], 'trace'),
      call('erigon_getHeaderByNumber', [1], 'nobody'),
      call('eth_chainId', [], 'chain'),
      call('not a method', [], 'bad'),
      call('eth_subscribe', ['newHeads'], 'ws'),
      call('ots_getApiLevel', [], 'config-denied'),
    ]);
    expect(r.status).toBe(200);
    const byId = new Map((r.body as Array<{ id: string }>).map((reply) => [reply.id, reply]));
    expect(byId.get('call')).toEqual({ jsonrpc: '2.0', id: 'call', result: '0x1' });
    expect(byId.get('sign')).toEqual({ jsonrpc: '2.0', id: 'sign', error: { code: -32601, message: 'the method eth_sign is disabled on this gateway' } });
    expect(byId.get('unlisted')).toEqual({ jsonrpc: '2.0', id: 'unlisted', result: '0x1' });
    expect(byId.get('trace')).toEqual({ jsonrpc: '2.0', id: 'trace', result: '0x1' });
    expect(byId.get('nobody')).toEqual({ jsonrpc: '2.0', id: 'nobody', error: { code: -32601, message: 'the method erigon_getHeaderByNumber does not exist/is not available' } });
    expect(byId.get('chain')).toEqual({ jsonrpc: '2.0', id: 'chain', result: '0x1' });
    expect(byId.get('bad')).toEqual({ jsonrpc: '2.0', id: 'bad', error: { code: -32601, message: 'the method not a method does not exist/is not available' } });
    expect(byId.get('ws')).toEqual({ jsonrpc: '2.0', id: 'ws', error: { code: -32601, message: 'the method eth_subscribe does not exist/is not available' } });
    expect(byId.get('config-denied')).toEqual({ jsonrpc: '2.0', id: 'config-denied', error: { code: -32601, message: 'the method ots_getApiLevel is disabled on this gateway' } });
    expect(r.body).toHaveLength(9);

    expect(r.headers.get('x-credits-cost')).toBe(String(100 + 7 + 1000 + 5));
    expect(usageDelta(usageBefore, await usage())).toEqual({
      'evm|eth_call': { credits: 100, requests: 1 },
      'evm|other': { credits: 7, requests: 1 },
      'evm|debug_traceTransaction': { credits: 1000, requests: 1 },
      'evm|eth_chainId': { credits: 5, requests: 1 },
    });
    // Each forwarded item went to an upstream that serves it, as its own call (plus the response cache's
    // lookup of the traced transaction, which the preferred upstream serves).
    expect(preferred.calls.slice(preferredBefore).flatMap((received) => received.methods).sort()).toEqual(['eth_call', 'eth_getTransactionByHash', 'eth_somethingNew']);
    expect(fallback.calls.slice(fallbackBefore).flatMap((received) => received.methods)).toEqual(['debug_traceTransaction']);
  });
});

describe('configuration errors name the path', () => {
  const network = (extra: Record<string, unknown>, upstream: Record<string, unknown> = {}) => ({
    networks: [{ id: 'n', kind: 'evm', chainId: 1, baseUrls: ['*/n'], upstreams: [{ id: 'u', url: 'http://127.0.0.1:1', ...upstream }], ...extra }],
  });
  const errorOf = (raw: unknown): string => {
    try {
      parseConfig(raw, {}, 'test config');
    } catch (error) {
      return (error as Error).message;
    }
    throw new Error('the config was accepted');
  };

  it('a price for a method that stays denied', () => {
    expect(errorOf(network({ methods: { eth_sign: 10 } }))).toContain('networks.0.methods.eth_sign: eth_sign is denied by default: list it in allowMethods to serve it');
    expect(errorOf(network({ methods: { eth_call: 10 }, denyMethods: ['eth_*'] }))).toContain('networks.0.methods.eth_call: eth_call is priced here but denied by denyMethods');
    // Allowed back, the price is fine.
    expect(parseConfig(network({ methods: { eth_sign: 10 }, allowMethods: ['eth_sign'] }), {}).networks[0]!.methods).toEqual({ eth_sign: 10 });
  });

  it('an allowMethods entry that allows nothing', () => {
    expect(errorOf(network({ allowMethods: ['eth_call'] }))).toContain('networks.0.allowMethods.0: eth_call matches no method denied by default');
    expect(errorOf(network({ allowMethods: ['anvil_*', 'debug_*'] }))).toContain('networks.0.allowMethods.1: debug_* matches no method denied by default');
    expect(parseConfig(network({ allowMethods: ['anvil_mine', 'personal_*', 'eth_sign*', '*'] }), {}).networks[0]!.allowMethods).toHaveLength(4);
  });

  it('globs and method names are checked', () => {
    expect(errorOf(network({ denyMethods: ['debug-*'] }))).toContain('networks.0.denyMethods.0: a JSON-RPC method name or a glob such as debug_*');
    expect(errorOf(network({}, { methods: { deny: ['trace.*'] } }))).toContain('networks.0.upstreams.0.methods.deny.0: a JSON-RPC method name or a glob such as debug_*');
    expect(errorOf(network({}, { methods: { allow: ['x'] } }))).toContain('networks.0.upstreams.0.methods.allow: unknown key');
    expect(errorOf(network({ methods: { '**': 3 } }))).toContain('networks.0.methods');
    expect(parseConfig(network({ methods: { '*': 3 } }), {}).networks[0]!.methods).toEqual({ '*': 3 });
  });
});
