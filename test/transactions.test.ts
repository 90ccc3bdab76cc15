// eth_sendRawTransaction (docs/routing.md#transactions) through a real gateway in front of scripted
// upstreams: the same bytes go to the next upstream only after an attempt whose outcome is
// unknown; "already known" / "nonce too low" after such an attempt becomes the transaction hash
// once eth_getTransactionByHash finds it, and passes through otherwise; never hedged;
// `broadcast: true` reaches every healthy upstream once. The transaction is a real signed one
// and the hash is checked against keccak256 of its bytes.

import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { keccak256, type Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { utcDay } from '../src/metering/meter.js';
import { isDuplicateError } from '../src/routing/transactions.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { refusedUrl, useScriptedUpstreams, type ReceivedCall, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const METHODS = { eth_sendRawTransaction: 80, eth_getTransactionByHash: 80 };
const SEND_COST = 80;
// anvil's first dev account: a well-known test key.
const account = privateKeyToAccount('0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80');

let raw: Hex;
let hash: Hex;
beforeAll(async () => {
  raw = await account.signTransaction({
    chainId: 31337,
    nonce: 7,
    to: '0x70997970C51812dc3A010C7d01b50e0d17dc79C8',
    value: 1n,
    gas: 21_000n,
    maxFeePerGas: 10n ** 10n,
    maxPriorityFeePerGas: 1n,
    type: 'eip1559',
  });
  hash = keccak256(raw);
});

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
const upstream = useScriptedUpstreams();

const send = (id: unknown = 1) => ({ jsonrpc: '2.0', id, method: 'eth_sendRawTransaction', params: [raw] });
const sends = (proxy: ScriptedUpstream) => proxy.calls.filter((call) => call.methods[0] === 'eth_sendRawTransaction');
const lookups = (proxy: ScriptedUpstream) => proxy.calls.filter((call) => call.methods[0] === 'eth_getTransactionByHash');
const paramsOf = (call: ReceivedCall) => (call.body as { params: unknown[] }).params;

/** A node: `onSend` answers eth_sendRawTransaction, `known` says whether it returns the transaction by hash. */
function node(onSend: ScriptedBehaviour, known: boolean): (call: ReceivedCall) => ScriptedBehaviour {
  return (call) => {
    if (call.methods[0] === 'eth_getTransactionByHash') {
      return { kind: 'result', result: known && paramsOf(call)[0] === hash ? { hash, nonce: '0x7', blockHash: null } : null };
    }
    return onSend;
  };
}

const accepted = (): ScriptedBehaviour => ({ kind: 'result', result: hash });
const rpcError = (message: string, code = -32000): ScriptedBehaviour => ({ kind: 'rpc-error', code, message });

async function gatewayOver(upstreams: Array<{ id: string; url: string } & Record<string, unknown>>, network: Record<string, unknown> = {}): Promise<TestGateway> {
  const tg = await startTestGateway({
    networks: [{ id: 'eth', kind: 'evm', chainId: 31337, methods: METHODS, hedge: { enabled: false }, upstreams, ...network }],
  });
  cleanups.push(() => tg.close());
  return tg;
}

async function teamSpend(tg: TestGateway): Promise<number> {
  const [result] = await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day: utcDay(Date.now()) }]);
  return result!.teamUsed;
}

describe('an attempt whose outcome is unknown, then a duplicate error from the next upstream', () => {
  it('a timeout after the upstream received the bytes, then "already known": success with the hash, charged once', async () => {
    const slow = await upstream((call) => (call.methods[0] === 'eth_sendRawTransaction' ? { kind: 'stall' } : { kind: 'result', result: null }));
    const next = await upstream(node(rpcError('already known'), true));
    const tg = await gatewayOver([
      { id: 'slow', url: slow.url, timeoutMs: 100 },
      { id: 'next', url: next.url },
    ]);
    const res = await rpc(tg.url('eth'), send('tx'));
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ jsonrpc: '2.0', id: 'tx', result: hash });
    // The same bytes went to both; the hash was confirmed by the upstream that has it.
    expect(sends(slow).map(paramsOf)).toEqual([[raw]]);
    expect(sends(next).map(paramsOf)).toEqual([[raw]]);
    expect(lookups(next).map(paramsOf)).toEqual([[hash]]);
    expect(res.headers.get('x-credits-cost')).toBe(String(SEND_COST));
    expect(await teamSpend(tg)).toBe(SEND_COST);
  });

  it('a connection reset after the bytes were sent, then "nonce too low", the transaction found on the first upstream: success', async () => {
    const reset = await upstream((call) => (call.methods[0] === 'eth_sendRawTransaction' ? { kind: 'reset' } : { kind: 'result', result: { hash } }));
    const next = await upstream(node(rpcError('nonce too low', -32003), false));
    const tg = await gatewayOver([
      { id: 'reset', url: reset.url },
      { id: 'next', url: next.url },
    ]);
    const res = await rpc(tg.url('eth'), send());
    expect(res.body.result).toBe(hash);
    expect(lookups(reset)).toHaveLength(1);
    expect(await teamSpend(tg)).toBe(SEND_COST);
  });

  it('unknown outcome, then "nonce too low", but no upstream has the transaction: the error passes through', async () => {
    const reset = await upstream((call) => (call.methods[0] === 'eth_sendRawTransaction' ? { kind: 'reset' } : { kind: 'result', result: null }));
    const next = await upstream(node(rpcError('nonce too low', -32003), false));
    const tg = await gatewayOver([
      { id: 'reset', url: reset.url },
      { id: 'next', url: next.url },
    ]);
    const res = await rpc(tg.url('eth'), send());
    expect(res.body.error).toEqual({ code: -32003, message: 'nonce too low' });
    expect(lookups(next).map(paramsOf)).toEqual([[hash]]);
    // An upstream's error passed through is an answer, and charged.
    expect(await teamSpend(tg)).toBe(SEND_COST);
  });

  it('unknown outcome, then an execution error: passes through unchanged, no lookup', async () => {
    for (const message of ['insufficient funds for gas * price + value', 'execution reverted']) {
      const reset = await upstream({ kind: 'reset' });
      const next = await upstream(node(rpcError(message, -32003), true));
      const tg = await gatewayOver([
        { id: 'reset', url: reset.url },
        { id: 'next', url: next.url },
      ]);
      const res = await rpc(tg.url('eth'), send());
      expect(res.body.error).toEqual({ code: -32003, message });
      expect(lookups(next)).toHaveLength(0);
    }
  });

  it('every attempt failed with an unknown outcome, yet an upstream has the transaction: success with the hash', async () => {
    const first = await upstream((call) => (call.methods[0] === 'eth_sendRawTransaction' ? { kind: 'status', status: 502 } : { kind: 'result', result: { hash } }));
    const second = await upstream((call) => (call.methods[0] === 'eth_sendRawTransaction' ? { kind: 'reset' } : { kind: 'result', result: null }));
    const tg = await gatewayOver([
      { id: 'first', url: first.url },
      { id: 'second', url: second.url },
    ]);
    expect((await rpc(tg.url('eth'), send())).body.result).toBe(hash);
  });
});

describe('without a prior unknown outcome', () => {
  it('"nonce too low" for a transaction never sent before passes through; nothing else is asked', async () => {
    const first = await upstream(node(rpcError('nonce too low', -32003), true));
    const second = await upstream(node(accepted(), true));
    const tg = await gatewayOver([
      { id: 'first', url: first.url },
      { id: 'second', url: second.url },
    ]);
    const res = await rpc(tg.url('eth'), send('n'));
    expect(res.body).toEqual({ jsonrpc: '2.0', id: 'n', error: { code: -32003, message: 'nonce too low' } });
    expect(lookups(first)).toHaveLength(0);
    expect(second.calls).toHaveLength(0);
    expect(await teamSpend(tg)).toBe(SEND_COST);
  });

  it('"already known" after a refused connection (the bytes never left) passes through', async () => {
    const next = await upstream(node(rpcError('already known'), true));
    const tg = await gatewayOver([
      { id: 'refused', url: await refusedUrl() },
      { id: 'next', url: next.url },
    ]);
    const res = await rpc(tg.url('eth'), send());
    expect(res.body.error).toEqual({ code: -32000, message: 'already known' });
    expect(lookups(next)).toHaveLength(0);
  });

  it('every upstream failed: -32603 with the attempts, uncharged', async () => {
    const a = await upstream((call) => (call.methods[0] === 'eth_sendRawTransaction' ? { kind: 'status', status: 500 } : { kind: 'result', result: null }));
    const tg = await gatewayOver([
      { id: 'a', url: a.url },
      { id: 'refused', url: await refusedUrl() },
    ]);
    const res = await rpc(tg.url('eth'), send());
    expect(res.status).toBe(502);
    expect(res.body.error.data.attempts).toEqual([
      { upstream: 'a', reason: 'http_500' },
      { upstream: 'refused', reason: 'connection_refused' },
    ]);
    expect(await teamSpend(tg)).toBe(0);
  });
});

describe('never hedged', () => {
  it('with hedging on and a slow first upstream, the second gets nothing', async () => {
    const slow = await upstream({ kind: 'result', result: hash, delayMs: 200 });
    const fast = await upstream(accepted());
    const tg = await gatewayOver(
      [
        { id: 'slow', url: slow.url },
        { id: 'fast', url: fast.url },
      ],
      { hedge: { enabled: true, delayMs: 10 } },
    );
    const res = await rpc(tg.url('eth'), send());
    expect(res.body.result).toBe(hash);
    expect(sends(slow)).toHaveLength(1);
    expect(fast.calls).toHaveLength(0);
  });
});

describe('broadcast: true', () => {
  it('reaches every healthy upstream exactly once; the success is the answer even when another says "already known" first', async () => {
    const first = await upstream(node(rpcError('already known'), true));
    const second = await upstream(node({ kind: 'result', result: hash, delayMs: 50 }, true));
    const third = await upstream(node({ kind: 'result', result: hash, delayMs: 20 }, true));
    const tg = await gatewayOver(
      [
        { id: 'first', url: first.url },
        { id: 'second', url: second.url },
        { id: 'third', url: third.url },
      ],
      { broadcast: true, hedge: { enabled: true, delayMs: 5 } },
    );
    const res = await rpc(tg.url('eth'), send());
    expect(res.body.result).toBe(hash);
    for (const target of [first, second, third]) expect(sends(target).map(paramsOf)).toEqual([[raw]]);
    expect(await teamSpend(tg)).toBe(SEND_COST);
  });

  it('skips an upstream whose circuit is open', async () => {
    const dead = await upstream({ kind: 'status', status: 500 });
    const alive = await upstream(node(accepted(), true));
    const tg = await gatewayOver(
      [
        { id: 'dead', url: dead.url },
        { id: 'alive', url: alive.url },
      ],
      { broadcast: true, circuitBreaker: { failureThreshold: 1, cooldownMs: 600_000 } },
    );
    expect((await rpc(tg.url('eth'), send(1))).body.result).toBe(hash);
    expect((await rpc(tg.url('eth'), send(2))).body.result).toBe(hash);
    expect(sends(dead)).toHaveLength(1);
    expect(sends(alive)).toHaveLength(2);
  });

  it('when none succeeds: "already known" after an unknown outcome is the hash once found; otherwise the first error', async () => {
    const stalled = await upstream((call) => (call.methods[0] === 'eth_sendRawTransaction' ? { kind: 'reset' } : { kind: 'result', result: null }));
    const knows = await upstream(node(rpcError('already known'), true));
    const tg = await gatewayOver(
      [
        { id: 'reset', url: stalled.url },
        { id: 'knows', url: knows.url },
      ],
      { broadcast: true },
    );
    expect((await rpc(tg.url('eth'), send())).body.result).toBe(hash);

    const poor = await upstream(node(rpcError('insufficient funds for gas * price + value'), false));
    const poorToo = await upstream(node({ kind: 'rpc-error', code: -32000, message: 'insufficient funds for gas * price + value', delayMs: 20 }, false));
    const tg2 = await gatewayOver(
      [
        { id: 'poor', url: poor.url },
        { id: 'poorToo', url: poorToo.url },
      ],
      { broadcast: true },
    );
    const res = await rpc(tg2.url('eth'), send());
    expect(res.body.error).toEqual({ code: -32000, message: 'insufficient funds for gas * price + value' });
    expect(sends(poorToo)).toHaveLength(1);
    expect(lookups(poor)).toHaveLength(0);
  });
});

describe('which errors say "the node already has a transaction at this nonce"', () => {
  it.each([
    ['already known', true],
    ['known transaction: 0xabc', true],
    ['Known transaction', true],
    ['AlreadyKnown', true],
    ['Transaction with the same hash was already imported.', true],
    ['transaction already imported', true],
    ['nonce too low', true],
    ['Nonce too low', true],
    ['Transaction nonce is too low. Try incrementing the nonce.', true],
    ['OldNonce', true],
    ['replacement transaction underpriced', true],
    ['unknown transaction', false],
    ['transaction underpriced', false],
    ['insufficient funds for gas * price + value', false],
    ['execution reverted', false],
    ['nonce too high', false],
  ])('%s → %s', (message, duplicate) => {
    expect(isDuplicateError({ code: -32000, message })).toBe(duplicate);
  });
});
