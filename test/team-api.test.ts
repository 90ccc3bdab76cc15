// Team tokens and the team API (docs/portal.md, docs/admin-api.md): the operator
// issues, lists and revokes team tokens; with one, a team manages its own keys and reads its own
// usage, and every team route answers another team's ids exactly as ids that do not exist. The
// session cookie of the page is HTTP-only, SameSite=Strict, expires, and its writes need the
// CSRF token. Real gateway on loopback, real SQLite store, calls answered by the gateway itself.
// The overview's quota forecast is checked on a second gateway whose clock the test sets.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { issueTeamToken } from '../src/portal/team-token.js';
import type { Team } from '../src/store/index.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';

let t: TestGateway;
let portal: string;
let teamA: Team;
let teamB: Team;
let tokenA: string;
let tokenB: string;
let tokenAId: string;
let keyOfB: { id: string; secret: string };

const today = () => new Date().toISOString().slice(0, 10);

async function admin(method: string, path: string, body?: unknown) {
  const response = await fetch(`${t.gateway.adminOrigin}${path}`, {
    method,
    headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, body: response.headers.get('content-type')?.startsWith('application/json') && text !== '' ? JSON.parse(text) : undefined };
}

async function team(token: string | undefined, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${portal}${path}`, {
    method,
    headers: { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }), 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, text, body: response.headers.get('content-type')?.startsWith('application/json') && text !== '' ? JSON.parse(text) : undefined };
}

beforeAll(async () => {
  t = await startTestGateway({
    dailyCredits: 1_000,
    config: { portal: { enabled: true, host: '127.0.0.1', port: 0 } },
    // eth_chainId is answered from config: usage without any upstream.
    networks: [{ id: 'eth', kind: 'evm', chainId: 1, upstreams: [{ id: 'none', url: 'http://127.0.0.1:9' }] }],
  });
  portal = t.gateway.portalOrigin!;
  teamA = t.team;
  // A name no other team's can contain: team A's is `team-<random>`, and the test looks for B's name in A's pages.
  teamB = (await admin('POST', '/v1/teams', { name: 'second-team', dailyCredits: 500 })).body.team;
  const issuedA = await admin('POST', `/v1/teams/${teamA.name}/tokens`, { label: 'dashboard' });
  expect(issuedA.status).toBe(201);
  tokenA = issuedA.body.secret;
  tokenAId = issuedA.body.token.id;
  tokenB = (await admin('POST', `/v1/teams/${teamB.id}/tokens`, {})).body.secret;
  const issued = await issueKey(t.store, { teamId: teamB.id, label: 'b-key' });
  keyOfB = { id: issued.key.id, secret: issued.secret };
  // Usage: 3 calls of A's key, 1 of B's.
  for (let n = 0; n < 3; n += 1) expect((await rpc(t.url('eth'), { jsonrpc: '2.0', id: n, method: 'eth_chainId' })).status).toBe(200);
  expect((await rpc(t.url('eth', keyOfB.secret), { jsonrpc: '2.0', id: 9, method: 'eth_chainId' })).status).toBe(200);
});

afterAll(async () => {
  await t?.close();
});

describe('team tokens (operator)', () => {
  it('are shown once, stored hashed, listed per team and in all, without the secret', async () => {
    expect(tokenA).toMatch(/^tgt_[A-Za-z0-9_-]{43}$/);
    const listed = await admin('GET', `/v1/teams/${teamA.id}/tokens`);
    expect(listed.body.tokens).toEqual([{ id: tokenAId, teamId: teamA.id, label: 'dashboard', createdAt: expect.any(Number), revokedAt: null }]);
    const all = await admin('GET', '/v1/team-tokens');
    expect(all.text).not.toContain(tokenA);
    expect(all.body.tokens.map((token: { teamId: string }) => token.teamId).sort()).toEqual([teamA.id, teamB.id].sort());
    expect((await admin('POST', '/v1/teams/no-such-team/tokens', {})).status).toBe(404);
    expect((await admin('POST', '/v1/team-tokens/tok_nope/revoke')).status).toBe(404);
  });

  it('a revoked token is refused (401) and its sessions end', async () => {
    const issued = (await admin('POST', `/v1/teams/${teamA.id}/tokens`, { label: 'short-lived' })).body;
    const signIn = await team(undefined, 'POST', '/session', { token: issued.secret });
    expect(signIn.status).toBe(200);
    const cookie = signIn.headers.get('set-cookie')!.split(';')[0]!;
    expect((await team(issued.secret, 'GET', '/v1/team')).status).toBe(200);
    expect((await team(undefined, 'GET', '/v1/team', undefined, { cookie })).status).toBe(200);
    const revoked = await admin('POST', `/v1/team-tokens/${issued.token.id}/revoke`);
    expect(revoked.body.token.revokedAt).toEqual(expect.any(Number));
    expect((await team(issued.secret, 'GET', '/v1/team')).status).toBe(401);
    expect((await team(undefined, 'GET', '/v1/team', undefined, { cookie })).status).toBe(401);
    expect((await team(undefined, 'POST', '/session', { token: issued.secret })).status).toBe(401);
  });

  it('no token, a key secret or a malformed token: 401 on every team route', async () => {
    for (const token of [undefined, t.apiKey, 'tgt_nope', TEST_ADMIN_TOKEN]) {
      const answer = await team(token, 'GET', '/v1/keys');
      expect(answer.status).toBe(401);
      expect(answer.text).not.toContain(teamA.id);
    }
  });
});

describe('the team API', () => {
  it("GET /v1/team: today's used, remaining, limit and reset equal the ledger's", async () => {
    const [peek] = await t.store.applyLedger([{ type: 'peek', teamId: teamA.id, day: today() }] as const);
    const answer = await team(tokenA, 'GET', '/v1/team');
    expect(answer.body.team).toEqual({ id: teamA.id, name: teamA.name, dailyCredits: 1_000, creditsPerSecond: null });
    expect(answer.body.today).toEqual({ day: today(), used: peek.teamUsed, remaining: 1_000 - peek.teamUsed, limit: 1_000, resetsAt: expect.stringMatching(/T00:00:00.000Z$/) });
    expect(peek.teamUsed).toBe(15);
  });

  it('lists only its own keys, with last use', async () => {
    const keys = (await team(tokenA, 'GET', '/v1/keys')).body.keys;
    expect(keys.map((key: { id: string }) => key.id)).toEqual([t.keyId]);
    expect(keys[0].lastUsedAt).toMatch(new RegExp(`^${today()}T\\d{2}:00:00.000Z$`));
    expect((await team(tokenB, 'GET', '/v1/keys')).body.keys.map((key: { id: string }) => key.id)).toEqual([keyOfB.id]);
  });

  it('creates, updates, rotates and revokes its own key; the secrets work at the RPC endpoint', async () => {
    const created = await team(tokenA, 'POST', '/v1/keys', { label: 'ci', dailyCap: 100 });
    expect(created.status).toBe(201);
    expect(created.body.key).toMatchObject({ teamId: teamA.id, label: 'ci', dailyCap: 100 });
    const id = created.body.key.id;
    expect((await rpc(t.url('eth', created.body.secret), { jsonrpc: '2.0', id: 1, method: 'eth_chainId' })).status).toBe(200);
    const updated = await team(tokenA, 'PATCH', `/v1/keys/${id}`, { label: 'ci-2', allowedNetworks: ['eth'], expiresAt: '2099-01-01T00:00:00Z' });
    expect(updated.body.key).toMatchObject({ label: 'ci-2', allowedNetworks: ['eth'], expiresAt: Date.parse('2099-01-01T00:00:00Z'), dailyCap: 100 });
    expect((await team(tokenA, 'PATCH', `/v1/keys/${id}`, { color: 'red' })).status).toBe(400);
    const rotated = await team(tokenA, 'POST', `/v1/keys/${id}/rotate`, { gracePeriodSeconds: 0 });
    expect(rotated.status).toBe(200);
    expect((await rpc(t.url('eth', rotated.body.secret), { jsonrpc: '2.0', id: 2, method: 'eth_chainId' })).status).toBe(200);
    expect((await rpc(t.url('eth', created.body.secret), { jsonrpc: '2.0', id: 3, method: 'eth_chainId' })).status).toBe(401);
    const revoked = await team(tokenA, 'POST', `/v1/keys/${id}/revoke`);
    expect(revoked.body.key.revokedAt).toEqual(expect.any(Number));
    expect((await rpc(t.url('eth', rotated.body.secret), { jsonrpc: '2.0', id: 4, method: 'eth_chainId' })).status).toBe(401);
  });

  it('reads its own usage (JSON, CSV, hourly), equal to the store’s rows', async () => {
    const rows = await t.store.usage({ teamId: teamB.id, fromDay: today(), toDay: today() });
    const usage = await team(tokenB, 'GET', '/v1/usage?days=30');
    expect(usage.body.rows).toEqual(rows);
    expect(usage.body.teamId).toBe(teamB.id);
    const csv = await team(tokenB, 'GET', '/v1/usage.csv?days=30');
    expect(csv.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect(csv.headers.get('content-disposition')).toMatch(/^attachment; filename="usage-/);
    expect(csv.text).toBe(`day,team_id,key_id,network,method,credits,requests,upstream_units,upstream_usd,saved_units\r\n${today()},${teamB.id},${keyOfB.id},eth,eth_chainId,5,1,0,0,0\r\n`);
    const hourly = await team(tokenB, 'GET', '/v1/usage/hourly');
    expect(hourly.body).toEqual({ day: today(), rows: [{ day: today(), hour: expect.any(Number), teamId: teamB.id, keyId: keyOfB.id, credits: 5, requests: 1 }] });
    expect((await team(tokenB, 'GET', '/v1/usage/hourly?day=yesterday')).status).toBe(400);
  });

  it('the admin API exports the same usage as CSV', async () => {
    const csv = await admin('GET', `/v1/usage.csv?team=${teamB.name}&days=30`);
    expect(csv.status).toBe(200);
    expect(csv.text).toBe(`day,team_id,key_id,network,method,credits,requests,upstream_units,upstream_usd,saved_units\r\n${today()},${teamB.id},${keyOfB.id},eth,eth_chainId,5,1,0,0,0\r\n`);
  });
});

describe('GET /v1/team: the quota forecast', () => {
  // A gateway of its own whose clock stands still where the test puts it: calls are charged, and
  // counted in hours, at the time it says.
  let time = Date.parse('2026-03-14T13:40:00Z');
  let f: TestGateway;
  let token: string;
  const overview = async () => {
    const response = await fetch(`${f.gateway.portalOrigin}/v1/team`, { headers: { authorization: `Bearer ${token}` } });
    expect(response.status).toBe(200);
    return (await response.json()) as any;
  };
  const calls = async (n: number) => {
    for (let id = 0; id < n; id += 1) await rpc(f.url('eth'), { jsonrpc: '2.0', id, method: 'eth_chainId' });
  };

  beforeAll(async () => {
    f = await startTestGateway({
      dailyCredits: 200,
      now: () => time,
      config: { portal: { enabled: true, host: '127.0.0.1', port: 0 } },
      networks: [{ id: 'eth', kind: 'evm', chainId: 1, upstreams: [{ id: 'none', url: 'http://127.0.0.1:9' }] }],
    });
    token = (await issueTeamToken(f.store, f.team.id, 'forecast')).secret;
  });
  afterAll(async () => {
    await f?.close();
  });

  it('nothing spent yet: lasts until the daily reset', async () => {
    expect((await overview()).forecast).toEqual({ state: 'lasts', creditsLastHour: 0, runsOutAt: null });
  });

  it('40 credits at 13:40 and 30 at 14:15: 60 in the last hour, the 130 left run out at 16:25 UTC; then exhausted', async () => {
    await calls(8); // eth_chainId costs 5
    time = Date.parse('2026-03-14T14:15:00Z');
    await calls(6);
    const at1415 = await overview();
    expect(at1415.today).toMatchObject({ day: '2026-03-14', used: 70, remaining: 130 });
    // Hour 14's 30 + 0.75 × hour 13's 40 = 60 an hour; 130 / 60 h = 2 h 10 min.
    expect(at1415.forecast).toEqual({ state: 'runs-out', creditsLastHour: 60, runsOutAt: '2026-03-14T16:25:00.000Z' });
    // An hour later nothing more was spent: 0.75 × hour 14's 30 = 22.5 an hour, 130 / 22.5 h = 5 h 46 min 40 s.
    time = Date.parse('2026-03-14T15:15:00Z');
    expect((await overview()).forecast).toEqual({ state: 'runs-out', creditsLastHour: 22.5, runsOutAt: '2026-03-14T21:01:40.000Z' });
    await calls(30);
    const spent = await overview();
    expect(spent.today).toMatchObject({ used: 200, remaining: 0 });
    expect(spent.forecast).toEqual({ state: 'exhausted', creditsLastHour: 130 + 22.5, runsOutAt: null });
  });
});

describe('cross-team access: another team’s ids are answered as ids that do not exist', () => {
  const routes: Array<{ method: string; path: (id: string) => string; body?: unknown }> = [
    { method: 'GET', path: (id) => `/v1/keys/${id}` },
    { method: 'PATCH', path: (id) => `/v1/keys/${id}`, body: { label: 'pwned' } },
    { method: 'POST', path: (id) => `/v1/keys/${id}/rotate`, body: {} },
    { method: 'POST', path: (id) => `/v1/keys/${id}/revoke` },
    { method: 'GET', path: (id) => `/v1/usage?key=${id}` },
    { method: 'GET', path: (id) => `/v1/usage.csv?key=${id}` },
  ];

  for (const route of routes) {
    it(`${route.method} ${route.path(':key')}`, async () => {
      const foreign = await team(tokenA, route.method, route.path(keyOfB.id), route.body);
      const missing = await team(tokenA, route.method, route.path('key_0000000000000000'), route.body);
      expect(foreign.status).toBe(404);
      expect(missing.status).toBe(404);
      // Same shape and wording: nothing tells a foreign id from a made-up one.
      expect(foreign.body).toEqual({ error: { code: 'not_found', message: `no key "${keyOfB.id}"` } });
      expect(missing.body).toEqual({ error: { code: 'not_found', message: 'no key "key_0000000000000000"' } });
      expect(foreign.text).not.toContain(teamB.id);
      expect(foreign.text).not.toContain('b-key');
    });
  }

  it("team-wide routes show only the caller's team: no names, ids or counts of others", async () => {
    for (const path of ['/v1/team', '/v1/keys', '/v1/usage?days=30', '/v1/usage.csv?days=30', '/v1/usage/hourly']) {
      const answer = await team(tokenA, 'GET', path);
      expect(answer.status).toBe(200);
      expect(answer.text).not.toContain(teamB.id);
      expect(answer.text).not.toContain(teamB.name);
      expect(answer.text).not.toContain(keyOfB.id);
    }
    // A team's token cannot name another team in the query either: the scope is the token's.
    const usage = await team(tokenA, 'GET', `/v1/usage?days=30&team=${teamB.id}`);
    expect(usage.body.teamId).toBe(teamA.id);
  });

  it("B's key is untouched by A's attempts", async () => {
    const key = await t.store.findKey(keyOfB.id);
    expect(key).toMatchObject({ label: 'b-key', revokedAt: null });
    expect((await rpc(t.url('eth', keyOfB.secret), { jsonrpc: '2.0', id: 5, method: 'eth_chainId' })).status).toBe(200);
  });
});

describe('page sessions', () => {
  it('sign-in sets an HTTP-only, SameSite=Strict cookie with an expiry; writes need the CSRF token and the same origin', async () => {
    const signIn = await team(undefined, 'POST', '/session', { token: tokenA });
    expect(signIn.status).toBe(200);
    const setCookie = signIn.headers.get('set-cookie')!;
    expect(setCookie).toMatch(/^tollgate_session=[^;]+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=43200$/);
    expect(signIn.text).not.toContain(tokenA);
    const cookie = setCookie.split(';')[0]!;
    const csrf = signIn.body.csrfToken as string;
    expect((await team(undefined, 'GET', '/session', undefined, { cookie })).body).toMatchObject({ signedIn: true, team: { id: teamA.id }, csrfToken: csrf });
    // Signed out is an answer, not an error (the page asks on every load).
    const signedOut = await team(undefined, 'GET', '/session');
    expect(signedOut.status).toBe(200);
    expect(signedOut.body).toEqual({ signedIn: false });

    expect((await team(undefined, 'POST', '/v1/keys', { label: 'x' }, { cookie })).status).toBe(403);
    expect((await team(undefined, 'POST', '/v1/keys', { label: 'x' }, { cookie, 'x-csrf-token': 'wrong' })).status).toBe(403);
    expect((await team(undefined, 'POST', '/v1/keys', { label: 'x' }, { cookie, 'x-csrf-token': csrf, origin: 'https://evil.example' })).status).toBe(403);
    expect((await team(undefined, 'POST', '/v1/keys', { label: 'x' }, { cookie, 'x-csrf-token': csrf, 'content-type': 'text/plain' })).status).toBe(415);
    const created = await team(undefined, 'POST', '/v1/keys', { label: 'from-page' }, { cookie, 'x-csrf-token': csrf, origin: portal });
    expect(created.status).toBe(201);
    await team(tokenA, 'POST', `/v1/keys/${created.body.key.id}/revoke`);

    // Another site cannot sign a browser in either.
    expect((await team(undefined, 'POST', '/session', { token: tokenA }, { origin: 'https://evil.example' })).status).toBe(403);

    // A forged or tampered cookie is nobody.
    const [name, value] = cookie.split('=') as [string, string];
    const tampered = `${name}=${Buffer.from(JSON.stringify({ k: tokenAId, t: teamB.id, e: Date.now() + 60_000 })).toString('base64url')}.${value.split('.')[1]}`;
    expect((await team(undefined, 'GET', '/v1/keys', undefined, { cookie: tampered })).status).toBe(401);

    const signOut = await team(undefined, 'DELETE', '/session', undefined, { cookie, 'x-csrf-token': csrf });
    expect(signOut.status).toBe(204);
    expect(signOut.headers.get('set-cookie')).toMatch(/^tollgate_session=; .*Max-Age=0/);
    expect((await team(undefined, 'GET', '/session', undefined, { cookie: tampered })).body).toEqual({ signedIn: false });
  });

  it('serves the page and its assets from the package with a strict CSP (no CDN)', async () => {
    const page = await fetch(`${portal}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    const html = await page.text();
    expect(html).not.toMatch(/https?:\/\//);
    const chart = await fetch(`${portal}/assets/chart.umd.min.js`);
    expect(chart.status).toBe(200);
    expect(await chart.text()).toContain('Chart');
  });
});
