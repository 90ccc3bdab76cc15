// Results of methods the gateway does not inspect (getAssetsByGroup, pass-through methods) are
// passed on as the exact bytes the upstream sent, inside the client's envelope; a body that is
// not a well-formed JSON-RPC object is still an upstream failure.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedUpstream, type BehaviourFn, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { startTestGateway, type TestGateway } from './helpers/gateway.js';

const COLLECTION = 'J1S9H3QjnRtBbbuD4HjPV6RpRhwuk4zKbxsnCHuTgh9w';

/** Answers each call with this raw text, given the gateway's own request id. */
function answerRaw(body: (id: number) => string): BehaviourFn {
  return (call) => ({ kind: 'raw', body: body((call.body as { id: number }).id), contentType: 'application/json' });
}

describe('result bytes pass through', () => {
  let upstream: ScriptedUpstream;
  let backup: ScriptedUpstream;
  let tg: TestGateway;

  beforeAll(async () => {
    upstream = await startScriptedUpstream({ kind: 'status', status: 500 });
    backup = await startScriptedUpstream({ kind: 'result', result: { total: 0, limit: 1, items: [] } });
    tg = await startTestGateway({
      networks: [
        { id: 'das', kind: 'asset', upstreams: [{ id: 'main', url: upstream.url }, { id: 'backup', url: backup.url }] },
        { id: 'evm', kind: 'evm', chainId: 1, upstreams: [{ id: 'main', url: upstream.url }, { id: 'backup', url: backup.url }], methods: { eth_blockNumber: 10 } },
        // Only `main`: what the client gets can only come from it.
        { id: 'evm-main', kind: 'evm', chainId: 1, upstreams: [{ id: 'main', url: upstream.url }], methods: { eth_blockNumber: 10 } },
      ],
    });
  });
  afterAll(async () => {
    await tg.close();
    await upstream.close();
    await backup.close();
  });

  const assetsCall = { jsonrpc: '2.0', id: 'client-id', method: 'getAssetsByGroup', params: { groupKey: 'collection', groupValue: COLLECTION, limit: 1 } };

  async function raw(url: string, body: unknown): Promise<{ status: number; text: string }> {
    const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: response.status, text: await response.text() };
  }

  it('keeps the upstream bytes of the result verbatim (spacing, key order, escapes) around the client id', async () => {
    const resultText = '{ "total" : 1,"limit":1, "items":[{"id":"x","content":{"metadata":{"name":"caf\\u00e9 \\"}\\" 🦀"}}}] }';
    // Raw text, answering with the gateway's own request id.
    upstream.setBehaviour(answerRaw((id) => `{"jsonrpc":"2.0","id":${id},"result":${resultText}}`));
    const response = await raw(tg.url('das'), assetsCall);
    expect(response.status).toBe(200);
    expect(response.text).toBe(`{"jsonrpc":"2.0","id":"client-id","result":${resultText}}`);
  });

  it('passes a result of megabytes verbatim with the right Content-Length (written as head, result bytes and tail, not copied)', async () => {
    // Past the 64 KiB above which the response writes the result's own bytes between the head and
    // the tail (envelope.ts replyBody), with multi-byte characters on both sides of chunk boundaries.
    const items = Array.from({ length: 6000 }, (_, index) => `{"id":"asset-${index}","name":"caf\u00e9 🦀 ${index}","ok":${index % 2 === 0}}`);
    const resultText = `{"total":6000,"limit":6000,"items":[${items.join(',')}]}`;
    expect(Buffer.byteLength(resultText)).toBeGreaterThan(300_000);
    upstream.setBehaviour(answerRaw((id) => `{"jsonrpc":"2.0","id":${id},"result":${resultText}}`));
    for (let round = 0; round < 3; round += 1) {
      // Only `main` serves this network: a hedged call to `backup` cannot answer first.
      const call = { jsonrpc: '2.0', id: 'client-id', method: 'eth_blockNumber', params: [] };
      const response = await fetch(tg.url('evm-main'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(call) });
      const text = await response.text();
      expect(response.status).toBe(200);
      expect(text).toBe(`{"jsonrpc":"2.0","id":"client-id","result":${resultText}}`);
      expect(Number(response.headers.get('content-length'))).toBe(Buffer.byteLength(text));
      expect(response.headers.get('x-credits-cost')).toBe('10');
    }
  });

  it('treats a body that is not one well-formed object, or a broken bare result, as an upstream failure', async () => {
    for (const body of [
      (id: number) => `{"jsonrpc":"2.0","id":${id},"result":{"total":1,"items":[}`,
      (id: number) => `{"jsonrpc":"2.0","id":${id},"result":tru}`,
      (id: number) => `{"jsonrpc":"2.0","id":${id},"result":1} and more`,
    ]) {
      upstream.setBehaviour(answerRaw(body));
      const backupCalls = backup.calls.length;
      const response = await raw(tg.url('evm'), { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] });
      expect(response.status).toBe(200);
      expect(JSON.parse(response.text)).toEqual({ jsonrpc: '2.0', id: 1, result: { total: 0, limit: 1, items: [] } });
      expect(backup.calls.length).toBe(backupCalls + 1);
    }
  });

  it('passes a result next to "error": null, and an upstream error object as the client error', async () => {
    upstream.setBehaviour(answerRaw((id) => `{"jsonrpc":"2.0","error":null,"id":${id},"result":"0x10"}`));
    expect(JSON.parse((await raw(tg.url('evm-main'), { jsonrpc: '2.0', id: 2, method: 'eth_blockNumber', params: [] })).text)).toEqual({ jsonrpc: '2.0', id: 2, result: '0x10' });
    upstream.setBehaviour({ kind: 'rpc-error', code: -32000, message: 'execution reverted', data: '0x08c379a0' });
    expect(JSON.parse((await raw(tg.url('evm-main'), { jsonrpc: '2.0', id: 3, method: 'eth_blockNumber', params: [] })).text)).toEqual({
      jsonrpc: '2.0',
      id: 3,
      error: { code: -32000, message: 'execution reverted', data: '0x08c379a0' },
    });
  });
});
