// API key authentication over real HTTP, the key cache's protection of the store,
// the absence of secrets from log lines, and the admin CLI issuing and revoking keys on a real
// SQLite file that a gateway then serves from.

import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashSecret } from '../src/auth/api-key.js';
import { issueKey } from '../src/admin/key-issuer.js';
import { openStore, type Store } from '../src/store/index.js';
import { CLI, ensureBuilt } from './helpers/build.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { refusedUrl } from './helpers/scripted-upstream.js';

const run = promisify(execFile);
const CHAIN_ID = { jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] };
/** Shaped like a real secret, so only a byte-for-byte check can tell whether it leaked. */
const UNKNOWN_KEY = 'tg_UnknownUnknownUnknownUnknown0';

let deadUpstream: string;
const gateways: TestGateway[] = [];

async function gatewayWith(options: { auth?: Record<string, unknown>; store?: Store; networks?: string[]; now?: () => number } = {}): Promise<TestGateway> {
  const tg = await startTestGateway({
    store: options.store,
    now: options.now,
    config: options.auth === undefined ? undefined : { auth: options.auth },
    networks: (options.networks ?? ['evm']).map((id, index) => ({
      id,
      kind: 'evm',
      chainId: 31337 + index,
      upstreams: [{ id: 'dead', url: deadUpstream, timeoutMs: 500 }],
    })),
  });
  gateways.push(tg);
  return tg;
}

beforeAll(async () => {
  deadUpstream = await refusedUrl();
});

afterAll(async () => {
  await Promise.all(gateways.splice(0).map((tg) => tg.close()));
});

describe('authentication over HTTP', () => {
  let tg: TestGateway;
  beforeAll(async () => {
    tg = await gatewayWith({ networks: ['evm', 'other'] });
  });

  it('the issued key works', async () => {
    const r = await rpc(tg.url('evm'), CHAIN_ID);
    expect(r.status).toBe(200);
    expect(r.body).toStrictEqual({ jsonrpc: '2.0', id: 1, result: '0x7a69' });
  });

  it.each(['/evm/v3', '/evm/v3/'])('missing key at %s → 401 -32016 with the expected URL shape', async (path) => {
    const r = await rpc(`${tg.gateway.rpcOrigin}${path}`, CHAIN_ID);
    expect(r.status).toBe(401);
    expect(r.body).toStrictEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32016, message: 'missing API key: use {base_url}/v3/<API_KEY>' },
    });
  });

  it('unknown key → 401 -32016 invalid API key', async () => {
    const r = await rpc(tg.url('evm', UNKNOWN_KEY), CHAIN_ID);
    expect(r.status).toBe(401);
    expect(r.body).toStrictEqual({ jsonrpc: '2.0', id: null, error: { code: -32016, message: 'invalid API key' } });
  });

  it('a key that differs from a real one by one character is unknown', async () => {
    const last = tg.apiKey.at(-1) === 'A' ? 'B' : 'A';
    const r = await rpc(tg.url('evm', `${tg.apiKey.slice(0, -1)}${last}`), CHAIN_ID);
    expect(r.status).toBe(401);
    expect(r.body.error.message).toBe('invalid API key');
  });

  it('expired key → 401 invalid API key; a key expiring in the future works', async () => {
    const expired = await issueKey(tg.store, { teamId: tg.team.id, expiresAt: Date.now() - 1_000 });
    const r = await rpc(tg.url('evm', expired.secret), CHAIN_ID);
    expect(r.status).toBe(401);
    expect(r.body.error).toStrictEqual({ code: -32016, message: 'invalid API key' });

    const future = await issueKey(tg.store, { teamId: tg.team.id, expiresAt: Date.now() + 3_600_000 });
    expect((await rpc(tg.url('evm', future.secret), CHAIN_ID)).status).toBe(200);
  });

  it('key not allowed on the network → 403 -32002; allowed on its own network', async () => {
    const limited = await issueKey(tg.store, { teamId: tg.team.id, allowedNetworks: ['other'] });
    const denied = await rpc(tg.url('evm', limited.secret), CHAIN_ID);
    expect(denied.status).toBe(403);
    expect(denied.body).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32002 } });
    expect(denied.body.error.message).toContain('evm');

    const allowed = await rpc(tg.url('other', limited.secret), CHAIN_ID);
    expect(allowed.status).toBe(200);
    expect(allowed.body.result).toBe('0x7a6a');
  });

  it('a batch with an unknown key is rejected as a whole with 401', async () => {
    const r = await rpc(tg.url('evm', UNKNOWN_KEY), [CHAIN_ID, { ...CHAIN_ID, id: 2 }]);
    expect(r.status).toBe(401);
    expect(Array.isArray(r.body)).toBe(false);
    expect(r.body.error.code).toBe(-32016);
  });
});

describe('revoked keys', () => {
  it('keyCacheTtlMs 200: a revoked key is accepted while its lookup is cached, rejected once it expires', async () => {
    // The gateway's clock, moved by the test: the key cache's TTL runs on it.
    let time = Date.UTC(2030, 0, 1);
    const tg = await gatewayWith({ auth: { keyCacheTtlMs: 200 }, now: () => time });
    expect((await rpc(tg.url('evm'), CHAIN_ID)).status).toBe(200);
    // Revoked in the store (as another replica or the CLI would), effective at once.
    expect(await tg.store.revokeKey(tg.keyId, time)).toBe(true);
    time += 100;
    expect((await rpc(tg.url('evm'), CHAIN_ID)).status, 'the cached lookup still says the key is valid').toBe(200);
    time += 250;
    const r = await rpc(tg.url('evm'), CHAIN_ID);
    expect(r.status).toBe(401);
    expect(r.body.error).toStrictEqual({ code: -32016, message: 'invalid API key' });
  });

  it('keyCacheTtlMs 0: a revoked key is rejected on the next request', async () => {
    const tg = await gatewayWith({ auth: { keyCacheTtlMs: 0 } });
    expect((await rpc(tg.url('evm'), CHAIN_ID)).status).toBe(200);
    await tg.store.revokeKey(tg.keyId, Date.now());
    const r = await rpc(tg.url('evm'), CHAIN_ID);
    expect(r.status).toBe(401);
    expect(r.body.error.message).toBe('invalid API key');
  });
});

describe('key cache', () => {
  it('a flood of 200 requests with one unknown key reads the store once', async () => {
    const inner = await openStore({ driver: 'sqlite', path: ':memory:' });
    const lookups: string[] = [];
    const store: Store = {
      ...inner,
      findKeyBySecretHash(secretHash) {
        lookups.push(secretHash);
        return inner.findKeyBySecretHash(secretHash);
      },
    };
    try {
      const tg = await gatewayWith({ store, auth: { keyCacheTtlMs: 60_000 } });
      const unknownHash = hashSecret(UNKNOWN_KEY);
      // Half at once (concurrent first lookups share one read), half afterwards (cached "not found").
      const first = await Promise.all(Array.from({ length: 100 }, () => rpc(tg.url('evm', UNKNOWN_KEY), CHAIN_ID)));
      const second = await Promise.all(Array.from({ length: 100 }, () => rpc(tg.url('evm', UNKNOWN_KEY), CHAIN_ID)));
      for (const r of [...first, ...second]) {
        expect(r.status).toBe(401);
        expect(r.body.error.message).toBe('invalid API key');
      }
      expect(lookups.filter((hash) => hash === unknownHash)).toHaveLength(1);
      // The real key is looked up once too, however often it is used.
      await Promise.all(Array.from({ length: 20 }, () => rpc(tg.url('evm'), CHAIN_ID)));
      expect(lookups.filter((hash) => hash === hashSecret(tg.apiKey))).toHaveLength(1);
    } finally {
      await Promise.all(gateways.splice(0).map((tg) => tg.close()));
      await inner.close();
    }
  });
});

describe('logs', () => {
  it('no log line carries a secret or an unknown key; each request line names requestId, network, status, keyId, teamId', async () => {
    const tg = await gatewayWith();
    const escaped = encodeURIComponent(tg.apiKey).replace(/_/g, '%5F');
    const origin = tg.gateway.rpcOrigin;
    const ok = await rpc(tg.url('evm'), CHAIN_ID);
    const failed = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 2, method: 'eth_getBlockByHash', params: [`0x${'11'.repeat(32)}`, false] });
    // Not a method name: -32601 without an upstream call (a name such as `foo` would be forwarded at the unlisted price).
    const unknownMethod = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 3, method: 'foo bar' });
    const badParams = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 4, method: 'eth_getBlockByHash', params: [tg.apiKey, false] });
    const unknownKey = await rpc(tg.url('evm', UNKNOWN_KEY), CHAIN_ID);
    const missingKey = await rpc(`${origin}/evm/v3`, CHAIN_ID);
    const withQuery = await rpc(`${tg.url('evm')}?x=1`, CHAIN_ID);
    const escapedKey = await rpc(`${origin}/evm/v3/${escaped}`, CHAIN_ID);
    const wrongVersion = await rpc(`${origin}/evm/v2/${tg.apiKey}`, CHAIN_ID);
    const wrongVersionEscaped = await rpc(`${origin}/evm/v2/${escaped}`, CHAIN_ID);
    const unknownPrefix = await rpc(`${origin}/nope/v3/${UNKNOWN_KEY}`, CHAIN_ID);
    const get = await rpc(tg.url('evm'), undefined, { method: 'GET' });
    expect(
      [ok, failed, unknownMethod, badParams, unknownKey, missingKey, withQuery, escapedKey, wrongVersion, wrongVersionEscaped, unknownPrefix, get].map(
        (r) => r.status,
      ),
    ).toEqual([200, 502, 200, 200, 401, 401, 200, 200, 404, 404, 404, 405]);

    // Log lines are written asynchronously after the response.
    await expect.poll(() => tg.logLines.filter((line) => line.includes('"msg":"request"')).length).toBeGreaterThanOrEqual(12);
    const all = tg.logLines.join('\n');
    for (const secret of [tg.apiKey, escaped, UNKNOWN_KEY, hashSecret(tg.apiKey), tg.apiKey.slice(3)]) {
      expect(all).not.toContain(secret);
    }

    const lineOf = (requestId: string | null) => {
      const line = tg.logLines.map((text) => JSON.parse(text) as Record<string, unknown>).find((entry) => entry.requestId === requestId && entry.msg === 'request');
      expect(line, `log line of ${requestId}`).toBeDefined();
      return line!;
    };
    const okLine = lineOf(ok.headers.get('x-request-id'));
    expect(okLine).toMatchObject({ network: 'evm', status: 200, keyId: tg.keyId, teamId: tg.team.id, methods: ['eth_chainId'] });
    expect(okLine.path).toBe('/evm/v3/[redacted]');
    const failedLine = lineOf(failed.headers.get('x-request-id'));
    expect(failedLine).toMatchObject({ network: 'evm', status: 502, keyId: tg.keyId, teamId: tg.team.id, error: 'TG_ERR_UPSTREAMS_FAILED' });
    const unknownLine = lineOf(unknownKey.headers.get('x-request-id'));
    expect(unknownLine).toMatchObject({ network: 'evm', status: 401, error: 'TG_ERR_INVALID_KEY' });
    expect(unknownLine.keyId).toBeUndefined();
    expect(unknownLine.teamId).toBeUndefined();
  });
});

describe('admin CLI on a SQLite file, served by a gateway', () => {
  const cli = CLI;
  let dir: string;
  let db: string;

  beforeAll(async () => {
    await ensureBuilt();
    dir = await mkdtemp(join(tmpdir(), 'tollgate-auth-'));
    db = join(dir, 't.db');
  }, 120_000);

  afterAll(async () => {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  const tollgate = async (...args: string[]): Promise<string> => (await run(process.execPath, [cli, '--db', db, ...args])).stdout;

  it('teams create, keys create (secret once), keys list (never the secret), keys revoke; the gateway follows', async () => {
    const team = JSON.parse(await tollgate('teams', 'create', 'acme', '--daily-credits', '1000')) as { id: string; name: string; dailyCredits: number };
    expect(team).toMatchObject({ name: 'acme', dailyCredits: 1000 });

    const created = JSON.parse(await tollgate('keys', 'create', '--team', 'acme', '--label', 'ci')) as { id: string; teamId: string; secret: string };
    expect(created.secret).toMatch(/^tg_[A-Za-z0-9_-]{32}$/);
    expect(created).toMatchObject({ teamId: team.id, label: 'ci', revokedAt: null });

    const listed = await tollgate('keys', 'list');
    expect(listed).not.toContain(created.secret);
    expect(listed).not.toContain(created.secret.slice(3));
    expect(listed).not.toContain(hashSecret(created.secret));
    const keys = JSON.parse(listed) as Array<Record<string, unknown>>;
    expect(keys).toHaveLength(1);
    expect(keys[0]).toMatchObject({ id: created.id, teamId: team.id, revokedAt: null });
    expect(Object.keys(keys[0]!)).not.toContain('secret');
    expect(Object.keys(keys[0]!)).not.toContain('secretHash');

    const store = await openStore({ driver: 'sqlite', path: db });
    try {
      const tg = await gatewayWith({ store, auth: { keyCacheTtlMs: 0 } });
      const before = await rpc(tg.url('evm', created.secret), CHAIN_ID);
      expect(before.status).toBe(200);
      expect(before.body.result).toBe('0x7a69');

      const revoked = await tollgate('keys', 'revoke', created.id);
      expect(JSON.parse(revoked)).toMatchObject({ id: created.id });
      expect(revoked).not.toContain(created.secret);
      const afterList = JSON.parse(await tollgate('keys', 'list', '--team', 'acme')) as Array<{ id: string; revokedAt: number | null }>;
      expect(afterList.find((key) => key.id === created.id)?.revokedAt).toEqual(expect.any(Number));

      const after = await rpc(tg.url('evm', created.secret), CHAIN_ID);
      expect(after.status).toBe(401);
      expect(after.body.error).toStrictEqual({ code: -32016, message: 'invalid API key' });
      expect(tg.logLines.join('\n')).not.toContain(created.secret);
    } finally {
      await Promise.all(gateways.splice(0).map((tg) => tg.close()));
      await store.close();
    }
  }, 60_000);

  it('revoking an unknown key id fails with exit code 2', async () => {
    await expect(tollgate('keys', 'revoke', 'key_doesnotexist')).rejects.toMatchObject({ code: 2 });
  });
});
