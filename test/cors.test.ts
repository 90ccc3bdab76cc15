// CORS on RPC paths (docs/keys.md#cors): every status the gateway answers a page with carries
// Access-Control-Allow-Origin (the origin echoed), Vary: Origin and the exposed headers, so the
// page can read error bodies and credit headers; preflights are 204, allow the requested headers,
// carry the configured Max-Age and are never charged; only the origin rules apply to them; the
// gateway-wide list narrows who may call at all.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { utcDay } from '../src/metering/meter.js';
import { applySettingsPatch } from '../src/auth/key-settings.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const ORIGIN = 'http://page.example.test:5173';
const EXPOSED = 'X-Request-Id, X-Credits-Cost, X-Credits-Remaining, X-Cache, Retry-After';
const call = (method: string, params: unknown[] = [], id: unknown = 1) => ({ jsonrpc: '2.0', id, method, params });

let upstream: ScriptedUpstream;
let tg: TestGateway;
let narrow: TestGateway;
let broke: string;
let throttled: string;
let elsewhere: string;

async function keyOf(team: { dailyCredits: number; creditsPerSecond?: number }, settings?: Record<string, unknown>): Promise<string> {
  const created = await tg.store.createTeam({ name: `t-${Math.random().toString(36).slice(2)}`, ...team });
  const { key, secret } = await issueKey(tg.store, { teamId: created.id });
  if (settings !== undefined) await tg.store.updateKey(key.id, { settings: applySettingsPatch(null, settings) });
  return secret;
}

function expectCors(headers: Headers, origin = ORIGIN): void {
  expect(headers.get('access-control-allow-origin')).toBe(origin);
  expect(headers.get('vary')).toBe('Origin');
  expect(headers.get('access-control-expose-headers')).toBe(EXPOSED);
  expect(headers.get('access-control-allow-credentials')).toBeNull();
}

async function raw(url: string, init: RequestInit): Promise<{ status: number; headers: Headers; text: string }> {
  const response = await fetch(url, init);
  return { status: response.status, headers: response.headers, text: await response.text() };
}

beforeAll(async () => {
  upstream = await startScriptedUpstream((received) => {
    const method = received.methods[0];
    if (method === 'eth_fail') return { kind: 'status', status: 500 };
    if (method === 'eth_slow') return { kind: 'result', result: '0x1', delayMs: 1_000 };
    return { kind: 'result', result: '0x1' };
  });
  const network = (id: string, extra: Record<string, unknown> = {}) => ({
    id,
    kind: 'evm',
    chainId: 1,
    methods: { eth_fail: 80, eth_slow: 80, eth_blockNumber: 80 },
    upstreams: [{ id: 'u1', url: upstream.url, timeoutMs: 300 }],
    ...extra,
  });
  tg = await startTestGateway({
    networks: [network('eth', { requestTimeoutMs: 300 }), network('other'), network('brittle', { circuitBreaker: { failureThreshold: 1, cooldownMs: 60_000 } })],
    config: { server: { host: '127.0.0.1', port: 0, maxBodyBytes: 1024, cors: { maxAgeSeconds: 1234 } } },
  });
  narrow = await startTestGateway({
    networks: [network('eth')],
    store: tg.store,
    config: { server: { host: '127.0.0.1', port: 0, cors: { allowedOrigins: ['https://app.example.com', 'https://*.example.org'] } } },
  });
  broke = await keyOf({ dailyCredits: 0 });
  throttled = await keyOf({ dailyCredits: 1_000_000, creditsPerSecond: 1 });
  elsewhere = await keyOf({ dailyCredits: 1_000_000 }, { allowedOrigins: ['https://elsewhere.example.com'], allowedMethods: ['eth_chainId'] });
});

afterAll(async () => {
  await narrow?.close();
  await tg?.close();
  await upstream?.close();
});

describe('every status carries the CORS headers for an allowed origin', () => {
  const cases: Array<[string, number, () => Promise<{ status: number; headers: Headers; text: string }>]> = [
    ['a result', 200, () => raw(tg.url('eth'), post(call('eth_chainId')))],
    ['a batch', 200, () => raw(tg.url('eth'), post([call('eth_chainId'), call('eth_chainId', [], 2)]))],
    ['notifications only', 204, () => raw(tg.url('eth'), post({ jsonrpc: '2.0', method: 'eth_chainId' }))],
    ['missing key', 401, () => raw(`${tg.gateway.rpcOrigin}/eth/v3`, post(call('eth_chainId')))],
    ['unknown key', 401, () => raw(tg.url('eth', 'tg_unknownunknownunknownunknown00'), post(call('eth_chainId')))],
    ['daily credits exhausted', 402, () => raw(tg.url('eth', broke), post(call('eth_chainId')))],
    ['a key setting (method) refuses the call, readable by the origin the key allows', 403, () => raw(tg.url('eth', elsewhere), { ...post(call('eth_blockNumber')), headers: { ...JSON_HEADERS, origin: 'https://elsewhere.example.com' } })],
    ['unknown path', 404, () => raw(`${tg.gateway.rpcOrigin}/nowhere/v3/x`, post(call('eth_chainId')))],
    ['GET', 405, () => raw(tg.url('eth'), { method: 'GET', headers: { origin: ORIGIN } })],
    ['body too large', 413, () => raw(tg.url('eth'), post(call('eth_chainId', ['x'.repeat(2_000)])))],
    ['not JSON', 415, () => raw(tg.url('eth'), { method: 'POST', headers: { 'content-type': 'text/plain', origin: ORIGIN }, body: '{}' })],
    ['rate limited', 429, () => untilStatus(429, () => raw(tg.url('eth', throttled), post(call('eth_blockNumber'))))],
    ['every upstream failed', 502, () => raw(tg.url('eth'), post(call('eth_fail')))],
    ['every upstream timed out', 504, () => raw(tg.url('eth'), post(call('eth_slow')))],
  ];
  it.each(cases)('%s → %i', async (_name, status, send) => {
    const r = await send();
    expect(r.status, r.text).toBe(status);
    // The 403 case is readable by the origin its key allows; the others by any (the default `*`).
    expectCors(r.headers, status === 403 ? 'https://elsewhere.example.com' : ORIGIN);
    if (status !== 204) expect(JSON.stringify(JSON.parse(r.text))).toContain('"jsonrpc":"2.0"');
  });

  it('no healthy upstream → 503', async () => {
    await raw(tg.url('brittle'), post(call('eth_fail'))); // opens the circuit
    const r = await raw(tg.url('brittle'), post(call('eth_blockNumber')));
    expect(r.status).toBe(503);
    expectCors(r.headers);
  });

  it('no Origin, no CORS headers', async () => {
    const r = await rpc(tg.url('eth'), call('eth_chainId'));
    expect(r.status).toBe(200);
    expect(r.headers.get('access-control-allow-origin')).toBeNull();
    expect(r.headers.get('vary')).toBeNull();
  });

  it('a key whose origin list refuses the page: 403 without Access-Control-Allow-Origin (the browser blocks it)', async () => {
    const r = await raw(tg.url('eth', elsewhere), post(call('eth_chainId')));
    expect(r.status).toBe(403);
    expect(JSON.parse(r.text)).toStrictEqual({ jsonrpc: '2.0', id: null, error: { code: -32002, message: 'rejected due to key settings', data: { rule: 'origin' } } });
    expect(r.headers.get('access-control-allow-origin')).toBeNull();
  });
});

describe('preflights', () => {
  const preflight = (url: string, origin = ORIGIN, requestHeaders = 'authorization, content-type, infura-source') =>
    raw(url, { method: 'OPTIONS', headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': requestHeaders } });

  it('204 with the allowed methods, the requested headers and the configured Max-Age; never charged', async () => {
    const day = utcDay(Date.now());
    const before = await tg.store.usage({ teamId: tg.team.id, fromDay: day, toDay: day });
    for (let i = 0; i < 3; i += 1) {
      const r = await preflight(tg.url('eth'));
      expect(r.status).toBe(204);
      expect(r.text).toBe('');
      expectCors(r.headers);
      expect(r.headers.get('access-control-allow-methods')).toBe('POST, OPTIONS');
      expect(r.headers.get('access-control-allow-headers')).toBe('authorization, content-type, infura-source');
      expect(r.headers.get('access-control-max-age')).toBe('1234');
      expect(r.headers.get('x-credits-cost')).toBeNull();
    }
    expect(await tg.store.usage({ teamId: tg.team.id, fromDay: day, toDay: day })).toEqual(before);
  });

  it('answered for a key without credits, an unknown key and a missing key (their POST then gets a readable error)', async () => {
    for (const url of [tg.url('eth', broke), tg.url('eth', 'tg_unknownunknownunknownunknown00'), `${tg.gateway.rpcOrigin}/eth/v3`]) {
      const r = await preflight(url);
      expect(r.status, url).toBe(204);
      expectCors(r.headers);
    }
  });

  it('only the key origin rule applies: refused origin → 403 without CORS headers; allowed → 204', async () => {
    const refused = await preflight(tg.url('eth', elsewhere));
    expect(refused.status).toBe(403);
    expect(refused.headers.get('access-control-allow-origin')).toBeNull();
    const allowed = await preflight(tg.url('eth', elsewhere), 'https://elsewhere.example.com');
    expect(allowed.status).toBe(204);
    expectCors(allowed.headers, 'https://elsewhere.example.com');
  });

  it('a malformed Access-Control-Request-Headers list allows no headers', async () => {
    const r = await preflight(tg.url('eth'), ORIGIN, 'content-type, bad header');
    expect(r.status).toBe(204);
    expect(r.headers.get('access-control-allow-headers')).toBeNull();
  });

  it('OPTIONS without Origin is not a preflight: 405', async () => {
    const r = await raw(tg.url('eth'), { method: 'OPTIONS' });
    expect(r.status).toBe(405);
    expect(r.headers.get('allow')).toBe('POST');
  });
});

describe('server.cors.allowedOrigins narrows who may call', () => {
  it('listed origins and subdomain patterns are served; others get 403 origin without CORS headers, preflight included', async () => {
    const url = narrow.url('eth');
    for (const origin of ['https://app.example.com', 'https://x.example.org']) {
      const r = await raw(url, { ...post(call('eth_chainId')), headers: { ...JSON_HEADERS, origin } });
      expect(r.status).toBe(200);
      expectCors(r.headers, origin);
    }
    const refused = await raw(url, { ...post(call('eth_chainId')), headers: { ...JSON_HEADERS, origin: 'https://evil.example.com' } });
    expect(refused.status).toBe(403);
    expect(JSON.parse(refused.text).error.data).toStrictEqual({ rule: 'origin' });
    expect(refused.headers.get('access-control-allow-origin')).toBeNull();
    const preflight = await raw(url, { method: 'OPTIONS', headers: { origin: 'https://evil.example.com', 'access-control-request-method': 'POST' } });
    expect(preflight.status).toBe(403);
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
    // Server-side clients send no Origin and are not affected.
    expect((await rpc(url, call('eth_chainId'))).status).toBe(200);
  });
});

/** The first answer with this status among a few tries (a token bucket lets its burst through first). */
async function untilStatus<T extends { status: number }>(status: number, send: () => Promise<T>): Promise<T> {
  let last = await send();
  for (let i = 0; i < 20 && last.status !== status; i += 1) last = await send();
  return last;
}

const JSON_HEADERS = { 'content-type': 'application/json' };
function post(body: unknown): RequestInit {
  return { method: 'POST', headers: { ...JSON_HEADERS, origin: ORIGIN }, body: JSON.stringify(body) };
}
