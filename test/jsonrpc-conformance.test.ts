// JSON-RPC 2.0 and HTTP conformance of the RPC listener (README, How a request is handled;
// docs/errors.md), over real HTTP on loopback against a scripted upstream that records every call
// it receives.

import { connect } from 'node:net';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type RpcItem, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';

// The scripted upstreams in this file answer made-up blocks (only their hash is right), so block
// verification is off on its EVM networks: verification has its own suites (block-verification,
// right-answers), and this file tests something else.

const HASH = `0x${'ab'.repeat(32)}`;
let hashCounter = 0;
/** A block hash no earlier test asked for, so the block cache cannot answer in the upstream's place. */
const freshHash = (): string => `0x${(++hashCounter).toString(16).padStart(8, '0')}${'ab'.repeat(28)}`;
const MAX_BATCH_ITEMS = 5;
const MAX_BODY_BYTES = 2048;

let upstream: ScriptedUpstream;
let hostUpstream: ScriptedUpstream;
let tg: TestGateway;
let url: string;

/** A block whose hash echoes the requested one, so the gateway's hash check accepts it. */
function blockFor(item: unknown): unknown {
  const params = (item as RpcItem).params as unknown[] | undefined;
  return { hash: params?.[0], number: '0x1', transactions: [] };
}

const call = (id: unknown, method: string, params?: unknown) =>
  params === undefined ? { jsonrpc: '2.0', id, method } : { jsonrpc: '2.0', id, method, params };
const notification = (method: string, params: unknown = []) => ({ jsonrpc: '2.0', method, params });

beforeAll(async () => {
  upstream = await startScriptedUpstream({ kind: 'result', result: blockFor });
  hostUpstream = await startScriptedUpstream({ kind: 'result', result: blockFor });
  tg = await startTestGateway({
    config: { server: { host: '127.0.0.1', port: 0, maxBatchItems: MAX_BATCH_ITEMS, maxBodyBytes: MAX_BODY_BYTES } },
    networks: [
      // `foo` is a method this network does not offer: its only upstream declares it does not serve it
      // (any other unlisted name would be forwarded at the catalogue's price, docs/methods.md).
      { id: 'evm', kind: 'evm', verification: 'off', chainId: 31337, upstreams: [{ id: 'scripted', url: upstream.url, methods: { deny: ['foo'] } }] },
      { id: 'evm-host', kind: 'evm', verification: 'off', chainId: 31338, baseUrls: ['evm.test.local'], upstreams: [{ id: 'host-scripted', url: hostUpstream.url }] },
    ],
  });
  url = tg.url('evm');
});

afterAll(async () => {
  await tg?.close();
  await upstream?.close();
  await hostUpstream?.close();
});

beforeEach(() => {
  upstream.calls.length = 0;
  hostUpstream.calls.length = 0;
});

describe('envelope errors', () => {
  it('invalid JSON → 200, -32700 Parse error, id null', async () => {
    const r = await rpc(url, undefined, { rawBody: '{"jsonrpc":"2.0","id":1,' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
    expect(upstream.calls).toHaveLength(0);
  });

  it('empty batch [] → one -32600 object, not an array', async () => {
    const r = await rpc(url, []);
    expect(r.status).toBe(200);
    expect(Array.isArray(r.body)).toBe(false);
    expect(r.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    expect(r.body.error.message).toMatch(/empty batch/);
  });

  it('[1,2,3] → three -32600 errors with id null', async () => {
    const r = await rpc(url, [1, 2, 3]);
    expect(r.status).toBe(200);
    expect(r.body).toHaveLength(3);
    for (const reply of r.body) {
      expect(reply).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
      expect(reply).not.toHaveProperty('result');
    }
  });

  it.each([
    ['jsonrpc "1.0"', { jsonrpc: '1.0', id: 7, method: 'eth_chainId' }, 7, /jsonrpc/],
    ['jsonrpc missing', { id: 'abc', method: 'eth_chainId' }, 'abc', /jsonrpc/],
    ['method not a string', { jsonrpc: '2.0', id: 8, method: 42 }, 8, /method/],
    ['method missing', { jsonrpc: '2.0', id: 9 }, 9, /method/],
    ['params a number', { jsonrpc: '2.0', id: 10, method: 'eth_chainId', params: 5 }, 10, /params/],
    ['params a string', { jsonrpc: '2.0', id: 11, method: 'eth_chainId', params: 'x' }, 11, /params/],
    ['id an object', { jsonrpc: '2.0', id: { a: 1 }, method: 'eth_chainId' }, null, /id/],
    ['id a boolean', { jsonrpc: '2.0', id: true, method: 'eth_chainId' }, null, /id/],
  ])('%s → -32600 echoing the id when valid', async (_name, body, id, message) => {
    const r = await rpc(url, body);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ jsonrpc: '2.0', error: { code: -32600 } });
    expect(r.body.id).toStrictEqual(id);
    expect(r.body.error.message).toMatch(message);
  });

  it('params null means params not given: -32602 naming what is missing for a method that needs them, served for one that takes none', async () => {
    const block = await rpc(url, { jsonrpc: '2.0', id: 12, method: 'eth_getBlockByHash', params: null });
    expect(block.status).toBe(200);
    expect(block.body).toMatchObject({ jsonrpc: '2.0', id: 12, error: { code: -32602 } });
    expect(block.body.error.message).toMatch(/params|argument 0/);
    const chainId = await rpc(url, { jsonrpc: '2.0', id: 13, method: 'eth_chainId', params: null });
    expect(chainId.body).toStrictEqual({ jsonrpc: '2.0', id: 13, result: expect.stringMatching(/^0x[0-9a-f]+$/) });
  });

  it(`batch over maxBatchItems (${MAX_BATCH_ITEMS}) → one -32600 "batch too large", nothing executed`, async () => {
    const hash = freshHash();
    const batch = Array.from({ length: MAX_BATCH_ITEMS + 1 }, (_, i) => call(i, 'eth_getBlockByHash', [hash, false]));
    const r = await rpc(url, batch);
    expect(r.status).toBe(200);
    expect(Array.isArray(r.body)).toBe(false);
    expect(r.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    expect(r.body.error.message).toMatch(/batch too large/);
    expect(upstream.calls).toHaveLength(0);

    // Exactly the limit is fine.
    const ok = await rpc(url, batch.slice(0, MAX_BATCH_ITEMS));
    expect(ok.body).toHaveLength(MAX_BATCH_ITEMS);
  });

  it('unknown method → -32601 "the method foo does not exist/is not available"', async () => {
    const r = await rpc(url, call(3, 'foo', []));
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ jsonrpc: '2.0', id: 3, error: { code: -32601, message: 'the method foo does not exist/is not available' } });
    expect(upstream.calls).toHaveLength(0);
  });
});

describe('ids', () => {
  it.each([
    ['0', 0],
    ['a string', 'req-1'],
    ['an empty string', ''],
    ['null', null],
    ['a float', 1.5],
    ['a negative number', -7],
  ])('id %s is echoed with its exact type', async (_name, id) => {
    const r = await rpc(url, call(id, 'eth_chainId'));
    expect(r.status).toBe(200);
    expect(r.body).toStrictEqual({ jsonrpc: '2.0', id, result: '0x7a69' });
  });

  it('the raw response text carries the id exactly (0 stays 0, "1" stays a string)', async () => {
    for (const [id, text] of [
      [0, '"id":0,'],
      ['1', '"id":"1",'],
      [2.25, '"id":2.25,'],
    ] as const) {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(call(id, 'net_version')),
      });
      expect(await response.text()).toContain(text);
    }
  });
});

describe('batches and notifications', () => {
  it('mixed batch: each item answered with its id, in order; the notification gets no reply and is not forwarded', async () => {
    const hash = freshHash();
    const r = await rpc(url, [
      call('first', 'eth_getBlockByHash', [hash, false]),
      notification('eth_getBlockByHash', [freshHash(), true]),
      call(0, 'eth_chainId'),
      call(3, 'foo'),
      { jsonrpc: '1.0', id: 4, method: 'net_version' },
    ]);
    expect(r.status).toBe(200);
    expect(r.body).toHaveLength(4);
    expect(r.body.map((reply: { id: unknown }) => reply.id)).toStrictEqual(['first', 0, 3, 4]);
    expect(r.body[0]).toStrictEqual({ jsonrpc: '2.0', id: 'first', result: { hash, number: '0x1', transactions: [] } });
    expect(r.body[1]).toStrictEqual({ jsonrpc: '2.0', id: 0, result: '0x7a69' });
    expect(r.body[2].error.code).toBe(-32601);
    expect(r.body[3].error.code).toBe(-32600);
    // Only the call was forwarded; the notification's hash never reached the upstream.
    expect(upstream.calls).toHaveLength(1);
    expect((upstream.calls[0]!.body as RpcItem).params).toEqual([hash, false]);
  });

  it('all-notification batch → HTTP 204 with an empty body, nothing forwarded', async () => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify([notification('eth_getBlockByHash', [freshHash(), false]), notification('eth_chainId')]),
    });
    expect(response.status).toBe(204);
    expect(await response.text()).toBe('');
    expect(response.headers.get('x-request-id')).toBeTruthy();
    expect(upstream.calls).toHaveLength(0);
  });

  it('a single notification → HTTP 204, empty body, not forwarded', async () => {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(notification('eth_getBlockByHash', [freshHash(), true])),
    });
    expect(response.status).toBe(204);
    expect(await response.text()).toBe('');
    expect(upstream.calls).toHaveLength(0);
  });
});

describe('HTTP layer', () => {
  it.each([
    ['a wrong path', '/nope'],
    ['an unknown prefix', '/polygon/v3/KEY'],
    ['v2 instead of v3', '/evm/v2/KEY'],
    ['extra segments after the key', '/evm/v3/KEY/extra'],
  ])('%s → 404 with a -32600 body saying what was expected', async (_name, path) => {
    const r = await rpc(`${tg.gateway.rpcOrigin}${path.replace('KEY', tg.apiKey)}`, call(1, 'eth_chainId'));
    expect(r.status).toBe(404);
    expect(r.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    expect(r.body.error.message).toContain('/v3/<API_KEY>');
    expect(r.headers.get('x-request-id')).toBeTruthy();
  });

  it('GET → 405 with Allow: POST and a -32600 body', async () => {
    const r = await rpc(url, undefined, { method: 'GET' });
    expect(r.status).toBe(405);
    expect(r.headers.get('allow')).toBe('POST');
    expect(r.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
  });

  it(`body over maxBodyBytes (${MAX_BODY_BYTES}) → 413 with -32600, not forwarded`, async () => {
    const big = call(1, 'eth_getBlockByHash', [HASH, false, 'x'.repeat(MAX_BODY_BYTES)]);
    const r = await rpc(url, big);
    expect(r.status).toBe(413);
    expect(r.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    expect(upstream.calls).toHaveLength(0);
    // Just under the limit is read and validated normally (here: too many arguments → -32602).
    const small = call(1, 'eth_getBlockByHash', [HASH, false, 'x'.repeat(MAX_BODY_BYTES - 200)]);
    const ok = await rpc(url, small);
    expect(ok.status).toBe(200);
    expect(ok.body.error.code).toBe(-32602);
  });

  it('a streamed (chunked) body over maxBodyBytes, without Content-Length → 413 too', async () => {
    const chunks = function* () {
      for (let i = 0; i < 10; i += 1) yield Buffer.from(' '.repeat(1000));
    };
    const response = await request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: Readable.from(chunks()) });
    expect(response.statusCode).toBe(413);
    expect(response.headers['content-length']).toBeDefined();
    expect(JSON.parse(await response.body.text())).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    expect(upstream.calls).toHaveLength(0);
  });

  it('Content-Type text/plain → 415 with -32600; application/json with a charset is accepted', async () => {
    const r = await rpc(url, call(1, 'eth_chainId'), { headers: { 'content-type': 'text/plain' } });
    expect(r.status).toBe(415);
    expect(r.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
    const ok = await rpc(url, call(1, 'eth_chainId'), { headers: { 'content-type': 'application/json; charset=utf-8' } });
    expect(ok.status).toBe(200);
    expect(ok.body.result).toBe('0x7a69');
  });

  it('every response carries X-Request-Id (success, error, 204, 404, 405, 415, 401)', async () => {
    const responses = await Promise.all([
      rpc(url, call(1, 'eth_chainId')),
      rpc(url, call(1, 'foo')),
      rpc(url, notification('eth_chainId')),
      rpc(`${tg.gateway.rpcOrigin}/nope`, call(1, 'eth_chainId')),
      rpc(url, undefined, { method: 'GET' }),
      rpc(url, call(1, 'eth_chainId'), { headers: { 'content-type': 'text/plain' } }),
      rpc(tg.url('evm', 'tg_unknownunknownunknownunknown00'), call(1, 'eth_chainId')),
    ]);
    expect(responses.map((r) => r.status)).toEqual([200, 200, 204, 404, 405, 415, 401]);
    const ids = responses.map((r) => r.headers.get('x-request-id'));
    for (const id of ids) expect(id).toMatch(/^[A-Za-z0-9._:-]{1,128}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('a well-formed incoming X-Request-Id is kept', async () => {
    const r = await rpc(url, call(1, 'eth_chainId'), { headers: { 'x-request-id': 'trace-abc.123' } });
    expect(r.headers.get('x-request-id')).toBe('trace-abc.123');
  });

  /**
   * One request written byte for byte (header names exactly as given, repeats kept), as HTTP
   * clients other than Node's may send it; resolves with the status and the response headers.
   */
  function rawPost(target: string, headerLines: string[], body: string): Promise<{ status: number; headers: Map<string, string> }> {
    const { hostname, port, pathname } = new URL(target);
    return new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname, () => {
        socket.write(`POST ${pathname} HTTP/1.1\r\n${headerLines.map((line) => `${line}\r\n`).join('')}Connection: close\r\n\r\n${body}`);
      });
      let text = '';
      socket.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
      socket.once('error', reject);
      socket.once('end', () => {
        const [head = ''] = text.split('\r\n\r\n', 1);
        const [statusLine = '', ...lines] = head.split('\r\n');
        const headers = new Map(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
        resolve({ status: Number(statusLine.split(' ')[1]), headers });
      });
    });
  }

  it('reads header names in any case, and the first Content-Type when it is repeated', async () => {
    const body = JSON.stringify(call(1, 'eth_chainId'));
    const mixedCase = await rawPost(url, ['HOST: 127.0.0.1', 'Content-TYPE: application/json', `CONTENT-LENGTH: ${body.length}`, 'X-Request-ID: Mixed.Case-1'], body);
    expect(mixedCase.status).toBe(200);
    expect(mixedCase.headers.get('x-request-id')).toBe('Mixed.Case-1');
    const jsonFirst = await rawPost(url, ['Host: 127.0.0.1', 'Content-Type: application/json', 'Content-Type: text/plain', `Content-Length: ${body.length}`], body);
    expect(jsonFirst.status).toBe(200);
    const plainFirst = await rawPost(url, ['Host: 127.0.0.1', 'Content-Type: text/plain', 'Content-Type: application/json', `Content-Length: ${body.length}`], body);
    expect(plainFirst.status).toBe(415);
  });

  it('a client that leaves in the middle of its body is not answered, charged or forwarded, and is logged as 499', async () => {
    const body = JSON.stringify(call(1, 'eth_getBlockByHash', [freshHash(), false]));
    const before = await rpc(url, call(2, 'eth_chainId'));
    const remainingBefore = Number(before.headers.get('x-credits-remaining')) - 5; // after the next eth_chainId
    const callsBefore = upstream.calls.length;
    const { hostname, port, pathname } = new URL(url);
    const requestId = 'left-mid-body';
    const inFlight = async (): Promise<number> => {
      const text = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
      return Number(/^tollgate_requests_in_flight (\d+)$/m.exec(text)?.[1]);
    };
    const socket = connect(Number(port), hostname);
    const closed = new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.once('close', () => resolve());
    });
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    socket.write(`POST ${pathname} HTTP/1.1\r\nHost: ${hostname}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nX-Request-Id: ${requestId}\r\n\r\n`);
    socket.write(body.slice(0, 20));
    // The gateway has started on the request (its handler counts it in flight) and waits for the rest of the body.
    await until(async () => (await inFlight()) === 1, 'the request in flight at the gateway');
    socket.destroy();
    await closed;
    const logged = () => tg.logLines.map((line) => JSON.parse(line) as Record<string, unknown>).find((line) => line.requestId === requestId);
    await vi.waitFor(() => expect(logged()).toBeDefined(), { timeout: 5_000 });
    expect(logged()).toMatchObject({ msg: 'request', status: 499, credits: 0 });
    expect(tg.logLines.some((line) => line.includes('request failed unexpectedly'))).toBe(false);
    expect(upstream.calls.length).toBe(callsBefore);
    const after = await rpc(url, call(3, 'eth_chainId'));
    expect(after.status).toBe(200);
    expect(Number(after.headers.get('x-credits-remaining'))).toBe(remainingBefore);
    const metrics = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    expect(metrics).toMatch(/^tollgate_requests_total\{network="evm",method="none",outcome="client_closed",status="499"\} 1$/m);
  });

  it('a repeated X-Request-Id is not kept: the response gets an id of its own', async () => {
    const body = JSON.stringify(call(1, 'eth_chainId'));
    const r = await rawPost(url, ['Host: 127.0.0.1', 'Content-Type: application/json', `Content-Length: ${body.length}`, 'X-Request-Id: first', 'x-request-id: second'], body);
    expect(r.status).toBe(200);
    const id = r.headers.get('x-request-id');
    expect(id).toMatch(/^[A-Za-z0-9._:-]{1,128}$/);
    expect(['first', 'second', 'first, second']).not.toContain(id);
  });
});

describe('local answers', () => {
  it('eth_chainId → 0x7a69 and net_version → "31337" with no upstream call', async () => {
    const chainId = await rpc(url, call(1, 'eth_chainId', []));
    expect(chainId.body).toStrictEqual({ jsonrpc: '2.0', id: 1, result: '0x7a69' });
    const netVersion = await rpc(url, call(2, 'net_version'));
    expect(netVersion.body).toStrictEqual({ jsonrpc: '2.0', id: 2, result: '31337' });
    expect(upstream.calls).toHaveLength(0);
  });

  it('eth_getBlockByHash is forwarded with the hash in lower case, the gateway using its own id', async () => {
    const hash = freshHash();
    const upper = `0x${hash.slice(2).toUpperCase()}`;
    const r = await rpc(url, call('blk', 'eth_getBlockByHash', [upper, true]));
    expect(r.status).toBe(200);
    expect(r.body).toStrictEqual({ jsonrpc: '2.0', id: 'blk', result: { hash, number: '0x1', transactions: [] } });
    expect(upstream.calls).toHaveLength(1);
    const sent = upstream.calls[0]!.body as RpcItem;
    expect(sent).toMatchObject({ jsonrpc: '2.0', method: 'eth_getBlockByHash', params: [hash, true] });
    expect(typeof sent.id).toBe('number');
  });
});

describe('host-based routing', () => {
  async function viaHost(host: string, path: string, body: unknown) {
    const response = await request(`${tg.gateway.rpcOrigin}${path}`, {
      method: 'POST',
      headers: { host, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const text = await response.body.text();
    return { status: response.statusCode, headers: response.headers, body: text === '' ? undefined : JSON.parse(text) };
  }

  it('the Host header selects the network; the same path on another host is 404', async () => {
    const path = `/v3/${tg.apiKey}`;
    const hit = await viaHost('evm.test.local', path, call(1, 'eth_chainId'));
    expect(hit.status).toBe(200);
    expect(hit.body).toStrictEqual({ jsonrpc: '2.0', id: 1, result: '0x7a6a' });

    // Case-insensitive host, any port.
    const withPort = await viaHost('EVM.Test.Local:9999', path, call(2, 'net_version'));
    expect(withPort.body).toStrictEqual({ jsonrpc: '2.0', id: 2, result: '31338' });

    const miss = await viaHost('other.test.local', path, call(3, 'eth_chainId'));
    expect(miss.status).toBe(404);
    expect(miss.body).toMatchObject({ id: null, error: { code: -32600 } });
    expect(miss.headers['x-request-id']).toBeTruthy();

    // Forwarded calls go to the host network's upstream only.
    const hash = freshHash();
    const block = await viaHost('evm.test.local', path, call(4, 'eth_getBlockByHash', [hash, false]));
    expect(block.body.result.hash).toBe(hash);
    expect(hostUpstream.calls).toHaveLength(1);
    expect(upstream.calls).toHaveLength(0);
  });

  it('the body never selects the network: the prefixed network on the same host still answers 31337', async () => {
    const r = await viaHost('evm.test.local', `/evm/v3/${tg.apiKey}`, call(1, 'eth_chainId'));
    expect(r.status).toBe(200);
    expect(r.body.result).toBe('0x7a69');
  });
});
