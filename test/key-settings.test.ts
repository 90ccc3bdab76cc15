// Key settings over the wire (docs/keys.md): every allowlist rule type alone and
// combined (types ANDed, entries ORed), the exact rejection status and body, batches (method and
// address rules per item, origin/user agent/IP for the whole request), nothing charged for a
// rejection, the metric by rule type, the key secret (missing, wrong, and overriding the
// allowlists), X-Forwarded-For believed only from trusted proxies, the admin API's validation
// naming the field, a change reaching another replica within the key cache TTL, and the CLI.

import { execFile } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileIpRanges } from '../src/auth/key-settings.js';
import { openStore } from '../src/store/index.js';
import { utcDay } from '../src/metering/meter.js';
import { CLI, ensureBuilt } from './helpers/build.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const run = promisify(execFile);
const call = (method: string, params: unknown[] = [], id: unknown = 1) => ({ jsonrpc: '2.0', id, method, params });
const TOKEN = `0x${'a'.repeat(40)}`;
const OTHER = `0x${'b'.repeat(40)}`;
const THIRD = `0x${'c'.repeat(40)}`;
const BALANCE = call('eth_getBalance', [TOKEN, 'latest']);
const REJECTED = (rule: string, id: unknown = null) => ({ jsonrpc: '2.0', id, error: { code: -32002, message: 'rejected due to key settings', data: { rule } } });
const basic = (secret: string) => `Basic ${Buffer.from(`:${secret}`).toString('base64')}`;

let upstream: ScriptedUpstream;
let tg: TestGateway;
/** The same store behind a gateway that trusts 127.0.0.1 as a proxy. */
let proxied: TestGateway;
/** The key cache TTL of both gateways. */
const KEY_CACHE_TTL_MS = 200;
/** `proxied`'s clock (its key cache TTL among others): it stands still unless a test moves it. */
let proxiedClock = Date.now();

async function admin(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${tg.gateway.adminOrigin}${path}`, {
    method,
    headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

/** A new key of the test team with these settings; its secret (and key secret, if one was issued). */
async function keyWith(settings: Record<string, unknown>): Promise<{ id: string; secret: string; keySecret?: string }> {
  const created = await admin('POST', `/v1/teams/${tg.team.id}/keys`, { settings });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  return { id: created.body.key.id, secret: created.body.secret, keySecret: created.body.keySecret };
}

async function creditsUsedToday(): Promise<number> {
  const rows = await tg.store.usage({ teamId: tg.team.id, fromDay: utcDay(Date.now()), toDay: utcDay(Date.now()) });
  return rows.reduce((sum, row) => sum + row.credits, 0);
}

async function metricValue(name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name}{${labels}}`));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

beforeAll(async () => {
  upstream = await startScriptedUpstream({ kind: 'result', result: '0x1' });
  const networks = [
    {
      id: 'eth',
      kind: 'evm',
      chainId: 1,
      methods: { eth_call: 80, eth_getLogs: 255, eth_getBalance: 80, eth_getCode: 80, eth_getStorageAt: 80, eth_getTransactionCount: 80, eth_estimateGas: 300, eth_blockNumber: 80 },
      upstreams: [{ id: 'u1', url: upstream.url }],
    },
  ];
  tg = await startTestGateway({ networks, config: { auth: { keyCacheTtlMs: KEY_CACHE_TTL_MS } } });
  proxied = await startTestGateway({
    networks,
    store: tg.store,
    config: { server: { host: '127.0.0.1', port: 0, trustedProxies: ['127.0.0.1', '10.0.0.0/8'] }, auth: { keyCacheTtlMs: KEY_CACHE_TTL_MS } },
    now: () => proxiedClock,
  });
});

afterAll(async () => {
  await proxied?.close();
  await tg?.close();
  await upstream?.close();
});

describe('one rule type at a time', () => {
  it('origins: exact, scheme-optional and wildcard entries; a request without Origin is refused', async () => {
    const key = await keyWith({ allowedOrigins: ['https://app.example.com', 'dapp.example.org', 'https://*.example.net'] });
    const url = tg.url('eth', key.secret);
    const with_ = (origin?: string) => rpc(url, BALANCE, { headers: origin === undefined ? {} : { origin } });
    for (const allowed of ['https://app.example.com', 'http://dapp.example.org', 'https://dapp.example.org', 'https://a.example.net', 'https://a.b.example.net', 'HTTPS://APP.EXAMPLE.COM']) {
      const r = await with_(allowed);
      expect(r.status, allowed).toBe(200);
      expect(r.body.result).toBe('0x1');
    }
    for (const refused of ['http://app.example.com', 'https://app.example.com:8443', 'https://example.net', 'http://a.example.net', 'https://evil-example.net', 'null', undefined]) {
      const r = await with_(refused);
      expect(r.status, String(refused)).toBe(403);
      expect(r.body).toStrictEqual(REJECTED('origin'));
      expect(r.headers.get('access-control-allow-origin')).toBeNull();
    }
  });

  it('user agents: a case-insensitive substring; none sent is refused', async () => {
    const key = await keyWith({ allowedUserAgents: ['MyDapp/', 'curl'] });
    const url = tg.url('eth', key.secret);
    expect((await rpc(url, BALANCE, { headers: { 'user-agent': 'Mozilla/5.0 mydapp/2.1' } })).status).toBe(200);
    expect((await rpc(url, BALANCE, { headers: { 'user-agent': 'curl/8.1' } })).status).toBe(200);
    const refused = await rpc(url, BALANCE, { headers: { 'user-agent': 'python-requests/2.31' } });
    expect(refused.status).toBe(403);
    expect(refused.body).toStrictEqual(REJECTED('user_agent'));
  });

  it('IP ranges: IPv4 and IPv6 CIDR against the connection address', async () => {
    const inside = await keyWith({ allowedIps: ['10.0.0.0/8', '127.0.0.0/8'] });
    expect((await rpc(tg.url('eth', inside.secret), BALANCE)).status).toBe(200);
    const outside = await keyWith({ allowedIps: ['10.0.0.0/8', '2001:db8::/32'] });
    const refused = await rpc(tg.url('eth', outside.secret), BALANCE);
    expect(refused.status).toBe(403);
    expect(refused.body).toStrictEqual(REJECTED('ip'));
    const v6 = await keyWith({ allowedIps: ['::1/128', '2001:db8::/32'] });
    expect((await rpc(tg.url('eth', v6.secret), BALANCE)).status).toBe(403);
    // The matcher itself (node:net BlockList), for addresses a loopback test cannot come from.
    const ranges = compileIpRanges(['2001:db8::/32', '192.0.2.0/24', '::1']);
    expect(['2001:db8::1', '2001:DB8:ffff::', '192.0.2.255', '::ffff:192.0.2.9', '::1'].map(ranges)).toStrictEqual([true, true, true, true, true]);
    expect(['2001:db9::1', '192.0.3.1', '::2', 'garbage', ''].map(ranges)).toStrictEqual([false, false, false, false, false]);
  });

  it('X-Forwarded-For is believed only from server.trustedProxies', async () => {
    const key = await keyWith({ allowedIps: ['203.0.113.0/24'] });
    // Not a trusted proxy: the header is ignored, the connection (127.0.0.1) is the client.
    expect((await rpc(tg.url('eth', key.secret), BALANCE, { headers: { 'x-forwarded-for': '203.0.113.7' } })).status).toBe(403);
    // Through the gateway that trusts 127.0.0.1 and 10/8: walked right to left past the proxies.
    expect((await rpc(proxied.url('eth', key.secret), BALANCE, { headers: { 'x-forwarded-for': '203.0.113.7' } })).status).toBe(200);
    expect((await rpc(proxied.url('eth', key.secret), BALANCE, { headers: { 'x-forwarded-for': '203.0.113.7, 10.1.2.3' } })).status).toBe(200);
    // A client cannot prepend its way in: the first untrusted hop from the right is the client.
    const spoofed = await rpc(proxied.url('eth', key.secret), BALANCE, { headers: { 'x-forwarded-for': '203.0.113.7, 198.51.100.1' } });
    expect(spoofed.status).toBe(403);
    expect(spoofed.body).toStrictEqual(REJECTED('ip'));
  });

  it('methods: exact names and prefix_*; the refused call keeps its id', async () => {
    const key = await keyWith({ allowedMethods: ['eth_getBalance', 'net_*'] });
    const url = tg.url('eth', key.secret);
    expect((await rpc(url, BALANCE)).status).toBe(200);
    expect((await rpc(url, call('net_version'))).status).toBe(200);
    const refused = await rpc(url, call('eth_blockNumber', [], 'abc'));
    expect(refused.status).toBe(403);
    expect(refused.body).toStrictEqual(REJECTED('method', 'abc'));
  });

  it('contract addresses: every address-taking method, eth_getLogs address arrays, calls without an address', async () => {
    const key = await keyWith({ allowedAddresses: [TOKEN.toUpperCase().replace('0X', '0x'), OTHER] });
    const url = tg.url('eth', key.secret);
    const allowed = [
      call('eth_call', [{ to: TOKEN, data: '0x' }, 'latest']),
      call('eth_estimateGas', [{ to: OTHER.toUpperCase().replace('0X', '0x') }]),
      call('eth_getLogs', [{ address: TOKEN, fromBlock: '0x1' }]),
      call('eth_getLogs', [{ address: [TOKEN, OTHER] }]),
      call('eth_getBalance', [TOKEN, 'latest']),
      call('eth_getCode', [OTHER, 'latest']),
      call('eth_getStorageAt', [TOKEN, '0x0', 'latest']),
      call('eth_getTransactionCount', [OTHER, 'latest']),
      call('eth_blockNumber'), // takes no address: the rule does not apply
    ];
    for (const body of allowed) expect((await rpc(url, body)).status, JSON.stringify(body)).toBe(200);
    const refused = [
      call('eth_call', [{ to: THIRD, data: '0x' }, 'latest']),
      call('eth_call', [{ data: '0x6000' }, 'latest']), // a contract creation has no `to`
      call('eth_estimateGas', [{ to: THIRD }]),
      call('eth_getLogs', [{ address: [TOKEN, THIRD] }]),
      call('eth_getLogs', [{ fromBlock: '0x1' }]), // every contract's logs
      call('eth_getBalance', [THIRD, 'latest']),
      call('eth_getCode', [THIRD, 'latest']),
      call('eth_getStorageAt', [THIRD, '0x0', 'latest']),
      call('eth_getTransactionCount', [THIRD, 'latest']),
    ];
    for (const body of refused) {
      const r = await rpc(url, body);
      expect(r.status, JSON.stringify(body)).toBe(403);
      expect(r.body).toStrictEqual(REJECTED('address', 1));
    }
  });
});

describe('rules combined', () => {
  it('types are ANDed, entries ORed', async () => {
    const key = await keyWith({ allowedOrigins: ['https://app.example.com', 'https://admin.example.com'], allowedMethods: ['eth_getBalance', 'eth_call'], allowedAddresses: [TOKEN] });
    const url = tg.url('eth', key.secret);
    const origin = { origin: 'https://admin.example.com' };
    expect((await rpc(url, BALANCE, { headers: origin })).status).toBe(200);
    expect((await rpc(url, BALANCE, { headers: { origin: 'https://other.example.com' } })).body).toStrictEqual(REJECTED('origin'));
    expect((await rpc(url, call('eth_blockNumber'), { headers: origin })).body).toStrictEqual(REJECTED('method', 1));
    expect((await rpc(url, call('eth_getBalance', [OTHER, 'latest']), { headers: origin })).body).toStrictEqual(REJECTED('address', 1));
  });

  it('in a batch, method and address rules refuse items (HTTP 200); origin refuses the whole request', async () => {
    const key = await keyWith({ allowedOrigins: ['https://app.example.com'], allowedMethods: ['eth_getBalance'], allowedAddresses: [TOKEN] });
    const url = tg.url('eth', key.secret);
    const before = await creditsUsedToday();
    const batch = [call('eth_getBalance', [TOKEN, 'latest'], 1), call('eth_blockNumber', [], 2), call('eth_getBalance', [OTHER, 'latest'], 3)];
    const r = await rpc(url, batch, { headers: { origin: 'https://app.example.com' } });
    expect(r.status).toBe(200);
    expect(r.body).toStrictEqual([{ jsonrpc: '2.0', id: 1, result: '0x1' }, REJECTED('method', 2), REJECTED('address', 3)]);
    expect(r.headers.get('x-credits-cost')).toBe('80');
    expect(await creditsUsedToday()).toBe(before + 80);
    const whole = await rpc(url, batch, { headers: { origin: 'https://elsewhere.example.com' } });
    expect(whole.status).toBe(403);
    expect(whole.body).toStrictEqual(REJECTED('origin'));
  });

  it('rejections cost nothing, carry the credit headers, and are counted by rule type', async () => {
    const key = await keyWith({ allowedMethods: ['eth_getBalance'], allowedUserAgents: ['dapp'] });
    const url = tg.url('eth', key.secret);
    const before = await creditsUsedToday();
    const methodBefore = await metricValue('tollgate_key_settings_rejections_total', 'network="eth",rule="method"');
    const agentBefore = await metricValue('tollgate_key_settings_rejections_total', 'network="eth",rule="user_agent"');
    const r = await rpc(url, call('eth_blockNumber'), { headers: { 'user-agent': 'dapp/1' } });
    expect(r.status).toBe(403);
    expect(r.headers.get('x-credits-cost')).toBe('0');
    expect(Number(r.headers.get('x-credits-remaining'))).toBeGreaterThan(0);
    await rpc(url, BALANCE, { headers: { 'user-agent': 'bot' } });
    expect(await creditsUsedToday()).toBe(before);
    expect(await metricValue('tollgate_key_settings_rejections_total', 'network="eth",rule="method"')).toBe(methodBefore + 1);
    expect(await metricValue('tollgate_key_settings_rejections_total', 'network="eth",rule="user_agent"')).toBe(agentBefore + 1);
  });
});

describe('the key secret', () => {
  it('requireSecret issues a secret once; missing or wrong is 401 -32016; the right one overrides every allowlist', async () => {
    const key = await keyWith({ requireSecret: true, allowedOrigins: ['https://app.example.com'], allowedMethods: ['eth_getBalance'] });
    expect(key.keySecret).toMatch(/^tgs_[A-Za-z0-9_-]{32}$/);
    const url = tg.url('eth', key.secret);
    const invalidSecret = { jsonrpc: '2.0', id: null, error: { code: -32016, message: 'invalid API key secret' } };
    const missing = await rpc(url, BALANCE, { headers: { origin: 'https://app.example.com' } });
    expect(missing.status).toBe(401);
    expect(missing.body).toStrictEqual(invalidSecret);
    const wrong = await rpc(url, BALANCE, { headers: { authorization: basic('tgs_wrong') } });
    expect(wrong.status).toBe(401);
    expect(wrong.body).toStrictEqual(invalidSecret);
    // Server-side: no Origin, a method outside the list, the secret as HTTP Basic with an empty user.
    const served = await rpc(url, call('eth_blockNumber'), { headers: { authorization: basic(key.keySecret!) } });
    expect(served.status).toBe(200);
    expect(served.body.result).toBe('0x1');
    // The key listing shows that a secret exists, never the secret or its hash.
    const listed = await admin('GET', `/v1/keys/${key.id}`);
    expect(listed.body.key.hasKeySecret).toBe(true);
    expect(JSON.stringify(listed.body)).not.toContain(key.keySecret);
  });

  it('without requireSecret the secret is optional, still overrides the allowlists, and a wrong one is 401', async () => {
    const key = await keyWith({ allowedOrigins: ['https://app.example.com'] });
    const issued = await admin('POST', `/v1/keys/${key.id}/secret`);
    expect(issued.status).toBe(200);
    const keySecret: string = issued.body.keySecret;
    const url = tg.url('eth', key.secret);
    expect((await rpc(url, BALANCE)).status).toBe(403);
    expect((await rpc(url, BALANCE, { headers: { authorization: basic(keySecret) } })).status).toBe(200);
    expect((await rpc(url, BALANCE, { headers: { authorization: basic(`${keySecret}x`) } })).status).toBe(401);
    // A new secret replaces the old one at once.
    const again = await admin('POST', `/v1/keys/${key.id}/secret`);
    expect((await rpc(url, BALANCE, { headers: { authorization: basic(keySecret) } })).status).toBe(401);
    expect((await rpc(url, BALANCE, { headers: { authorization: basic(again.body.keySecret) } })).status).toBe(200);
  });
});

describe('PATCH /v1/keys/:key', () => {
  it('sets, narrows and clears settings; each field given replaces that field', async () => {
    const key = await keyWith({});
    const url = tg.url('eth', key.secret);
    expect((await rpc(url, call('eth_blockNumber'))).status).toBe(200);
    const patched = await admin('PATCH', `/v1/keys/${key.id}`, { settings: { allowedMethods: ['eth_getBalance'], allowedOrigins: ['HTTPS://App.Example.com'] } });
    expect(patched.status).toBe(200);
    expect(patched.body.key.settings).toMatchObject({ allowedMethods: ['eth_getBalance'], allowedOrigins: ['https://app.example.com'], requireSecret: false });
    expect((await rpc(url, call('eth_blockNumber'), { headers: { origin: 'https://app.example.com' } })).status).toBe(403);
    await admin('PATCH', `/v1/keys/${key.id}`, { settings: { allowedMethods: [] } });
    expect((await rpc(url, call('eth_blockNumber'), { headers: { origin: 'https://app.example.com' } })).status).toBe(200);
    const cleared = await admin('PATCH', `/v1/keys/${key.id}`, { settings: { allowedOrigins: [] } });
    expect(cleared.body.key.settings).toBeNull();
    expect((await rpc(url, call('eth_blockNumber'))).status).toBe(200);
  });

  it.each([
    [{ allowedIps: ['10.0.0.0/8', '10.0.0.0/33'] }, /^settings\.allowedIps\.1: "10\.0\.0\.0\/33" is not an IPv4 or IPv6 CIDR range/],
    [{ allowedIps: ['not-an-ip'] }, /^settings\.allowedIps\.0: /],
    [{ allowedOrigins: ['https://exa mple.com'] }, /^settings\.allowedOrigins\.0: .* is not an origin pattern/],
    [{ allowedOrigins: ['https://example.com/path'] }, /^settings\.allowedOrigins\.0: /],
    [{ allowedOrigins: ['https://*'] }, /^settings\.allowedOrigins\.0: /],
    [{ allowedMethods: Array.from({ length: 31 }, (_, i) => `m_${i}`) }, /^settings\.allowedMethods: at most 30 entries/],
    [{ allowedAddresses: ['0x1234'] }, /^settings\.allowedAddresses\.0: .* is not a contract address/],
    [{ jwtKeys: [{ id: 'k1', pem: '-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----' }] }, /^settings\.jwtKeys\.0\.pem: is not a PEM public key/],
    [{ requireJwt: true }, /^settings\.requireJwt: register at least one key/],
    [{ allowedOrigin: ['x'] }, /^settings: Unrecognized key/],
  ])('refuses %j with 400 naming the field', async (settings, message) => {
    const key = await keyWith({});
    const r = await admin('PATCH', `/v1/keys/${key.id}`, { settings });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe('bad_request');
    expect(r.body.error.message).toMatch(message);
  });

  it('refuses a private key, and keys other than RSA-2048+ / P-256', async () => {
    const key = await keyWith({});
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const privatePem = rsa.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    const ed = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }) as string;
    const r1 = await admin('PATCH', `/v1/keys/${key.id}`, { settings: { jwtKeys: [{ id: 'a', pem: privatePem }] } });
    expect(r1.body.error.message).toMatch(/settings\.jwtKeys\.0\.pem: is a private key/);
    const r2 = await admin('PATCH', `/v1/keys/${key.id}`, { settings: { jwtKeys: [{ id: 'a', pem: ed }] } });
    expect(r2.body.error.message).toMatch(/settings\.jwtKeys\.0\.pem: must be an RSA \(RS256\) or P-256 EC \(ES256\) public key/);
    const ok = await admin('PATCH', `/v1/keys/${key.id}`, { settings: { jwtKeys: [{ id: 'a', pem: rsa.publicKey.export({ type: 'spki', format: 'pem' }) }] } });
    expect(ok.status).toBe(200);
    expect(ok.body.key.settings.jwtKeys[0]).toMatchObject({ id: 'a', alg: 'RS256' });
  });

  it('a change reaches another replica (same store) within auth.keyCacheTtlMs', async () => {
    const key = await keyWith({});
    const elsewhere = proxied.url('eth', key.secret);
    expect((await rpc(elsewhere, call('eth_blockNumber'))).status).toBe(200);
    await admin('PATCH', `/v1/keys/${key.id}`, { settings: { allowedMethods: ['eth_getBalance'] } });
    // The other replica still has the key cached without settings, for at most the TTL.
    proxiedClock += KEY_CACHE_TTL_MS - 1;
    expect((await rpc(elsewhere, call('eth_blockNumber'))).status, 'the cached lookup has no settings yet').toBe(200);
    proxiedClock += 2;
    expect((await rpc(elsewhere, call('eth_blockNumber'))).body).toStrictEqual(REJECTED('method', 1));
  });
});

describe('tollgate keys update', () => {
  it('sets every allowlist, requires the secret (printed once) and registers a JWT key from a file', async () => {
    await ensureBuilt();
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-keys-update-'));
    try {
      const db = join(dir, 'store.db');
      const store = await openStore({ driver: 'sqlite', path: db });
      const team = await store.createTeam({ name: 'cli', dailyCredits: 1_000 });
      await store.close();
      const created = JSON.parse((await run(process.execPath, [CLI, 'keys', 'create', '--team', 'cli', '--db', db])).stdout);
      const pemFile = join(dir, 'signer-1.pem');
      writeFileSync(pemFile, generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }) as string);
      const { stdout } = await run(process.execPath, [
        CLI, 'keys', 'update', created.id, '--db', db,
        '--allow-origin', 'https://app.example.com', '--allow-origin', 'https://*.example.org',
        '--allow-method', 'eth_call', '--allow-address', TOKEN, '--allow-ip', '10.0.0.0/8', '--allow-ip', '2001:db8::/32',
        '--allow-user-agent', 'MyDapp', '--require-secret', '--jwt-key', pemFile,
      ]);
      const updated = JSON.parse(stdout);
      expect(updated.teamId).toBe(team.id);
      expect(updated.keySecret).toMatch(/^tgs_/);
      expect(updated.settings).toMatchObject({
        allowedOrigins: ['https://app.example.com', 'https://*.example.org'],
        allowedMethods: ['eth_call'],
        allowedAddresses: [TOKEN],
        allowedIps: ['10.0.0.0/8', '2001:db8::/32'],
        allowedUserAgents: ['MyDapp'],
        requireSecret: true,
        jwtKeys: [{ id: 'signer-1', alg: 'ES256' }],
      });
      // Validation errors name the field, exit 2.
      const bad = await run(process.execPath, [CLI, 'keys', 'update', created.id, '--db', db, '--allow-ip', '300.1.1.1/8']).catch((error: { code: number; stderr: string }) => error);
      expect((bad as { code: number }).code).toBe(2);
      expect((bad as { stderr: string }).stderr).toMatch(/settings\.allowedIps\.0: "300\.1\.1\.1\/8" is not an IPv4 or IPv6 CIDR range/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
