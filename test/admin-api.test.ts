// The admin API (docs/admin-api.md) over real HTTP against the admin listener of a real gateway:
// every route, the bearer token on every route (unknown paths included), validation and error
// shapes, the secret shown only at issuance and rotation, revocation/rotation/quota changes
// reaching the RPC path (at once through this process, within auth.keyCacheTtlMs through the
// store), usage reports with exact credits after real traffic, the operational routes; and the
// `tollgate` CLI verbs on a SQLite file.

import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashSecret } from '../src/auth/api-key.js';
import { parseConfig } from '../src/config/load.js';
import type { GatewayConfig } from '../src/config/schema.js';
import { startGateway } from '../src/gateway.js';
import { createLogger } from '../src/logging/logger.js';
import { utcDay } from '../src/metering/meter.js';
import { openStore, type Store } from '../src/store/index.js';
import { CLI, ROOT, ensureBuilt } from './helpers/build.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type RpcItem, type ScriptedUpstream } from './helpers/scripted-upstream.js';

// The scripted upstreams in this file answer made-up blocks (only their hash is right), so block
// verification is off on its EVM networks: verification has its own suites (block-verification,
// right-answers), and this file tests something else.

/** The key cache's TTL, on the gateway's clock below (a test moves the clock past it). */
const KEY_CACHE_TTL_MS = 300;
/** The upstream answers 500 for this hash: every upstream failed, nothing is charged. */
const FAILING_HASH = blockHash(0xdead);

function blockHash(n: number): string {
  return `0x${n.toString(16).padStart(64, '0')}`;
}

/**
 * The gateway's clock (key cache TTL, expiries, rotation grace, usage days): it stands still
 * unless a test moves it, so nothing here waits for real time to pass.
 */
let clock = Date.now();
const now = (): number => clock;

const call = (method: string, params: unknown[] = [], id: unknown = 1) => ({ jsonrpc: '2.0', id, method, params });
const CHAIN_ID = call('eth_chainId');

let upstream: ScriptedUpstream;
let tg: TestGateway;

interface AdminAnswer {
  status: number;
  headers: Headers;
  text: string;
  body: any;
}

/** Every admin response body, in order, for the secret-leak check at the end. */
const seen: Array<{ what: string; text: string }> = [];
/** Secret → index in `seen` of the one response allowed to show it. */
const revealedAt = new Map<string, number>();

async function admin(method: string, path: string, body?: unknown, authorization: string | null = `Bearer ${TEST_ADMIN_TOKEN}`): Promise<AdminAnswer> {
  const headers: Record<string, string> = {};
  if (authorization !== null) headers.authorization = authorization;
  if (body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(`${tg.gateway.adminOrigin}${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  seen.push({ what: `${method} ${path} → ${response.status}`, text });
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  // Responses that carry a secret are where it may appear; nowhere else.
  const secret = (parsed as { secret?: unknown } | undefined)?.secret;
  if (typeof secret === 'string') {
    expect(revealedAt.has(secret), 'a secret is returned only once').toBe(false);
    revealedAt.set(secret, seen.length - 1);
  }
  return { status: response.status, headers: response.headers, text, body: parsed };
}

async function issue(team: string, fields: Record<string, unknown> = {}): Promise<{ id: string; secret: string }> {
  const r = await admin('POST', `/v1/teams/${team}/keys`, fields);
  expect(r.status, r.text).toBe(201);
  return { id: r.body.key.id, secret: r.body.secret };
}

async function rpcStatus(network: string, secret: string, body: unknown = CHAIN_ID): Promise<number> {
  return (await rpc(tg.url(network, secret), body)).status;
}

beforeAll(async () => {
  upstream = await startScriptedUpstream((received) => {
    const params = (received.body as RpcItem | undefined)?.params;
    if (Array.isArray(params) && params[0] === FAILING_HASH) return { kind: 'status', status: 500 };
    // A block whose hash is the one asked for (the gateway rejects any other).
    return { kind: 'result', result: (item: RpcItem) => ({ hash: (item.params as unknown[])[0], number: '0x1', transactions: [] }) };
  });
  tg = await startTestGateway({
    now,
    config: { auth: { keyCacheTtlMs: KEY_CACHE_TTL_MS }, cache: { maxBytes: 0 } },
    networks: [
      { id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'scripted', url: upstream.url }] },
      { id: 'base', kind: 'evm', verification: 'off', chainId: 8453, upstreams: [{ id: 'scripted', url: upstream.url }] },
    ],
  });
});

afterAll(async () => {
  await tg?.close();
  await upstream?.close();
});

describe('teams', () => {
  it('create, list, get by name and by id, update', async () => {
    const created = await admin('POST', '/v1/teams', { name: 'acme', dailyCredits: 100_000 });
    expect(created.status).toBe(201);
    expect(created.headers.get('content-type')).toBe('application/json');
    expect(created.headers.get('cache-control')).toBe('no-store');
    expect(created.body).toStrictEqual({
      team: { id: expect.stringMatching(/^team_[0-9a-f]{16}$/), name: 'acme', dailyCredits: 100_000, creditsPerSecond: null, createdAt: expect.any(Number) },
    });
    const team = created.body.team;

    const listed = await admin('GET', '/v1/teams');
    expect(listed.status).toBe(200);
    expect(listed.body.teams).toContainEqual(team);

    expect((await admin('GET', '/v1/teams/acme')).body).toStrictEqual({ team });
    expect((await admin('GET', `/v1/teams/${team.id}`)).body).toStrictEqual({ team });

    const limited = await admin('PATCH', '/v1/teams/acme', { creditsPerSecond: 1_000 });
    expect(limited.status).toBe(200);
    expect(limited.body.team).toStrictEqual({ ...team, creditsPerSecond: 1_000 });
    const unlimited = await admin('PATCH', `/v1/teams/${team.id}`, { creditsPerSecond: null, dailyCredits: 200_000 });
    expect(unlimited.body.team).toStrictEqual({ ...team, dailyCredits: 200_000, creditsPerSecond: null });
    expect((await admin('GET', '/v1/teams/acme')).body.team).toStrictEqual({ ...team, dailyCredits: 200_000 });
  });

  it('409 for a duplicate name, also when the duplicates race', async () => {
    const duplicate = await admin('POST', '/v1/teams', { name: 'acme', dailyCredits: 1 });
    expect(duplicate.status).toBe(409);
    expect(duplicate.body).toStrictEqual({ error: { code: 'conflict', message: 'a team named "acme" already exists' } });

    const racing = await Promise.all(Array.from({ length: 6 }, () => admin('POST', '/v1/teams', { name: 'racer', dailyCredits: 1 })));
    expect(racing.map((r) => r.status).sort()).toStrictEqual([201, 409, 409, 409, 409, 409]);
    for (const r of racing.filter((answer) => answer.status === 409)) expect(r.body.error.code).toBe('conflict');
  });

  it('409, not 500, when another process takes the name between the check and the insert', async () => {
    const store = await openStore({ driver: 'sqlite', path: ':memory:' });
    await store.createTeam({ name: 'ghost', dailyCredits: 1 });
    // The name check misses, as if a replica or the CLI inserted the team just after it.
    const racing: Store = { ...store, findTeam: async (idOrName) => (idOrName === 'ghost' ? null : store.findTeam(idOrName)) };
    const other = await startTestGateway({ store: racing, networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'u', url: upstream.url }] }] });
    try {
      const response = await fetch(`${other.gateway.adminOrigin}/v1/teams`, {
        method: 'POST',
        headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'ghost', dailyCredits: 5 }),
      });
      expect(response.status).toBe(409);
      expect(await response.json()).toStrictEqual({ error: { code: 'conflict', message: 'a team named "ghost" already exists' } });
    } finally {
      await other.close();
      await store.close();
    }
  });

  it.each([
    ['unknown field', { name: 'x1', dailyCredits: 1, dailyCredit: 1 }, /dailyCredit/],
    ['negative credits', { name: 'x2', dailyCredits: -1 }, /^dailyCredits: /],
    ['fractional credits', { name: 'x3', dailyCredits: 1.5 }, /^dailyCredits: /],
    ['credits as a string', { name: 'x4', dailyCredits: '100' }, /^dailyCredits: /],
    ['missing credits', { name: 'x5' }, /^dailyCredits: /],
    ['bad name', { name: 'has space', dailyCredits: 1 }, /^name: /],
    ['zero throughput', { name: 'x6', dailyCredits: 1, creditsPerSecond: 0 }, /^creditsPerSecond: /],
    ['a JSON array', [], /body/],
    ['invalid JSON', '{"name":', /not valid JSON/],
  ])('POST /v1/teams → 400 for %s', async (_, body, message) => {
    const r = await admin('POST', '/v1/teams', body);
    expect(r.status).toBe(400);
    expect(r.body).toStrictEqual({ error: { code: 'bad_request', message: expect.stringMatching(message) } });
  });

  it('PATCH → 400 for an unknown field or negative credits, and changes nothing', async () => {
    const before = (await admin('GET', '/v1/teams/acme')).body.team;
    for (const body of [{ name: 'renamed' }, { dailyCredits: -5 }, { dailyCredits: 5, bogus: true }]) {
      const r = await admin('PATCH', '/v1/teams/acme', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.code).toBe('bad_request');
    }
    expect((await admin('GET', '/v1/teams/acme')).body.team).toStrictEqual(before);
  });

  it('404 for an unknown team, an unknown route, and a malformed escape is 400 (not a crash)', async () => {
    for (const [method, path, body] of [
      ['GET', '/v1/teams/nope'],
      ['PATCH', '/v1/teams/nope', { dailyCredits: 1 }],
      ['POST', '/v1/teams/nope/keys', {}],
      ['GET', '/v1/keys?team=nope'],
      ['GET', '/v1/usage?team=nope'],
    ] as const) {
      const r = await admin(method, path, body);
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body).toStrictEqual({ error: { code: 'not_found', message: 'no team "nope"' } });
    }
    const route = await admin('GET', '/v1/nothing-here');
    expect(route.status).toBe(404);
    expect(route.body).toStrictEqual({ error: { code: 'not_found', message: 'no route /v1/nothing-here' } });

    const malformed = await admin('GET', '/v1/teams/%E0%A4%A');
    expect(malformed.status).toBe(400);
    expect(malformed.body.error.code).toBe('bad_request');
    expect((await admin('GET', '/healthz')).status).toBe(200);
  });

  it('405 with Allow for a known path and the wrong method', async () => {
    const r = await admin('DELETE', '/v1/teams/acme');
    expect(r.status).toBe(405);
    expect(r.headers.get('allow')).toBe('GET, PATCH');
    expect(r.body).toStrictEqual({ error: { code: 'method_not_allowed', message: 'use GET or PATCH' } });
  });
});

describe('keys', () => {
  it('issue (secret once), list, get, update', async () => {
    const expires = '2099-01-01T00:00:00.000Z';
    const r = await admin('POST', '/v1/teams/acme/keys', { label: 'ci', dailyCap: 50_000, allowedNetworks: ['eth'], expiresAt: expires });
    expect(r.status).toBe(201);
    expect(r.body).toStrictEqual({
      key: {
        id: expect.stringMatching(/^key_[0-9a-f]{16}$/),
        teamId: expect.stringMatching(/^team_/),
        label: 'ci',
        dailyCap: 50_000,
        allowedNetworks: ['eth'],
        expiresAt: Date.parse(expires),
        revokedAt: null,
        createdAt: expect.any(Number),
        settings: null,
        hasKeySecret: false,
      },
      secret: expect.stringMatching(/^tg_[A-Za-z0-9_-]{32}$/),
    });
    const { key, secret } = r.body;
    expect(await rpcStatus('eth', secret)).toBe(200);
    expect(await rpcStatus('base', secret)).toBe(403); // not on its allow-list

    expect((await admin('GET', '/v1/keys')).body.keys).toContainEqual(key);
    const ofTeam = await admin('GET', '/v1/keys?team=acme');
    expect(ofTeam.body.keys).toStrictEqual([key]);
    expect((await admin('GET', `/v1/keys/${key.id}`)).body).toStrictEqual({ key });

    const updated = await admin('PATCH', `/v1/keys/${key.id}`, { label: null, allowedNetworks: null, dailyCap: null, expiresAt: null });
    expect(updated.status).toBe(200);
    expect(updated.body.key).toStrictEqual({ ...key, label: null, allowedNetworks: null, dailyCap: null, expiresAt: null });
    // The update reached the RPC path at once (this process cleared its key cache).
    expect(await rpcStatus('base', secret)).toBe(200);

    const expired = await admin('PATCH', `/v1/keys/${key.id}`, { expiresAt: new Date(now() - 1_000).toISOString() });
    expect(expired.body.key.expiresAt).toBeLessThan(now());
    expect(await rpcStatus('eth', secret)).toBe(401);
  });

  it.each([
    ['POST', '/v1/teams/acme/keys', { dailyCap: -1 }, /^dailyCap: /],
    ['POST', '/v1/teams/acme/keys', { secret: 'tg_mine' }, /secret/],
    ['POST', '/v1/teams/acme/keys', { expiresAt: 'tomorrow' }, /^expiresAt: /],
    ['POST', '/v1/teams/acme/keys', { allowedNetworks: 'eth' }, /^allowedNetworks: /],
    ['POST', '/v1/teams/acme/keys', { label: 'x'.repeat(201) }, /^label: /],
  ])('%s %s → 400 for %j', async (method, path, body, message) => {
    const r = await admin(method, path, body);
    expect(r.status).toBe(400);
    expect(r.body).toStrictEqual({ error: { code: 'bad_request', message: expect.stringMatching(message) } });
  });

  it('400 for bad update and rotate bodies, 404 for unknown keys', async () => {
    const { id } = await issue('acme');
    for (const [path, body] of [
      [`/v1/keys/${id}`, { dailyCap: -10 }],
      [`/v1/keys/${id}`, { teamId: 'team_0000000000000000' }],
      [`/v1/keys/${id}/rotate`, { gracePeriodSeconds: -1 }],
      [`/v1/keys/${id}/rotate`, { gracePeriodSeconds: 1.5 }],
      [`/v1/keys/${id}/rotate`, { grace: 1 }],
    ] as const) {
      const r = await admin(path.endsWith('/rotate') ? 'POST' : 'PATCH', path, body);
      expect(r.status, `${path} ${JSON.stringify(body)}`).toBe(400);
      expect(r.body.error.code).toBe('bad_request');
    }
    for (const [method, path, body] of [
      ['GET', '/v1/keys/key_0000000000000000'],
      ['PATCH', '/v1/keys/key_0000000000000000', { label: 'x' }],
      ['POST', '/v1/keys/key_0000000000000000/rotate', {}],
      ['POST', '/v1/keys/key_0000000000000000/revoke'],
      ['GET', '/v1/usage?key=key_0000000000000000'],
    ] as const) {
      const r = await admin(method, path, body);
      expect(r.status, `${method} ${path}`).toBe(404);
      expect(r.body).toStrictEqual({ error: { code: 'not_found', message: 'no key "key_0000000000000000"' } });
    }
  });

  it('revoke takes effect for the next request through this process; rotating a revoked key is 409', async () => {
    const { id, secret } = await issue('acme', { label: 'to-revoke' });
    expect(await rpcStatus('eth', secret)).toBe(200); // now cached by the authenticator
    const revoked = await admin('POST', `/v1/keys/${id}/revoke`);
    expect(revoked.status).toBe(200);
    expect(revoked.body.key).toMatchObject({ id, label: 'to-revoke', revokedAt: expect.any(Number) });
    const r = await rpc(tg.url('eth', secret), CHAIN_ID);
    expect(r.status).toBe(401);
    expect(r.body.error).toStrictEqual({ code: -32016, message: 'invalid API key' });

    const again = await admin('POST', `/v1/keys/${id}/revoke`);
    expect(again.body.key.revokedAt).toBe(revoked.body.key.revokedAt);
    const rotate = await admin('POST', `/v1/keys/${id}/rotate`, { gracePeriodSeconds: 0 });
    expect(rotate.status).toBe(409);
    expect(rotate.body).toStrictEqual({ error: { code: 'conflict', message: `key "${id}" is revoked` } });
  });

  it('a key revoked in the store behind the gateway (another replica, the CLI) stops within auth.keyCacheTtlMs', async () => {
    const { id, secret } = await issue('acme', { label: 'elsewhere' });
    expect(await rpcStatus('eth', secret)).toBe(200); // the lookup is now cached for KEY_CACHE_TTL_MS
    await tg.store.revokeKey(id, now());
    clock += KEY_CACHE_TTL_MS - 1;
    expect(await rpcStatus('eth', secret), 'the cached lookup still says the key is valid').toBe(200);
    clock += 2;
    expect(await rpcStatus('eth', secret)).toBe(401);
  });

  it('rotate with gracePeriodSeconds 0: the old secret fails at once, the new one works', async () => {
    const { id, secret: old } = await issue('acme', { label: 'rotate-now' });
    expect(await rpcStatus('eth', old)).toBe(200);
    const before = now();
    const r = await admin('POST', `/v1/keys/${id}/rotate`, { gracePeriodSeconds: 0 });
    expect(r.status).toBe(200);
    expect(r.body).toStrictEqual({
      key: expect.objectContaining({ id, label: 'rotate-now', revokedAt: null }),
      secret: expect.stringMatching(/^tg_[A-Za-z0-9_-]{32}$/),
      previousSecretValidUntil: expect.any(String),
    });
    expect(r.body.secret).not.toBe(old);
    expect(Date.parse(r.body.previousSecretValidUntil)).toBeGreaterThanOrEqual(before);
    expect(Date.parse(r.body.previousSecretValidUntil)).toBeLessThanOrEqual(now());
    expect(await rpcStatus('eth', old)).toBe(401);
    expect(await rpcStatus('eth', r.body.secret)).toBe(200);
  });

  it('rotate without a body uses auth.rotationGraceMs (default 0)', async () => {
    const { id, secret: old } = await issue('acme');
    const r = await admin('POST', `/v1/keys/${id}/rotate`);
    expect(r.status).toBe(200);
    expect(await rpcStatus('eth', old)).toBe(401);
    expect(await rpcStatus('eth', r.body.secret)).toBe(200);
  });

  it('rotate with gracePeriodSeconds 1: the old secret works during the grace period and fails after it', async () => {
    const { id, secret: old } = await issue('acme', { label: 'rotate-grace' });
    const before = now();
    const r = await admin('POST', `/v1/keys/${id}/rotate`, { gracePeriodSeconds: 1 });
    expect(r.status).toBe(200);
    const validUntil = Date.parse(r.body.previousSecretValidUntil);
    expect(validUntil).toBeGreaterThanOrEqual(before + 1_000);
    expect(validUntil).toBeLessThanOrEqual(now() + 1_000);
    expect(await rpcStatus('eth', old)).toBe(200);
    expect(await rpcStatus('eth', r.body.secret)).toBe(200);
    clock = validUntil - 1;
    expect(await rpcStatus('eth', old), 'the last millisecond of the grace period').toBe(200);
    clock = validUntil + 1;
    expect(await rpcStatus('eth', old)).toBe(401);
    expect(await rpcStatus('eth', r.body.secret)).toBe(200);
  });
});

describe('team quota through PATCH', () => {
  it('402 at quota 0, served after raising it, 402 again once spent', async () => {
    expect((await admin('POST', '/v1/teams', { name: 'tiny', dailyCredits: 0 })).status).toBe(201);
    const { secret } = await issue('tiny');
    const refused = await rpc(tg.url('eth', secret), CHAIN_ID);
    expect(refused.status).toBe(402);
    expect(refused.body.error).toMatchObject({ code: -32005, data: { reason: 'daily_credits_exhausted', limit: 0, used: 0, cost: 5 } });

    const raised = await admin('PATCH', '/v1/teams/tiny', { dailyCredits: 5 });
    expect(raised.body.team.dailyCredits).toBe(5);
    const served = await rpc(tg.url('eth', secret), CHAIN_ID);
    expect(served.status).toBe(200);
    expect(served.body.result).toBe('0x1');
    expect(served.headers.get('x-credits-remaining')).toBe('0');

    const spent = await rpc(tg.url('eth', secret), CHAIN_ID);
    expect(spent.status).toBe(402);
    expect(spent.body.error.data).toMatchObject({ limit: 5, used: 5, cost: 5 });
  });
});

describe('usage', () => {
  let k1: { id: string; secret: string };
  let k2: { id: string; secret: string };
  const today = () => utcDay(now());
  const daysAgo = (n: number) => utcDay(now() - n * 86_400_000);

  beforeAll(async () => {
    expect((await admin('POST', '/v1/teams', { name: 'metered', dailyCredits: 1_000_000 })).status).toBe(201);
    k1 = await issue('metered', { label: 'k1' });
    k2 = await issue('metered', { label: 'k2' });
    const ok = async (network: string, secret: string, body: unknown) => {
      const r = await rpc(tg.url(network, secret), body);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.result).toBeDefined();
    };
    // k1 on eth: 3 blocks (80 each) and 2 chain ids (5 each) = 250.
    for (const n of [1, 2, 3]) await ok('eth', k1.secret, call('eth_getBlockByHash', [blockHash(n), false]));
    await ok('eth', k1.secret, CHAIN_ID);
    await ok('eth', k1.secret, CHAIN_ID);
    // k1 on base: 1 block = 80.
    await ok('base', k1.secret, call('eth_getBlockByHash', [blockHash(4), true]));
    // k2 on base: 2 chain ids and 1 net_version (a batch: each item is charged) = 15.
    const batch = await rpc(tg.url('base', k2.secret), [CHAIN_ID, { ...CHAIN_ID, id: 2 }, call('net_version', [], 3)]);
    expect(batch.body.map((reply: { result?: unknown }) => reply.result)).toStrictEqual(['0x2105', '0x2105', '8453']);

    // Nothing of this is charged: invalid params, a denied method, every upstream failed.
    const invalid = await rpc(tg.url('eth', k1.secret), call('eth_getBlockByHash', ['0x12', false]));
    expect(invalid.body.error.code).toBe(-32602);
    const denied = await rpc(tg.url('eth', k1.secret), call('eth_sendTransaction', [{}]));
    expect(denied.body.error.code).toBe(-32601);
    const failed = await rpc(tg.url('eth', k2.secret), call('eth_getBlockByHash', [FAILING_HASH, false]));
    expect(failed.status).toBe(502);
    expect(failed.headers.get('x-credits-cost')).toBe('0');
  });

  const sortByNetworkMethod = (rows: Array<{ network: string; method: string }>) =>
    [...rows].sort((a, b) => `${a.network} ${a.method}`.localeCompare(`${b.network} ${b.method}`));

  it('by team over 7 days, broken down by network and method', async () => {
    const r = await admin('GET', '/v1/usage?team=metered&days=7');
    expect(r.status).toBe(200);
    const teamId = (await admin('GET', '/v1/teams/metered')).body.team.id;
    expect(r.body).toMatchObject({ from: daysAgo(6), to: today(), teamId, totals: { credits: 345, requests: 9 } });
    expect(r.body.keyId).toBeUndefined();
    expect(sortByNetworkMethod(r.body.byNetworkMethod)).toStrictEqual([
      { network: 'base', method: 'eth_chainId', credits: 10, requests: 2 },
      { network: 'base', method: 'eth_getBlockByHash', credits: 80, requests: 1 },
      { network: 'base', method: 'net_version', credits: 5, requests: 1 },
      { network: 'eth', method: 'eth_chainId', credits: 10, requests: 2 },
      { network: 'eth', method: 'eth_getBlockByHash', credits: 240, requests: 3 },
    ]);
    expect(r.body.rows).toHaveLength(5);
    for (const row of r.body.rows) expect(row).toMatchObject({ day: today(), teamId, keyId: expect.stringMatching(/^key_/) });
    expect(r.body.rows.filter((row: { keyId: string }) => row.keyId === k2.id)).toHaveLength(2);
  });

  it('by key over a from/to range', async () => {
    const r = await admin('GET', `/v1/usage?key=${k1.id}&from=${daysAgo(2)}&to=${today()}`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ from: daysAgo(2), to: today(), keyId: k1.id, totals: { credits: 330, requests: 6 } });
    expect(sortByNetworkMethod(r.body.byNetworkMethod)).toStrictEqual([
      { network: 'base', method: 'eth_getBlockByHash', credits: 80, requests: 1 },
      { network: 'eth', method: 'eth_chainId', credits: 10, requests: 2 },
      { network: 'eth', method: 'eth_getBlockByHash', credits: 240, requests: 3 },
    ]);
    const k2Usage = await admin('GET', `/v1/usage?key=${k2.id}`);
    expect(k2Usage.body).toMatchObject({ from: today(), to: today(), totals: { credits: 15, requests: 3 } });
    const yesterday = await admin('GET', `/v1/usage?key=${k1.id}&from=${daysAgo(1)}&to=${daysAgo(1)}`);
    expect(yesterday.body).toStrictEqual({ from: daysAgo(1), to: daysAgo(1), keyId: k1.id, totals: { credits: 0, requests: 0 }, byNetworkMethod: [], rows: [] });
  });

  it.each([
    ['neither team nor key', ''],
    ['both team and key', 'team=metered&key=key_0000000000000000'],
    ['days=0', 'team=metered&days=0'],
    ['days=abc', 'team=metered&days=abc'],
    ['days over a year', 'team=metered&days=367'],
    ['a malformed day', 'team=metered&from=2026-13-45'],
    ['from after to', 'team=metered&from=2026-02-02&to=2026-02-01'],
  ])('400 for %s', async (_, query) => {
    const r = await admin('GET', `/v1/usage?${query}`);
    expect(r.status).toBe(400);
    expect(r.body).toStrictEqual({ error: { code: 'bad_request', message: expect.any(String) } });
  });
});

describe('operational routes', () => {
  it('/healthz and /readyz answer without a token (and ignore a wrong one)', async () => {
    for (const authorization of [null, 'Bearer wrong']) {
      const health = await admin('GET', '/healthz', undefined, authorization);
      expect(health.status).toBe(200);
      expect(health.body).toStrictEqual({ status: 'ok' });
      const ready = await admin('GET', '/readyz', undefined, authorization);
      expect(ready.status).toBe(200);
      expect(ready.body).toMatchObject({ status: 'ready', draining: false, store: true, networks: { eth: true, base: true } });
    }
  });

  it('/metrics with the token is Prometheus text with tollgate_requests_total', async () => {
    const r = await admin('GET', '/metrics');
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(r.text).toMatch(/^# HELP tollgate_requests_total /m);
    expect(r.text).toMatch(/^tollgate_requests_total\{[^}]*network="eth"[^}]*\} \d+/m);
  });

  it('POST /v1/reload: 200 with a config file, 400 invalid_config when it is invalid or absent', async () => {
    // The test gateway has no config file to re-read.
    const absent = await admin('POST', '/v1/reload');
    expect(absent.status).toBe(400);
    expect(absent.body).toStrictEqual({ error: { code: 'invalid_config', message: expect.stringContaining('without a config file') } });

    const raw = {
      server: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0, token: TEST_ADMIN_TOKEN },
      networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, baseUrls: ['*/eth'], upstreams: [{ id: 'u', url: upstream.url }] }],
    };
    let next: () => GatewayConfig = () => parseConfig(raw, {}, 'reload test');
    const store = await openStore({ driver: 'sqlite', path: ':memory:' });
    const quiet = createLogger({ destination: new Writable({ write: (_chunk, _encoding, done) => done() }) });
    const gateway = await startGateway(parseConfig(raw, {}, 'reload test'), { store, logger: quiet, loadConfig: () => next() });
    try {
      const post = async () => {
        const response = await fetch(`${gateway.adminOrigin}/v1/reload`, { method: 'POST', headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
        return { status: response.status, body: (await response.json()) as any };
      };
      next = () => parseConfig({ ...raw, networks: [...raw.networks, { ...raw.networks[0]!, id: 'eth2', baseUrls: ['*/eth2'] }] }, {}, 'reload test');
      expect(await post()).toStrictEqual({ status: 200, body: { reloaded: true, networks: ['eth', 'eth2'] } });
      next = () => parseConfig({ ...raw, networks: [{ ...raw.networks[0]!, kind: 'bogus' }] }, {}, 'reload test');
      const rejected = await post();
      expect(rejected.status).toBe(400);
      expect(rejected.body.error.code).toBe('invalid_config');
      const noToken = await fetch(`${gateway.adminOrigin}/v1/reload`, { method: 'POST' });
      expect(noToken.status).toBe(401);
    } finally {
      await gateway.close();
      await store.close();
    }
  });
});

describe('the bearer token', () => {
  const UNAUTHORISED = { error: { code: 'unauthorized', message: 'a valid admin bearer token is required' } };
  const BAD_AUTHORIZATION: Array<[string, string | null]> = [
    ['no header', null],
    ['a wrong token', 'Bearer wrong-token-0123456789abcdef'],
    ['the token minus its last character', `Bearer ${TEST_ADMIN_TOKEN.slice(0, -1)}`],
    ['the token plus a character', `Bearer ${TEST_ADMIN_TOKEN}x`],
    ['the Basic scheme', `Basic ${Buffer.from(`admin:${TEST_ADMIN_TOKEN}`).toString('base64')}`],
    ['the token without a scheme', TEST_ADMIN_TOKEN],
    ['another scheme', `Token ${TEST_ADMIN_TOKEN}`],
    ['Bearer without a token', 'Bearer'],
    ['an empty header', ''],
  ];

  it('401 on every route, unknown paths and wrong methods included, revealing nothing and changing nothing', async () => {
    const { id, secret } = await issue('acme', { label: 'target' });
    const team = (await admin('GET', '/v1/teams/acme')).body.team;
    const routes: Array<[string, string, unknown?]> = [
      ['GET', '/v1/teams'],
      ['POST', '/v1/teams', { name: 'intruder', dailyCredits: 1 }],
      ['GET', '/v1/teams/acme'],
      ['GET', `/v1/teams/${team.id}`],
      ['PATCH', '/v1/teams/acme', { dailyCredits: 1 }],
      ['POST', '/v1/teams/acme/keys', { label: 'intruder' }],
      ['GET', '/v1/keys'],
      ['GET', '/v1/keys?team=acme'],
      ['GET', `/v1/keys/${id}`],
      ['PATCH', `/v1/keys/${id}`, { allowedNetworks: ['none'] }],
      ['POST', `/v1/keys/${id}/rotate`, { gracePeriodSeconds: 0 }],
      ['POST', `/v1/keys/${id}/revoke`],
      ['GET', '/v1/usage?team=acme&days=7'],
      ['GET', `/v1/usage?key=${id}`],
      ['GET', '/metrics'],
      ['POST', '/v1/reload'],
      ['GET', '/v1/nope'],
      ['GET', '/'],
      ['GET', '/v1/teams/nope'],
      ['DELETE', '/v1/teams/acme'],
      ['PUT', '/v1/keys'],
      ['POST', '/metrics'],
    ];
    for (const [method, path, body] of routes) {
      for (const [what, authorization] of BAD_AUTHORIZATION) {
        const r = await admin(method, path, body, authorization);
        const label = `${method} ${path} with ${what}`;
        expect(r.status, label).toBe(401);
        expect(r.headers.get('www-authenticate'), label).toBe('Bearer');
        expect(r.body, label).toStrictEqual(UNAUTHORISED);
        for (const hidden of ['acme', team.id, id, 'tollgate_', 'method_not_allowed', 'not_found']) expect(r.text, label).not.toContain(hidden);
      }
    }

    // Nothing the rejected requests asked for happened.
    expect((await admin('GET', '/v1/teams/intruder')).status).toBe(404);
    expect((await admin('GET', '/v1/teams/acme')).body.team).toStrictEqual(team);
    expect((await admin('GET', '/v1/keys?team=acme')).body.keys.some((key: { label: string }) => key.label === 'intruder')).toBe(false);
    expect((await admin('GET', `/v1/keys/${id}`)).body.key).toMatchObject({ label: 'target', allowedNetworks: null, revokedAt: null });
    expect(await rpcStatus('eth', secret)).toBe(200);
  });
});

describe('secrets', () => {
  it('appear only in the issuance or rotation response that created them; their SHA-256 never appears', async () => {
    // Make sure list/get/update/revoke/usage/metrics responses exist for every secret issued so far.
    const keys = (await admin('GET', '/v1/keys')).body.keys as Array<{ id: string; revokedAt: number | null }>;
    for (const key of keys) {
      await admin('GET', `/v1/keys/${key.id}`);
      await admin('PATCH', `/v1/keys/${key.id}`, { label: 'checked' });
      await admin('GET', `/v1/usage?key=${key.id}&days=7`);
    }
    for (const key of keys.filter((k) => k.revokedAt === null)) await admin('POST', `/v1/keys/${key.id}/revoke`);
    await admin('GET', '/v1/keys');
    await admin('GET', '/v1/teams');
    await admin('GET', '/metrics');

    expect(revealedAt.size).toBeGreaterThanOrEqual(10);
    // The helper's key was issued through the store, never through the API: it appears nowhere.
    const secrets: Array<[string, number]> = [...revealedAt, [tg.apiKey, -1]];
    for (const [index, response] of seen.entries()) {
      for (const [secret, allowedAt] of secrets) {
        if (index !== allowedAt) expect(response.text, `${response.what} shows a secret it did not create`).not.toContain(secret);
        expect(response.text, `${response.what} shows a secret's hash`).not.toContain(hashSecret(secret));
      }
    }
    for (const index of revealedAt.values()) expect(seen[index]!.what).toMatch(/^POST \/v1\/(teams\/[^/]+\/keys|keys\/[^/]+\/rotate) → 20[01]$/);
    // Nor do they reach the log.
    const log = tg.logLines.join('\n');
    for (const [secret] of secrets) expect(log).not.toContain(secret);
  });
});

// ---------------------------------------------------------------------------------------------
// The CLI: the same service on a SQLite file.

describe('tollgate CLI (--db FILE)', () => {
  let dir: string;
  let db: string;
  const outputs: Array<{ args: string; stdout: string }> = [];

  beforeAll(async () => {
    await ensureBuilt();
    dir = mkdtempSync(join(tmpdir(), 'tollgate-admin-cli-'));
    db = join(dir, 't.db');
  }, 180_000);

  afterAll(() => {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  function tollgate(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve) => {
      execFile(process.execPath, [CLI, ...args, '--db', db], { cwd: ROOT }, (error, stdout, stderr) => {
        outputs.push({ args: args.join(' '), stdout });
        resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : -1, stdout, stderr });
      });
    });
  }

  async function json(...args: string[]): Promise<any> {
    const r = await tollgate(...args);
    expect(r.code, `tollgate ${args.join(' ')}\n${r.stderr}`).toBe(0);
    return JSON.parse(r.stdout);
  }

  it('teams, keys (secret once), usage with totals, rotate, revoke', async () => {
    const team = await json('teams', 'create', 'acme', '--daily-credits', '1000');
    expect(team).toMatchObject({ id: expect.stringMatching(/^team_/), name: 'acme', dailyCredits: 1000, creditsPerSecond: null });
    expect(await json('teams', 'update', 'acme', '--daily-credits', '2000', '--credits-per-second', '50')).toMatchObject({ dailyCredits: 2000, creditsPerSecond: 50 });
    expect(await json('teams', 'update', 'acme', '--credits-per-second', 'none')).toMatchObject({ dailyCredits: 2000, creditsPerSecond: null });
    expect(await json('teams', 'list')).toStrictEqual([{ ...team, dailyCredits: 2000 }]);

    const created = await json('keys', 'create', '--team', 'acme', '--label', 'ci', '--networks', 'eth');
    expect(created).toMatchObject({ id: expect.stringMatching(/^key_/), teamId: team.id, label: 'ci', allowedNetworks: ['eth'], revokedAt: null });
    expect(created.secret).toMatch(/^tg_[A-Za-z0-9_-]{32}$/);
    const { secret: _secret, ...createdKey } = created;
    expect(await json('keys', 'list', '--team', 'acme')).toStrictEqual([createdKey]);

    // Real traffic on the file: a gateway serving the same database.
    const store = await openStore({ driver: 'sqlite', path: db });
    try {
      const gateway = await startTestGateway({
        store,
        networks: [{ id: 'eth', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'scripted', url: upstream.url }] }],
      });
      try {
        for (let i = 0; i < 2; i++) expect((await rpc(gateway.url('eth', created.secret), CHAIN_ID)).status).toBe(200);
        expect((await rpc(gateway.url('eth', created.secret), call('eth_getBlockByHash', [blockHash(7), false]))).status).toBe(200);
      } finally {
        await gateway.close();
      }
    } finally {
      await store.close();
    }
    const usage = await json('usage', '--team', 'acme', '--days', '7');
    expect(usage).toMatchObject({
      from: utcDay(Date.now() - 6 * 86_400_000),
      to: utcDay(Date.now()),
      teamId: team.id,
      totals: { credits: 90, requests: 3 },
    });
    expect(usage.byNetworkMethod).toStrictEqual([
      { network: 'eth', method: 'eth_chainId', credits: 10, requests: 2 },
      { network: 'eth', method: 'eth_getBlockByHash', credits: 80, requests: 1 },
    ]);
    expect((await json('usage', '--key', created.id)).totals).toStrictEqual({ credits: 90, requests: 3 });

    const rotated = await json('keys', 'rotate', created.id, '--grace-seconds', '0');
    expect(rotated).toMatchObject({ key: { id: created.id }, secret: expect.stringMatching(/^tg_[A-Za-z0-9_-]{32}$/), previousSecretValidUntil: expect.any(String) });
    expect(rotated.secret).not.toBe(created.secret);
    const check = await openStore({ driver: 'sqlite', path: db });
    try {
      expect((await check.findKeyBySecretHash(hashSecret(rotated.secret)))?.key.id).toBe(created.id);
      expect((await check.findKeyBySecretHash(hashSecret(rotated.secret)))?.secretValidUntil).toBeNull();
      expect((await check.findKeyBySecretHash(hashSecret(created.secret)))?.secretValidUntil).toBeLessThanOrEqual(Date.now());
    } finally {
      await check.close();
    }

    const revoked = await json('keys', 'revoke', created.id);
    expect(revoked).toMatchObject({ id: created.id, revokedAt: expect.any(Number) });

    // Secrets were printed by `keys create` and `keys rotate` only; hashes never.
    for (const { args, stdout } of outputs) {
      for (const secret of [created.secret, rotated.secret]) {
        const allowed = (args.startsWith('keys create') && secret === created.secret) || (args.startsWith('keys rotate') && secret === rotated.secret);
        if (!allowed) expect(stdout, `tollgate ${args}`).not.toContain(secret);
        expect(stdout, `tollgate ${args}`).not.toContain(hashSecret(secret));
      }
    }
  });

  it.each([
    [['teams', 'create', 'bad', '--daily-credits', 'abc'], /--daily-credits must be a whole number/],
    [['teams', 'create', 'bad', '--daily-credits', '-5'], /--daily-credits/],
    [['teams', 'create', 'bad'], /--daily-credits N is required/],
    [['teams', 'create', 'acme', '--daily-credits', '5'], /already exists/],
    [['teams', 'update', 'nobody', '--daily-credits', '5'], /no team "nobody"/],
    [['keys', 'create', '--team', 'nobody'], /no team "nobody"/],
    [['keys', 'create', '--team', 'acme', '--expires', 'someday'], /--expires must be an ISO date/],
    [['keys', 'rotate', 'key_0000000000000000', '--grace-seconds', '0'], /no key "key_0000000000000000"/],
    [['keys', 'revoke', 'key_0000000000000000'], /no key/],
    [['usage', '--team', 'acme', '--key', 'key_0000000000000000'], /exactly one of team or key/],
    [['usage', '--team', 'acme', '--days', '0'], /days must be 1 to 366/],
    [['teams', 'list', '--bogus'], /bogus/],
    [['keys', 'frobnicate'], /unknown command/],
  ])('tollgate %j → exit code 2 with a message', async (args, message) => {
    const r = await tollgate(...args);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/^tollgate: /);
    expect(r.stderr).toMatch(message);
    expect(r.stdout).toBe('');
  });
});
