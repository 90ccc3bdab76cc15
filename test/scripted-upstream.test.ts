import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { useSeededAnvil } from './helpers/anvil.js';
import { refusedUrl, startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const upstreams: ScriptedUpstream[] = [];
async function upstream(...args: Parameters<typeof startScriptedUpstream>): Promise<ScriptedUpstream> {
  const u = await startScriptedUpstream(...args);
  upstreams.push(u);
  return u;
}
afterEach(async () => {
  await Promise.all(upstreams.splice(0).map((u) => u.close()));
});

async function post(url: string, body: unknown, opts: { headersTimeout?: number } = {}) {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...opts,
  });
  return { status: res.statusCode, headers: res.headers, text: await res.body.text() };
}

const req = (id: unknown, method = 'eth_blockNumber', params: unknown[] = []) => ({ jsonrpc: '2.0', id, method, params });

describe('scripted upstream behaviours', () => {
  it('json: fixed body with a chosen status, and a function that echoes the id', async () => {
    const u = await upstream({ kind: 'json', status: 503, body: { hello: 'world' } });
    const a = await post(u.url, req(1));
    expect(a.status).toBe(503);
    expect(a.headers['content-type']).toBe('application/json');
    expect(JSON.parse(a.text)).toEqual({ hello: 'world' });

    u.setBehaviour({ kind: 'json', body: (r: unknown) => ({ echoed: (r as { id: unknown }).id }) });
    const b = await post(u.url, req('abc'));
    expect(b.status).toBe(200);
    expect(JSON.parse(b.text)).toEqual({ echoed: 'abc' });
  });

  it('result: echoes ids of any type, maps batches item by item', async () => {
    const u = await upstream({ kind: 'result', result: (r: unknown) => `m:${(r as { method: string }).method}` });
    expect(JSON.parse((await post(u.url, req(0))).text)).toEqual({ jsonrpc: '2.0', id: 0, result: 'm:eth_blockNumber' });
    const batch = JSON.parse((await post(u.url, [req('x', 'a'), req(7, 'b')])).text);
    expect(batch).toEqual([
      { jsonrpc: '2.0', id: 'x', result: 'm:a' },
      { jsonrpc: '2.0', id: 7, result: 'm:b' },
    ]);
    u.setBehaviour({ kind: 'result', result: null });
    expect(JSON.parse((await post(u.url, req(3))).text)).toEqual({ jsonrpc: '2.0', id: 3, result: null });
  });

  it('rpc-error: a JSON-RPC error with HTTP 200', async () => {
    const u = await upstream({ kind: 'rpc-error', code: -32005, message: 'limit exceeded' });
    const r = await post(u.url, req(9));
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text)).toEqual({ jsonrpc: '2.0', id: 9, error: { code: -32005, message: 'limit exceeded' } });
  });

  it('status: bare 500 and 429 answers', async () => {
    const u = await upstream({ kind: 'status', status: 500 });
    const a = await post(u.url, req(1));
    expect(a.status).toBe(500);
    expect(a.text).toBe('HTTP 500');
    u.setBehaviour({ kind: 'status', status: 429, body: 'slow down', headers: { 'retry-after': '2' } });
    const b = await post(u.url, req(1));
    expect(b.status).toBe(429);
    expect(b.text).toBe('slow down');
    expect(b.headers['retry-after']).toBe('2');
  });

  it('raw: a non-JSON body', async () => {
    const u = await upstream({ kind: 'raw', body: '<html>bad gateway</html>' });
    const r = await post(u.url, req(1));
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('text/html');
    expect(r.text).toBe('<html>bad gateway</html>');
    expect(() => JSON.parse(r.text)).toThrow();
  });

  it('delayMs: answers after the delay', async () => {
    const u = await upstream({ kind: 'result', result: 1, delayMs: 150 });
    const t0 = performance.now();
    await post(u.url, req(1));
    expect(performance.now() - t0).toBeGreaterThanOrEqual(140);
  });

  it('stall: the client times out, and close() ends stalled sockets at once', async () => {
    const u = await upstream({ kind: 'stall' });
    await expect(post(u.url, req(1), { headersTimeout: 200 })).rejects.toMatchObject({
      code: 'UND_ERR_HEADERS_TIMEOUT',
    });
    // A second stalled request without a client timeout: close() must not wait for it.
    const pending = post(u.url, req(2));
    await expect.poll(() => u.calls.length).toBe(2);
    const t0 = performance.now();
    await u.close();
    expect(performance.now() - t0).toBeLessThan(1_000);
    await expect(pending).rejects.toMatchObject({ code: 'UND_ERR_SOCKET' });
  });

  it('reset: the connection is reset without an answer', async () => {
    const u = await upstream({ kind: 'reset' });
    const err = await post(u.url, req(1)).then(
      () => undefined,
      (e: unknown) => e as { code?: string; cause?: { code?: string } },
    );
    expect(err).toBeDefined();
    expect([err?.code, err?.cause?.code]).toEqual(expect.arrayContaining([expect.stringMatching(/ECONNRESET|UND_ERR_SOCKET/)]));
    expect(u.calls).toHaveLength(1);
  });

  it('function behaviour: fails the first call, then succeeds', async () => {
    const u = await upstream((_call, index) => (index === 0 ? { kind: 'status', status: 502 } : { kind: 'result', result: '0x10' }));
    expect((await post(u.url, req(1))).status).toBe(502);
    expect(JSON.parse((await post(u.url, req(2))).text)).toEqual({ jsonrpc: '2.0', id: 2, result: '0x10' });
  });

  it('calls: records every body in order, with methods, path and invalid JSON', async () => {
    const u = await upstream({ kind: 'result', result: true });
    await post(`${u.url}/v3/secret`, req(1, 'eth_chainId'));
    await post(u.url, [req(2, 'a'), req(3, 'b')]);
    await post(u.url, '{not json');
    expect(u.calls.map((c) => c.methods)).toEqual([['eth_chainId'], ['a', 'b'], []]);
    expect(u.calls[0]?.body).toEqual(req(1, 'eth_chainId'));
    expect(u.calls[0]?.path).toBe('/v3/secret');
    expect(u.calls[0]?.headers['content-type']).toBe('application/json');
    expect(u.calls[2]?.body).toBeUndefined();
    expect(u.calls[2]?.raw).toBe('{not json');
  });

  it('refusedUrl: nothing listens there', async () => {
    const url = await refusedUrl();
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    await expect(post(url, req(1))).rejects.toMatchObject({ code: 'ECONNREFUSED' });
  });
});

describe('scripted upstream proxying a real anvil', () => {
  const anvil = useSeededAnvil({}, { blocks: 2, txPerBlock: 1 });

  it('proxy: forwards to anvil and returns its answer', async () => {
    const u = await upstream({ kind: 'proxy', url: anvil.node.url });
    const hash = anvil.seed.blocksWithTransactions[0]!;
    expect(JSON.parse((await post(u.url, req(5, 'eth_chainId'))).text)).toEqual({ jsonrpc: '2.0', id: 5, result: '0x7a69' });
    const block = JSON.parse((await post(u.url, req(6, 'eth_getBlockByHash', [hash, false]))).text) as {
      id: number;
      result: { hash: string; transactions: string[] };
    };
    expect(block.id).toBe(6);
    expect(block.result.hash).toBe(hash);
    expect(block.result.transactions).toHaveLength(1);
    expect(u.calls.map((c) => c.methods[0])).toEqual(['eth_chainId', 'eth_getBlockByHash']);
  });

  it('proxy + transform: a lying upstream returns a block with another hash', async () => {
    const lie = `0x${'ab'.repeat(32)}`;
    const u = await upstream({
      kind: 'proxy',
      url: anvil.node.url,
      transform: (res) => {
        const r = res as { result: { hash: string } };
        return { ...r, result: { ...r.result, hash: lie } };
      },
    });
    const hash = anvil.seed.blocksWithTransactions[1]!;
    const answer = JSON.parse((await post(u.url, req(1, 'eth_getBlockByHash', [hash, false]))).text) as {
      result: { hash: string; transactions: string[] };
    };
    expect(answer.result.hash).toBe(lie);
    expect(answer.result.transactions).toHaveLength(1); // the rest is the real block
  });
});
