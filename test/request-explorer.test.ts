// The request explorer end to end: two gateway replicas on one real redis-server, a team's
// requests through both, read back through the team API (team token) and the admin API. Newest
// first, at most 1,000, kept bounded in Redis; another team sees none of them; filters work; the
// records hold what happened and nothing that was sent.

import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { issueKey } from '../src/admin/key-issuer.js';
import { createRequestExplorer } from '../src/explorer/request-explorer.js';
import { createLogger } from '../src/logging/logger.js';
import { createSecretScrubber } from '../src/logging/redaction.js';
import { createRequestContext } from '../src/server/context.js';
import { issueTeamToken } from '../src/portal/team-token.js';
import { createRedisKeyspace } from '../src/store/redis-keyspace.js';
import { openStore, type Store, type Team } from '../src/store/index.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { useRedis } from './helpers/redis.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';

const redis = useRedis();
const KEY_PREFIX = `explorer-test:`;
/** What a client sends that must never be kept: an address in params, and calldata. */
const PARAM_ADDRESS = '0x8ba1f109551bd432803012645ac136ddd64dba72';
const CALLDATA = '0x70a08231000000000000000000000000f39fd6e51aad88f6f4ce6ab8827279cfffb92266';

interface Row {
  at: number;
  requestId: string;
  keyId: string;
  keyLabel: string | null;
  network: string;
  transport: string;
  method: string;
  methods?: string[];
  status: number;
  ok: boolean;
  credits: number;
  latencyMs: number;
  errorCode: number | null;
  errorMessage: string | null;
}

describe('the request explorer across two replicas on one Redis', () => {
  let storeA: Store;
  let storeB: Store;
  let replicaA: TestGateway;
  let replicaB: TestGateway;
  let upstream: ScriptedUpstream;
  let otherTeam: Team;
  let tokenA: string;
  let tokenOther: string;
  let otherKey: string;

  beforeAll(async () => {
    // An upstream that reverts every eth_call, quoting its params as nodes do.
    upstream = await startScriptedUpstream((call) =>
      call.methods.includes('eth_call')
        ? { kind: 'rpc-error', code: 3, message: `execution reverted: transfer to ${PARAM_ADDRESS} failed, data ${CALLDATA}` }
        : { kind: 'result', result: '0x10' },
    );
    const storeConfig = { driver: 'redis' as const, url: redis.url, keyPrefix: KEY_PREFIX, usageRetentionDays: 35, commandTimeoutMs: 5_000, failOpen: false };
    storeA = await openStore(storeConfig);
    storeB = await openStore(storeConfig);
    const networks = [{ id: 'eth', kind: 'evm', chainId: 1, hedge: { enabled: false }, upstreams: [{ id: 'node', url: upstream.url }] }];
    const config = {
      explorer: { flushIntervalMs: 20 },
      portal: { enabled: true, host: '127.0.0.1', port: 0 },
    };
    replicaA = await startTestGateway({ networks, config, store: storeA });
    replicaB = await startTestGateway({ networks, config: { ...config, portal: { enabled: false } }, store: storeB });
    tokenA = (await issueTeamToken(storeA, replicaA.team.id, 'explorer')).secret;
    otherTeam = replicaB.team;
    tokenOther = (await issueTeamToken(storeA, otherTeam.id, 'explorer')).secret;
    otherKey = replicaB.apiKey;
    await storeA.updateKey(replicaA.keyId, { label: 'backend' });
  }, 30_000);

  afterAll(async () => {
    await replicaA?.close();
    await replicaB?.close();
    await storeA?.close();
    await storeB?.close();
    await upstream?.close();
  });

  /** The team API of the portal, as the page calls it (a team token is also accepted as a bearer token). */
  async function teamApi(token: string, path: string): Promise<{ status: number; body: any }> {
    const response = await fetch(`${replicaA.gateway.portalOrigin}${path}`, { headers: { authorization: `Bearer ${token}` } });
    return { status: response.status, body: await response.json() };
  }
  async function adminApi(path: string): Promise<{ status: number; body: any }> {
    const response = await fetch(`${replicaA.gateway.adminOrigin}${path}`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    return { status: response.status, body: await response.json() };
  }
  const requestsOf = async (token: string, query = ''): Promise<Row[]> => {
    const answered = await teamApi(token, `/v1/requests${query}`);
    expect(answered.status).toBe(200);
    return answered.body.requests as Row[];
  };

  it("shows the team's requests through both replicas, newest first, at most 1,000, bounded in Redis", async () => {
    // The team's key works on both replicas: one store, one directory.
    const sent: string[] = [];
    for (let index = 0; index < 1_100; index += 1) {
      const replica = index % 2 === 0 ? replicaA : replicaB;
      const answered = await rpc(replica.url('eth', replicaA.apiKey), { jsonrpc: '2.0', id: index, method: 'eth_chainId' });
      expect(answered.status).toBe(200);
      sent.push(answered.headers.get('x-request-id')!);
    }
    const last = sent.slice(-2);
    await until(async () => {
      const shown = new Set((await requestsOf(tokenA, '?limit=5')).map((row) => row.requestId));
      return last.every((id) => shown.has(id));
    }, 'the last request of each replica in the explorer');

    const rows = await requestsOf(tokenA, '?limit=1000');
    expect(rows).toHaveLength(1_000);
    // Newest first by arrival, whichever replica flushed first.
    for (let index = 1; index < rows.length; index += 1) expect(rows[index]!.at).toBeLessThanOrEqual(rows[index - 1]!.at);
    const shown = new Set(rows.map((row) => row.requestId));
    // Requests sent one after another arrive in order: the newest 1,000 are the last 1,000 sent
    // (within the millisecond of the boundary, where arrival times tie).
    for (const id of sent.slice(110)) expect(shown.has(id)).toBe(true);
    for (const id of sent.slice(0, 90)) expect(shown.has(id)).toBe(false);
    // Both replicas' requests are there, half each (request ids start with each replica's own prefix).
    const byReplica = new Map<string, number>();
    for (const row of rows) byReplica.set(row.requestId.split('-')[0]!, (byReplica.get(row.requestId.split('-')[0]!) ?? 0) + 1);
    expect(byReplica.size).toBe(2);
    // 500 each, give or take the requests whose arrival tied at the boundary's millisecond.
    for (const count of byReplica.values()) expect(Math.abs(count - 500)).toBeLessThanOrEqual(10);
    expect(rows[0]).toMatchObject({ keyId: replicaA.keyId, keyLabel: 'backend', network: 'eth', transport: 'http', method: 'eth_chainId', status: 200, ok: true, credits: 5, errorCode: null });

    // Bounded where it is kept, not only where it is read.
    const client = new Redis(redis.url);
    try {
      expect(await client.zcard(createRedisKeyspace(KEY_PREFIX, false).requests(replicaA.team.id))).toBe(1_000);
    } finally {
      client.disconnect();
    }
    // The admin API reads the same, by team id or name; a limit past the bound is refused.
    const admin = await adminApi(`/v1/teams/${replicaA.team.name}/requests?limit=1000`);
    expect(admin.status).toBe(200);
    expect(admin.body.requests.map((row: Row) => row.requestId)).toEqual(rows.map((row) => row.requestId));
    expect((await adminApi(`/v1/teams/${replicaA.team.id}/requests?limit=1001`)).status).toBe(400);
    expect((await adminApi('/v1/teams/no-such-team/requests')).status).toBe(404);
  }, 120_000);

  it("another team's token sees none of them: its own list only, and 404 for the first team's path", async () => {
    const own = await rpc(replicaB.url('eth', otherKey), { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber' });
    expect(own.status).toBe(200);
    const ownId = own.headers.get('x-request-id')!;
    await until(async () => (await requestsOf(tokenOther)).some((row) => row.requestId === ownId), "the other team's own request");
    const theirs = await requestsOf(tokenOther, '?limit=1000');
    expect(theirs.map((row) => row.requestId)).toEqual([ownId]);
    expect(theirs[0]!.keyId).not.toBe(replicaA.keyId);

    const foreign = await teamApi(tokenOther, `/v1/teams/${replicaA.team.id}/requests`);
    expect(foreign.status).toBe(404);
    expect(JSON.stringify(foreign.body)).not.toContain(replicaA.keyId);
    const byName = await teamApi(tokenOther, `/v1/teams/${encodeURIComponent(replicaA.team.name)}/requests`);
    expect(byName.status).toBe(404);
    // Its own team by id, through the same path, works.
    const self = await teamApi(tokenOther, `/v1/teams/${otherTeam.id}/requests`);
    expect(self.status).toBe(200);
    expect(self.body.requests.map((row: Row) => row.requestId)).toEqual([ownId]);
    // Filtering by the first team's key through the other token finds nothing.
    expect(await requestsOf(tokenOther, `?key=${replicaA.keyId}`)).toEqual([]);
  });

  it('keeps errors with their code and a message cut of params; filters by key, method and status; never keeps params', async () => {
    const second = await issueKey(storeA, { teamId: replicaA.team.id, label: 'worker' });
    const reverted = await rpc(replicaB.url('eth', second.secret), { jsonrpc: '2.0', id: 7, method: 'eth_call', params: [{ to: PARAM_ADDRESS, data: CALLDATA }, 'latest'] });
    expect(reverted.body.error.code).toBe(3);
    // A 20-byte address where a 32-byte block hash belongs: refused by the gateway, uncharged.
    const invalid = await rpc(replicaA.url('eth', second.secret), { jsonrpc: '2.0', id: 8, method: 'eth_getBlockByHash', params: [PARAM_ADDRESS, false] });
    expect(invalid.body.error.code).toBe(-32602);
    const batch = await rpc(replicaA.url('eth', second.secret), [
      { jsonrpc: '2.0', id: 1, method: 'eth_chainId' },
      { jsonrpc: '2.0', id: 2, method: 'eth_blockNumber' },
    ]);
    expect(batch.status).toBe(200);
    const ids = [reverted, invalid, batch].map((answered) => answered.headers.get('x-request-id')!);
    await until(async () => {
      const shown = new Set((await requestsOf(tokenA, `?key=${second.key.id}`)).map((row) => row.requestId));
      return ids.every((id) => shown.has(id));
    }, 'the second key requests');

    const byKey = await requestsOf(tokenA, `?key=${second.key.id}`);
    expect(byKey.map((row) => row.requestId)).toEqual([...ids].reverse());
    expect(byKey.every((row) => row.keyLabel === 'worker')).toBe(true);
    const [batchRow, invalidRow, revertedRow] = byKey;
    expect(batchRow).toMatchObject({ method: 'batch', methods: ['eth_chainId', 'eth_blockNumber'], ok: true, status: 200 });
    expect(revertedRow).toMatchObject({ method: 'eth_call', ok: false, status: 200, errorCode: 3, credits: 80 });
    expect(revertedRow!.errorMessage).toContain('execution reverted: transfer to');
    expect(invalidRow).toMatchObject({ method: 'eth_getBlockByHash', ok: false, errorCode: -32602, credits: 0 });

    // Nothing the client sent is kept, in any record: not the address, not the calldata, not the key.
    const everything = JSON.stringify(await requestsOf(tokenA, '?limit=1000'));
    for (const sent of [PARAM_ADDRESS, PARAM_ADDRESS.slice(2), CALLDATA.slice(2, 40), second.secret, replicaA.apiKey]) expect(everything).not.toContain(sent);

    expect((await requestsOf(tokenA, `?key=${second.key.id}&status=error`)).map((row) => row.requestId)).toEqual([ids[1], ids[0]]);
    expect((await requestsOf(tokenA, `?key=${second.key.id}&status=ok`)).map((row) => row.requestId)).toEqual([ids[2]]);
    expect((await requestsOf(tokenA, '?method=eth_call')).map((row) => row.requestId)).toEqual([ids[0]]);
    expect((await requestsOf(tokenA, '?method=eth_blockNumber')).map((row) => row.requestId)).toEqual([ids[2]]);
    expect((await teamApi(tokenA, '/v1/requests?status=teapot')).status).toBe(400);
  });

  it('records WebSocket messages as requests of their own', async () => {
    const socket = new WebSocket(`${replicaA.gateway.rpcOrigin.replace('http', 'ws')}/eth/ws/v3/${replicaA.apiKey}`);
    const answer = await new Promise<{ id: number; result?: string }>((resolve, reject) => {
      socket.once('error', reject);
      socket.once('open', () => socket.send(JSON.stringify({ jsonrpc: '2.0', id: 42, method: 'eth_blockNumber' })));
      socket.once('message', (data) => resolve(JSON.parse(String(data))));
    });
    socket.close();
    expect(answer.result).toBe('0x10');
    await until(async () => (await requestsOf(tokenA, '?limit=20')).some((row) => row.transport === 'ws'), 'the WebSocket message in the explorer');
    const row = (await requestsOf(tokenA, '?limit=20')).find((candidate) => candidate.transport === 'ws')!;
    expect(row).toMatchObject({ method: 'eth_blockNumber', keyId: replicaA.keyId, ok: true, network: 'eth' });
  });
});

describe("the explorer's writer", () => {
  it("writes at most each team's newest 1,000 per batch, whatever the rate, and loses none of those", async () => {
    const store = await openStore({ driver: 'sqlite', path: ':memory:' });
    const appended: number[] = [];
    const counted = { flushed: 0, superseded: 0 };
    const explorer = createRequestExplorer({
      store: { appendRequests: (records) => (appended.push(records.length), store.appendRequests(records)), recentRequests: store.recentRequests },
      now: () => 1_800_000_000_000,
      scrubber: createSecretScrubber(),
      logger: createLogger({ level: 'silent' }),
      // Longer than the test: only flush() writes.
      flushIntervalMs: 3_600_000,
      observe: { flushed: (n) => void (counted.flushed += n), superseded: (n) => void (counted.superseded += n) },
    });
    const finished = (teamId: string, index: number) => {
      const ctx = createRequestContext(`${teamId}-${index}`);
      ctx.teamId = teamId;
      ctx.keyId = 'key_x';
      ctx.methods.push('eth_chainId');
      explorer.record(ctx);
    };
    for (let index = 0; index < 2_500; index += 1) finished('busy', index);
    for (let index = 0; index < 3; index += 1) finished('quiet', index);
    // A preflight (no method, no error) and a request of no team are not records.
    const preflight = createRequestContext('preflight');
    preflight.teamId = 'quiet';
    explorer.record(preflight);
    explorer.record(createRequestContext('no-team'));
    await explorer.flush();
    expect(appended).toEqual([1_003]);
    expect(counted).toEqual({ flushed: 1_003, superseded: 1_500 });
    const busy = await store.recentRequests({ teamId: 'busy', limit: 1_000 });
    expect(busy.map((row) => row.requestId).sort()).toEqual(Array.from({ length: 1_000 }, (_, index) => `busy-${1_500 + index}`).sort());
    expect((await store.recentRequests({ teamId: 'quiet', limit: 10 })).map((row) => row.requestId).sort()).toEqual(['quiet-0', 'quiet-1', 'quiet-2']);
    // Nothing queued: nothing written.
    await explorer.close();
    expect(appended).toEqual([1_003]);
    await store.close();
  });
});
