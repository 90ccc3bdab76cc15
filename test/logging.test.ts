// Request logs (docs/security.md): one JSON line per request with the fields an operator
// searches by, and no secret anywhere — not the API key from the path (however the path is
// mangled), not the credentials, query key or header of an upstream URL, not even on error
// paths where an upstream refuses the connection or answers 500 with the secret in its body.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { refusedUrl, startScriptedUpstream, type RpcItem, type ScriptedUpstream } from './helpers/scripted-upstream.js';

// The scripted upstreams in this file answer made-up blocks (only their hash is right), so block
// verification is off on its EVM networks: verification has its own suites (block-verification,
// right-answers), and this file tests something else.

const URL_USER = 'svc-user';
const URL_PASSWORD = 's3cretpass';
const QUERY_SECRET = 'qk_7f9a2c4e8b1d3f5a7c9e0b2d4f6a8c1e';
const HEADER_SECRET = 'hdr_5e7a9c1b3d5f7e9a1c3b5d7f9e1a3c5b';
const BASIC = Buffer.from(`${URL_USER}:${URL_PASSWORD}`).toString('base64');
const HASH = `0x${'4d'.repeat(32)}`;
/** Looks like a Tollgate key but was never issued. */
const UNKNOWN_KEY = 'tg_zzUnknownKeyZZ0123456789abcdefABCDEF';

function withSecrets(origin: string, path = '/'): string {
  const url = new URL(origin);
  return `http://${URL_USER}:${URL_PASSWORD}@${url.host}${path}?api-key=${QUERY_SECRET}`;
}

type LogLine = Record<string, unknown> & { msg: string };

describe('request log lines', () => {
  let tg: TestGateway;
  let broken: ScriptedUpstream;
  let good: ScriptedUpstream;
  let brokenDown: ScriptedUpstream;
  let secrets: string[];

  beforeAll(async () => {
    // A 500 whose body quotes the upstream's secrets, as some providers' error pages do.
    const leakyError = { kind: 'status' as const, status: 500, body: `invalid api-key ${QUERY_SECRET} for ${URL_USER}:${URL_PASSWORD} (${HEADER_SECRET})` };
    broken = await startScriptedUpstream(leakyError);
    brokenDown = await startScriptedUpstream(leakyError);
    good = await startScriptedUpstream({
      kind: 'result',
      result: (item: unknown) => ({ hash: ((item as RpcItem).params as string[])[0], number: '0x1', transactions: [] }),
    });
    const refused = await refusedUrl();
    const headers = { 'x-provider-token': HEADER_SECRET };
    tg = await startTestGateway({
      networks: [
        {
          id: 'evm',
          kind: 'evm',
          verification: 'off',
          chainId: 1,
          upstreams: [
            { id: 'refused', url: withSecrets(refused), headers },
            { id: 'broken', url: withSecrets(broken.url, '/rpc'), headers },
            { id: 'good', url: withSecrets(good.url), headers },
          ],
        },
        {
          id: 'down',
          kind: 'evm',
          verification: 'off',
          chainId: 1,
          upstreams: [
            { id: 'refused', url: withSecrets(refused), headers },
            { id: 'broken', url: withSecrets(brokenDown.url), headers },
          ],
        },
      ],
    });
    secrets = [tg.apiKey, tg.apiKey.slice(3), UNKNOWN_KEY, UNKNOWN_KEY.slice(3), URL_PASSWORD, QUERY_SECRET, HEADER_SECRET, BASIC, TEST_ADMIN_TOKEN];
  });

  afterAll(async () => {
    await tg?.close();
    await Promise.all([broken?.close(), good?.close(), brokenDown?.close()]);
  });

  const parsed = (): LogLine[] => tg.logLines.map((line) => JSON.parse(line) as LogLine);
  const requestLine = (requestId: string | null): LogLine => {
    expect(requestId).toBeTruthy();
    const lines = parsed().filter((line) => line.msg === 'request' && line.requestId === requestId);
    expect(lines, `one log line for request ${requestId}`).toHaveLength(1);
    return lines[0]!;
  };

  it('logs a request that failed over past a refused and a 500 upstream, without their secrets', async () => {
    const response = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [HASH, false] });
    expect(response.status).toBe(200);
    expect(response.body.result.hash).toBe(HASH);
    // The secrets were really in use: the upstreams received them.
    const received = good.calls.at(-1)!;
    expect(received.path).toBe(`/?api-key=${QUERY_SECRET}`);
    expect(received.headers.authorization).toBe(`Basic ${BASIC}`);
    expect(received.headers['x-provider-token']).toBe(HEADER_SECRET);
    expect(broken.calls).toHaveLength(1);

    const line = requestLine(response.headers.get('x-request-id'));
    expect(line).toMatchObject({
      level: 'info',
      network: 'evm',
      teamId: tg.team.id,
      keyId: tg.keyId,
      methods: ['eth_getBlockByHash'],
      status: 200,
      credits: 80,
      cache: 'miss',
      upstream: 'good',
      attempts: [
        { upstream: 'refused', reason: 'connection_refused' },
        { upstream: 'broken', reason: 'http_500' },
      ],
      path: '/evm/v3/[redacted]',
    });
    expect(typeof line.durationMs).toBe('number');
  });

  it('logs a request every upstream failed (502) with its attempts and no secret', async () => {
    const response = await rpc(tg.url('down'), { jsonrpc: '2.0', id: 2, method: 'eth_getBlockByHash', params: [HASH, true] });
    expect(response.status).toBe(502);
    const line = requestLine(response.headers.get('x-request-id'));
    expect(line).toMatchObject({
      network: 'down',
      teamId: tg.team.id,
      keyId: tg.keyId,
      status: 502,
      credits: 0,
      error: 'TG_ERR_UPSTREAMS_FAILED',
      attempts: [
        { upstream: 'refused', reason: 'connection_refused' },
        { upstream: 'broken', reason: 'http_500' },
      ],
    });
    expect(line.upstream).toBeUndefined();
  });

  it('uses the X-Request-Id it answers with, and honours a well-formed incoming one', async () => {
    const generated = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 3, method: 'eth_chainId' });
    const generatedId = generated.headers.get('x-request-id')!;
    // A random per-process prefix and a counter: unique per request, and across processes.
    expect(generatedId).toMatch(/^[0-9a-f]{12}-[0-9a-z]+$/);
    expect(requestLine(generatedId)).toMatchObject({ methods: ['eth_chainId'], status: 200, credits: 5 });
    const next = (await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 5, method: 'eth_chainId' })).headers.get('x-request-id')!;
    expect(next).not.toBe(generatedId);
    expect(next.split('-')[0]).toBe(generatedId.split('-')[0]);

    const incoming = 'client-trace.42:abc_DEF-9';
    const honoured = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 4, method: 'eth_chainId' }, { headers: { 'x-request-id': incoming } });
    expect(honoured.headers.get('x-request-id')).toBe(incoming);
    expect(requestLine(incoming)).toMatchObject({ requestId: incoming, network: 'evm', status: 200 });

    // A header that could forge log content (spaces, quotes, overly long) is replaced.
    for (const forged of ['two words', 'x"}{"status":200', 'a'.repeat(129)]) {
      const replaced = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 5, method: 'eth_chainId' }, { headers: { 'x-request-id': forged } });
      const id = replaced.headers.get('x-request-id')!;
      expect(id).not.toBe(forged);
      expect(id).toMatch(/^[0-9a-f]{12}-[0-9a-z]+$/);
      requestLine(id);
    }
  });

  it('redacts the key from every kind of path a client may send it in', async () => {
    const origin = tg.gateway.rpcOrigin;
    const body = { jsonrpc: '2.0', id: 6, method: 'eth_chainId' };
    const escapedKey = tg.apiKey.replace('tg_', 'tg%5F');
    // From one case to the next (the last three aside) the URL changes and so does its logged
    // path: a path kept from the previous request's URL would show.
    const cases: Array<{ path: string; status: number; logged: string; init?: Parameters<typeof rpc>[2] }> = [
      { path: `/evm/v3/${UNKNOWN_KEY}`, status: 401, logged: '/evm/v3/[redacted]' },
      { path: `/evm/v2/${tg.apiKey}`, status: 404, logged: '/evm/[redacted]' },
      { path: `/no-such-network/v3/${tg.apiKey}`, status: 404, logged: '/[redacted]' },
      { path: `/evm/${tg.apiKey}`, status: 404, logged: '/evm/[redacted]' },
      { path: `/evm/v3/${tg.apiKey}?key=${tg.apiKey}`, status: 200, logged: '/evm/v3/[redacted]?[redacted]' },
      { path: `/evm/v2/${escapedKey}`, status: 404, logged: '/evm/[redacted]' },
      { path: `/evm/v3/${tg.apiKey}/extra`, status: 404, logged: '/evm/v3/[redacted]' },
      { path: `/evm/v3/${tg.apiKey}`, status: 405, logged: '/evm/v3/[redacted]', init: { method: 'GET' } },
      { path: `/evm/v3/${tg.apiKey}`, status: 415, logged: '/evm/v3/[redacted]', init: { headers: { 'content-type': 'text/plain' } } },
      { path: `/evm/v3/${tg.apiKey}`, status: 200, logged: '/evm/v3/[redacted]', init: { rawBody: '{"jsonrpc": "2.0", "id": 1, "method": ' } },
    ];
    for (const { path, status, logged, init } of cases) {
      const response = await rpc(`${origin}${path}`, body, init);
      expect(response.status, path).toBe(status);
      const line = requestLine(response.headers.get('x-request-id'));
      expect(line.status, path).toBe(status);
      expect(typeof line.durationMs, path).toBe('number');
      expect(line.path, path).toBe(logged);
    }
    const parseError = parsed().at(-1)!;
    expect(parseError).toMatchObject({ network: 'evm', teamId: tg.team.id, keyId: tg.keyId, error: 'TG_ERR_PARSE', credits: 0 });
  });

  it('gives every authenticated request line its requestId, network, teamId, keyId, methods, status, credits and durationMs', () => {
    const lines = parsed().filter((line) => line.msg === 'request');
    expect(lines.length).toBeGreaterThanOrEqual(15);
    for (const line of lines) {
      expect(typeof line.requestId, JSON.stringify(line)).toBe('string');
      expect(typeof line.status, JSON.stringify(line)).toBe('number');
      expect(typeof line.durationMs, JSON.stringify(line)).toBe('number');
      expect(line.level).toBe('info');
      expect(typeof line.time).toBe('string');
    }
    const authenticated = lines.filter((line) => line.keyId !== undefined);
    expect(authenticated.length).toBeGreaterThanOrEqual(8);
    for (const line of authenticated) {
      expect(line, JSON.stringify(line)).toMatchObject({
        requestId: expect.any(String),
        network: expect.any(String),
        teamId: tg.team.id,
        keyId: tg.keyId,
        methods: expect.any(Array),
        status: expect.any(Number),
        credits: expect.any(Number),
        durationMs: expect.any(Number),
      });
    }
  });

  it('contains no secret in any captured line', () => {
    expect(tg.logLines.length).toBeGreaterThan(0);
    for (const line of tg.logLines) {
      for (const secret of secrets) expect(line, `a log line contains "${secret}"`).not.toContain(secret);
      expect(line).not.toContain(`${URL_USER}:`);
      expect(line).not.toMatch(/tg%5F/i);
    }
  });
});
