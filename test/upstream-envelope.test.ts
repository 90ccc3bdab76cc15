// How the gateway reads an upstream's envelope with the WebAssembly validator: member names the
// way JSON.parse reads them (escaped spellings, the last of repeated members), answers of many
// chunks passed on verbatim or refused for one broken byte, through the real gateway and a real
// HTTP upstream.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startScriptedUpstream, type BehaviourFn, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { startTestGateway, type TestGateway } from './helpers/gateway.js';

const COLLECTION = 'J1S9H3QjnRtBbbuD4HjPV6RpRhwuk4zKbxsnCHuTgh9w';

function answerRaw(body: (id: number) => string): BehaviourFn {
  return (call) => ({ kind: 'raw', body: body((call.body as { id: number }).id), contentType: 'application/json' });
}

describe('upstream envelopes', () => {
  let upstream: ScriptedUpstream;
  let tg: TestGateway;

  beforeAll(async () => {
    upstream = await startScriptedUpstream({ kind: 'status', status: 500 });
    tg = await startTestGateway({
      networks: [
        // Only `main`: what the client gets can only come from it.
        { id: 'das', kind: 'asset', upstreams: [{ id: 'main', url: upstream.url }] },
      ],
    });
  });
  afterAll(async () => {
    await tg.close();
    await upstream.close();
  });

  const call = { jsonrpc: '2.0', id: 7, method: 'getAssetsByGroup', params: { groupKey: 'collection', groupValue: COLLECTION, limit: 1 } };

  async function text(): Promise<string> {
    const response = await fetch(tg.url('das'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(call) });
    expect(response.status).toBe(200);
    return response.text();
  }

  /** The attempts of the last request's log line. */
  function lastAttempts(): Array<{ upstream: string; reason: string }> {
    const line = tg.logLines.filter((entry) => entry.includes('"msg":"request"')).at(-1)!;
    return (JSON.parse(line) as { attempts?: Array<{ upstream: string; reason: string }> }).attempts ?? [];
  }

  it('reads member names written with escapes as JSON.parse does ("r\\u0065sult" is result, "\\u0069d" is id)', async () => {
    upstream.setBehaviour(answerRaw((id) => `{"jsonrpc":"2.0","\\u0069d":${id},"r\\u0065sult":{"total":1,"items":["escaped"]}}`));
    expect(await text()).toBe('{"jsonrpc":"2.0","id":7,"result":{"total":1,"items":["escaped"]}}');
    // A decoy that only looks like the member: `"resul"` + `t` outside the name is not result.
    upstream.setBehaviour(answerRaw((id) => `{"jsonrpc":"2.0","id":${id},"resul\\u0074x":1,"result":"real"}`));
    expect(await text()).toBe('{"jsonrpc":"2.0","id":7,"result":"real"}');
  });

  it('takes the last of repeated members, as JSON.parse does', async () => {
    upstream.setBehaviour(answerRaw((id) => `{"jsonrpc":"2.0","id":0,"result":"first","id":${id},"r\\u0065sult":"last"}`));
    expect(await text()).toBe('{"jsonrpc":"2.0","id":7,"result":"last"}');
  });

  it('passes on a result of many chunks verbatim, and refuses it as bad_json when one byte deep inside is broken', async () => {
    const items = Array.from({ length: 20_000 }, (_, index) => `{"id":"asset-${index}","name":"caf\u00e9 \\u00e9 🦀 ${index}","n":${index}.5e-3}`);
    const resultText = `{"total":20000,"items":[${items.join(',')}]}`;
    expect(Buffer.byteLength(resultText)).toBeGreaterThan(1_000_000);
    upstream.setBehaviour(answerRaw((id) => `{"jsonrpc":"2.0","id":${id},"result":${resultText}}`));
    expect(await text()).toBe(`{"jsonrpc":"2.0","id":7,"result":${resultText}}`);

    // A raw control byte deep inside a string, half-way through the answer: not JSON, so the
    // attempt fails (bad_json) and the client gets an error, not the broken bytes.
    const broken = resultText.replace('asset-12345', 'asset-12\u000145');
    expect(broken).not.toBe(resultText);
    upstream.setBehaviour(answerRaw((id) => `{"jsonrpc":"2.0","id":${id},"result":${broken}}`));
    const response = await fetch(tg.url('das'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(call) });
    const answer = (await response.json()) as { id: number; error?: { code: number }; result?: unknown };
    expect(answer.id).toBe(7);
    expect(answer.result).toBeUndefined();
    expect(answer.error?.code).toBeTypeOf('number');
    expect(lastAttempts().map((attempt) => [attempt.upstream, attempt.reason])).toContainEqual(['main', 'bad_json']);
  });
});
