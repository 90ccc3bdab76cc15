// JWTs of browser keys (docs/keys.md): RS256 (PEM) and ES256 (JWK) public keys
// registered on a key, `Authorization: Bearer`, each failure's exact `data.reason`, claims
// narrowing the key's lists, and the verified-token cache (a hit answers synchronously, with no
// signature check, until the token's exp on the injected clock).

import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { compileKeyPolicy, createJwtCache } from '../src/auth/key-policy.js';
import { applySettingsPatch } from '../src/auth/key-settings.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const call = (method: string, params: unknown[] = [], id: unknown = 1) => ({ jsonrpc: '2.0', id, method, params });
const TOKEN_ADDRESS = `0x${'a'.repeat(40)}`;
const OTHER_ADDRESS = `0x${'b'.repeat(40)}`;
const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 });
const AUDIENCE = 'https://rpc.example.com';

let clockMs = Date.UTC(2030, 0, 1, 12, 0, 0);
const now = () => clockMs;
const nowSeconds = () => Math.floor(clockMs / 1000);

let upstream: ScriptedUpstream;
let tg: TestGateway;
let url: string;
let optionalUrl: string;

async function sign(key: KeyObject, alg: 'RS256' | 'ES256', options: { kid?: string | null; claims?: Record<string, unknown>; exp?: number | null; aud?: string | null; nbf?: number } = {}): Promise<string> {
  const header: { alg: string; kid?: string } = { alg };
  if (options.kid !== null) header.kid = options.kid ?? (alg === 'RS256' ? 'rsa-1' : 'ec-1');
  let jwt = new SignJWT(options.claims ?? {}).setProtectedHeader(header).setIssuedAt(nowSeconds());
  if (options.exp !== null) jwt = jwt.setExpirationTime(options.exp ?? nowSeconds() + 600);
  if (options.aud !== null) jwt = jwt.setAudience(options.aud ?? AUDIENCE);
  if (options.nbf !== undefined) jwt = jwt.setNotBefore(options.nbf);
  return jwt.sign(key);
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const invalidJwt = (reason: string) => ({ jsonrpc: '2.0', id: null, error: { code: -32016, message: 'invalid JWT', data: { reason } } });

const SETTINGS = {
  requireJwt: true,
  jwtAudience: AUDIENCE,
  jwtKeys: [
    { id: 'rsa-1', pem: rsa.publicKey.export({ type: 'spki', format: 'pem' }) as string },
    { id: 'ec-1', jwk: ec.publicKey.export({ format: 'jwk' }) as Record<string, unknown> },
  ],
};

beforeAll(async () => {
  upstream = await startScriptedUpstream({ kind: 'result', result: '0x1' });
  tg = await startTestGateway({
    now,
    networks: [{ id: 'eth', kind: 'evm', chainId: 1, methods: { eth_getBalance: 80, eth_blockNumber: 80 }, upstreams: [{ id: 'u1', url: upstream.url }] }],
  });
  const required = await issueKey(tg.store, { teamId: tg.team.id });
  await tg.store.updateKey(required.key.id, { settings: applySettingsPatch(null, SETTINGS) });
  url = tg.url('eth', required.secret);
  const optional = await issueKey(tg.store, { teamId: tg.team.id });
  await tg.store.updateKey(optional.key.id, { settings: applySettingsPatch(null, { ...SETTINGS, requireJwt: false, allowedMethods: ['eth_getBalance'] }) });
  optionalUrl = tg.url('eth', optional.secret);
});

afterAll(async () => {
  await tg?.close();
  await upstream?.close();
});

describe('verification', () => {
  it('an RS256 token (PEM key) and an ES256 token (JWK key) are accepted', async () => {
    for (const token of [await sign(rsa.privateKey, 'RS256'), await sign(ec.privateKey, 'ES256')]) {
      const r = await rpc(url, call('eth_blockNumber'), { headers: bearer(token) });
      expect(r.status).toBe(200);
      expect(r.body.result).toBe('0x1');
    }
  });

  it.each<[string, () => Promise<Record<string, string>>]>([
    ['missing', async () => ({})],
    ['malformed', async () => bearer('not.a.jwt')],
    ['malformed', async () => ({ authorization: 'Bearer' })],
    ['malformed', async () => bearer(await sign(rsa.privateKey, 'RS256', { exp: null }))], // exp is required
    ['malformed', async () => bearer(await sign(rsa.privateKey, 'RS256', { claims: { methods: 'eth_call' } }))], // a claim of the wrong type
    ['bad_signature', async () => bearer(await sign(stranger.privateKey, 'RS256'))],
    ['unknown_kid', async () => bearer(await sign(rsa.privateKey, 'RS256', { kid: 'rsa-9' }))],
    ['unknown_kid', async () => bearer(await sign(rsa.privateKey, 'RS256', { kid: null }))], // two keys: the kid is needed
    ['expired', async () => bearer(await sign(rsa.privateKey, 'RS256', { exp: nowSeconds() - 60 }))],
    ['not_yet_valid', async () => bearer(await sign(rsa.privateKey, 'RS256', { nbf: nowSeconds() + 600 }))],
    ['wrong_audience', async () => bearer(await sign(rsa.privateKey, 'RS256', { aud: 'https://other.example.com' }))],
    ['wrong_audience', async () => bearer(await sign(rsa.privateKey, 'RS256', { aud: null }))],
  ])('%s → 401 -32016 invalid JWT with that reason', async (reason, headers) => {
    const r = await rpc(url, call('eth_blockNumber'), { headers: await headers() });
    expect(r.status).toBe(401);
    expect(r.body).toStrictEqual(invalidJwt(reason));
  });

  it('a key that does not require a JWT: none is fine, a bad one is refused, a good one narrows', async () => {
    expect((await rpc(optionalUrl, call('eth_getBalance', [TOKEN_ADDRESS, 'latest']))).status).toBe(200);
    expect((await rpc(optionalUrl, call('eth_getBalance', [TOKEN_ADDRESS, 'latest']), { headers: bearer('x.y.z') })).body).toStrictEqual(invalidJwt('malformed'));
    const token = await sign(ec.privateKey, 'ES256', { claims: { addresses: [OTHER_ADDRESS] } });
    const narrowed = await rpc(optionalUrl, call('eth_getBalance', [TOKEN_ADDRESS, 'latest']), { headers: bearer(token) });
    expect(narrowed.body.error.data).toStrictEqual({ rule: 'address' });
  });
});

describe('claims narrow the key lists', () => {
  it('methods, addresses and origins claims', async () => {
    const token = await sign(rsa.privateKey, 'RS256', { claims: { methods: ['eth_getBalance'], addresses: [TOKEN_ADDRESS], origins: ['https://app.example.com'] } });
    const headers = { ...bearer(token), origin: 'https://app.example.com' };
    expect((await rpc(url, call('eth_getBalance', [TOKEN_ADDRESS, 'latest']), { headers })).status).toBe(200);
    expect((await rpc(url, call('eth_blockNumber'), { headers })).body.error.data).toStrictEqual({ rule: 'method' });
    expect((await rpc(url, call('eth_getBalance', [OTHER_ADDRESS, 'latest']), { headers })).body.error.data).toStrictEqual({ rule: 'address' });
    const elsewhere = await rpc(url, call('eth_getBalance', [TOKEN_ADDRESS, 'latest']), { headers: { ...bearer(token), origin: 'https://evil.example.com' } });
    expect(elsewhere.status).toBe(403);
    expect(elsewhere.body.error.data).toStrictEqual({ rule: 'origin' });
    expect((await rpc(url, call('eth_getBalance', [TOKEN_ADDRESS, 'latest']), { headers: bearer(token) })).body.error.data).toStrictEqual({ rule: 'origin' });
  });

  it('a claim narrows, never widens: the key method list still applies', async () => {
    const token = await sign(rsa.privateKey, 'RS256', { claims: { methods: ['eth_blockNumber', 'eth_getBalance'] } });
    expect((await rpc(optionalUrl, call('eth_blockNumber'), { headers: bearer(token) })).body.error.data).toStrictEqual({ rule: 'method' });
  });
});

describe('the verified-token cache', () => {
  it('a token seen before is admitted synchronously (no signature check) until its exp, then expired', async () => {
    const policy = compileKeyPolicy(applySettingsPatch(null, SETTINGS), null, { jwtCache: createJwtCache(100), now })!;
    const token = await sign(rsa.privateKey, 'RS256', { exp: nowSeconds() + 60 });
    const facts = { origin: undefined, userAgent: undefined, authorization: `Bearer ${token}`, clientAddress: () => undefined };
    const first = policy.admit(facts);
    expect(first).toBeInstanceOf(Promise);
    await first;
    const second = policy.admit(facts);
    expect(second).not.toBeInstanceOf(Promise);
    expect(second).toMatchObject({ secret: false });
    clockMs += 61_000;
    expect(() => policy.admit(facts)).toThrow(expect.objectContaining({ code: 'TG_ERR_INVALID_JWT', data: { reason: 'expired' } }));
    // Another key's policy does not take this key's verified token.
    const other = compileKeyPolicy(applySettingsPatch(null, SETTINGS), null, { jwtCache: createJwtCache(100), now })!;
    expect(other.admit({ ...facts, authorization: `Bearer ${await sign(rsa.privateKey, 'RS256')}` })).toBeInstanceOf(Promise);
  });

  it('over the wire: the same token keeps working until exp on the injected clock, then 401 expired', async () => {
    const token = await sign(ec.privateKey, 'ES256', { exp: nowSeconds() + 30 });
    for (let i = 0; i < 3; i += 1) expect((await rpc(url, call('eth_blockNumber'), { headers: bearer(token) })).status).toBe(200);
    clockMs += 31_000;
    expect((await rpc(url, call('eth_blockNumber'), { headers: bearer(token) })).body).toStrictEqual(invalidJwt('expired'));
  });
});
