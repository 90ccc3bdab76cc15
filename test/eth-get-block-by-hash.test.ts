// eth_getBlockByHash through a real gateway in front of a real seeded anvil: the
// answer is exactly anvil's, the hash is canonicalised to lower case on the way upstream, and
// malformed params are rejected with -32602 naming the argument, without reaching the upstream.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { directRpc, useSeededAnvil } from './helpers/anvil.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const NETWORK = 'eth';
const anvil = useSeededAnvil({}, { blocks: 6, txPerBlock: 2 });

let gateway: TestGateway;
/** Sits between the gateway and anvil and records what the gateway forwards. */
let proxy: ScriptedUpstream;
let url: string;

beforeAll(async () => {
  proxy = await startScriptedUpstream({ kind: 'proxy', url: anvil.node.url });
  gateway = await startTestGateway({
    networks: [{ id: NETWORK, kind: 'evm', chainId: 31337, upstreams: [{ id: 'anvil', url: proxy.url }] }],
  });
  url = gateway.url(NETWORK);
});

afterAll(async () => {
  await gateway?.close();
  await proxy?.close();
});

const direct = (method: string, params: unknown[]): Promise<unknown> => directRpc(anvil.node.url, method, params);

function blockHash(index: number): string {
  const hash = anvil.seed.blocksWithTransactions[index];
  if (hash === undefined) throw new Error(`seed has no block ${index}`);
  return hash;
}

/** Every eth_getBlockByHash the proxy forwarded to anvil, as [hash, hydrated]. */
function forwardedParams(): unknown[] {
  return proxy.calls
    .filter((call) => call.methods.includes('eth_getBlockByHash'))
    .map((call) => (call.body as { params?: unknown }).params);
}

describe('eth_getBlockByHash through the gateway', () => {
  it('hydrated=false returns exactly what anvil returns', async () => {
    const hash = blockHash(0);
    const expected = await direct('eth_getBlockByHash', [hash, false]);
    const res = await rpc(url, { jsonrpc: '2.0', id: 7, method: 'eth_getBlockByHash', params: [hash, false] });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ jsonrpc: '2.0', id: 7, result: expected });
    const block = res.body.result as { hash: string; transactions: unknown[] };
    expect(block.hash).toBe(hash);
    expect(block.transactions.length).toBeGreaterThan(0);
    for (const tx of block.transactions) expect(tx).toMatch(/^0x[0-9a-f]{64}$/);
  });

  it('hydrated=true returns full transaction objects equal to anvil\'s', async () => {
    const hash = blockHash(1);
    const expected = (await direct('eth_getBlockByHash', [hash, true])) as { transactions: Array<{ hash: string }> };
    const res = await rpc(url, { jsonrpc: '2.0', id: 'h', method: 'eth_getBlockByHash', params: [hash, true] });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ jsonrpc: '2.0', id: 'h', result: expected });
    const transactions = (res.body.result as { transactions: unknown[] }).transactions;
    expect(transactions.length).toBe(expected.transactions.length);
    for (const tx of transactions) {
      expect(tx).toMatchObject({ hash: expect.stringMatching(/^0x[0-9a-f]{64}$/), blockHash: hash, from: expect.any(String) });
    }
  });

  it('an unknown hash answers result null', async () => {
    const unknown = `0x${'ab'.repeat(32)}`;
    expect(await direct('eth_getBlockByHash', [unknown, false])).toBeNull();
    const res = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [unknown, false] });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ jsonrpc: '2.0', id: 1, result: null });
  });

  it('accepts an upper-case hash and forwards it in lower case', async () => {
    // A block no other test asks for, so no cache can answer it without the upstream.
    const hash = blockHash(2);
    const upper = `0x${hash.slice(2).toUpperCase()}`;
    expect(upper).not.toBe(hash);
    const expected = await direct('eth_getBlockByHash', [hash, false]);
    const before = proxy.calls.length;

    const res = await rpc(url, { jsonrpc: '2.0', id: 2, method: 'eth_getBlockByHash', params: [upper, false] });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ jsonrpc: '2.0', id: 2, result: expected });

    // With `verification: full` (the default) a non-hydrated miss fetches the full block to verify it.
    const forwarded = proxy.calls.slice(before).map((call) => (call.body as { params?: unknown }).params);
    expect(forwarded).toEqual([[hash, true]]);
    expect(forwardedParams()).not.toContainEqual([upper, true]);
  });

  it('treats a hash with a single upper-case digit, at either end, as the same block', async () => {
    const hash = blockHash(4);
    const expected = await direct('eth_getBlockByHash', [hash, false]);
    const letters = [...hash.matchAll(/[a-f]/g)].map((match) => match.index);
    const first = letters[0]!;
    const last = letters[letters.length - 1]!;
    expect(first).toBeGreaterThanOrEqual(2);
    const upperAt = (index: number) => hash.slice(0, index) + hash[index]!.toUpperCase() + hash.slice(index + 1);
    const before = proxy.calls.length;
    for (const [id, variant] of [hash, upperAt(first), upperAt(last)].entries()) {
      const res = await rpc(url, { jsonrpc: '2.0', id, method: 'eth_getBlockByHash', params: [variant, false] });
      expect(res.body).toEqual({ jsonrpc: '2.0', id, result: expected });
      expect(res.headers.get('x-cache')).toBe(id === 0 ? 'miss' : 'hit');
    }
    expect(proxy.calls.length - before).toBe(1);
  });

  describe('invalid params get -32602 and never reach the upstream', () => {
    const good = `0x${'12'.repeat(32)}`;
    const cases: Array<{ name: string; params: unknown; message: RegExp }> = [
      { name: 'hash too short', params: [`0x${'a'.repeat(63)}`, false], message: /^invalid argument 0/ },
      { name: 'hash too long', params: [`0x${'a'.repeat(66)}`, false], message: /^invalid argument 0/ },
      { name: 'hash without 0x', params: ['a'.repeat(64), false], message: /^invalid argument 0/ },
      { name: 'hash with non-hex digits', params: [`0x${'g'.repeat(64)}`, false], message: /^invalid argument 0/ },
      // The characters on either side of each hex range, at the last digit, and an upper-case X.
      ...['/', ':', '@', 'G', '`', 'g'].map((char) => ({ name: `hash ending in "${char}"`, params: [`0x${'1'.repeat(63)}${char}`, false], message: /^invalid argument 0/ })),
      { name: 'hash with 0X', params: [`0X${'a'.repeat(64)}`, false], message: /^invalid argument 0/ },
      { name: 'hash with a non-ASCII digit', params: [`0x${'a'.repeat(63)}\u0661`, false], message: /^invalid argument 0/ },
      // U+0161 and U+0130: their low bytes are `a` and `0`, valid digits to a check that reads bytes.
      { name: 'hash with a character whose low byte is a hex digit', params: [`0x\u0161${'a'.repeat(62)}\u0130`, false], message: /^invalid argument 0/ },
      { name: 'hash as a number', params: [12345, false], message: /^invalid argument 0/ },
      { name: 'hash null', params: [null, false], message: /^invalid argument 0/ },
      { name: 'no params at all (empty array)', params: [], message: /^invalid argument 0/ },
      { name: 'hydrated missing', params: [good], message: /^invalid argument 1/ },
      { name: 'hydrated as a string', params: [good, 'true'], message: /^invalid argument 1/ },
      { name: 'hydrated as a number', params: [good, 1], message: /^invalid argument 1/ },
      { name: 'hydrated null', params: [good, null], message: /^invalid argument 1/ },
      { name: 'params as an object', params: { hash: good, hydrated: false }, message: /./ },
      { name: 'too many params', params: [good, false, 'extra'], message: /./ },
    ];

    for (const { name, params, message } of cases) {
      it(name, async () => {
        const before = proxy.calls.length;
        const res = await rpc(url, { jsonrpc: '2.0', id: 'bad', method: 'eth_getBlockByHash', params });
        expect(res.status).toBe(200);
        expect(res.body).toMatchObject({ jsonrpc: '2.0', id: 'bad', error: { code: -32602 } });
        expect(res.body.result).toBeUndefined();
        expect(res.body.error.message).toMatch(message);
        expect(proxy.calls.length).toBe(before);
      });
    }

    it('params member missing altogether', async () => {
      const before = proxy.calls.length;
      const res = await rpc(url, { jsonrpc: '2.0', id: 3, method: 'eth_getBlockByHash' });
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ jsonrpc: '2.0', id: 3, error: { code: -32602 } });
      expect(proxy.calls.length).toBe(before);
    });

    it('in a batch, a bad item is rejected on its own while a good one is answered', async () => {
      const hash = blockHash(3);
      const expected = await direct('eth_getBlockByHash', [hash, false]);
      const res = await rpc(url, [
        { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash.slice(0, 10), false] },
        { jsonrpc: '2.0', id: 2, method: 'eth_getBlockByHash', params: [hash, false] },
        { jsonrpc: '2.0', id: 3, method: 'eth_getBlockByHash', params: [hash, 'yes'] },
      ]);
      expect(res.status).toBe(200);
      expect(res.body).toHaveLength(3);
      const byId = new Map((res.body as Array<{ id: number }>).map((reply) => [reply.id, reply]));
      expect(byId.get(1)).toMatchObject({ error: { code: -32602, message: expect.stringMatching(/^invalid argument 0/) } });
      expect(byId.get(2)).toEqual({ jsonrpc: '2.0', id: 2, result: expected });
      expect(byId.get(3)).toMatchObject({ error: { code: -32602, message: expect.stringMatching(/^invalid argument 1/) } });
    });
  });
});
