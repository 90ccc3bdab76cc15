// Prometheus metrics (docs/metrics.md): scripted traffic through a real gateway,
// then the admin listener's /metrics parsed as Prometheus text and checked counter by counter.
// Exact values: every series below is fed only by the requests of this file.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import type { Team } from '../src/store/index.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type RpcItem, type ScriptedUpstream } from './helpers/scripted-upstream.js';

// The scripted upstreams in this file answer made-up blocks (only their hash is right), so block
// verification is off on its EVM networks: verification has its own suites (block-verification,
// right-answers), and this file tests something else.

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** Parses Prometheus text exposition format 0.0.4: `name{a="x",b="y"} value [timestamp]`. */
function parsePrometheus(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/.exec(line);
    if (match === null) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    const body = match[2] ?? '';
    const labelPattern = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*/gy;
    let consumed = 0;
    for (const label of body.matchAll(labelPattern)) {
      labels[label[1]!] = label[2]!.replace(/\\(.)/g, (_all, escaped: string) => (escaped === 'n' ? '\n' : escaped));
      consumed = label.index + label[0].length;
    }
    if (consumed !== body.length) throw new Error(`cannot parse the labels of: ${line}`);
    const raw = match[3]!;
    const value = raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw);
    if (Number.isNaN(value) && raw !== 'NaN') throw new Error(`bad value in: ${line}`);
    samples.push({ name: match[1]!, labels, value });
  }
  return samples;
}

function sameLabels(actual: Record<string, string>, expected: Record<string, string>): boolean {
  const keys = Object.keys(actual);
  return keys.length === Object.keys(expected).length && keys.every((key) => actual[key] === expected[key]);
}

const HASH_A = `0x${'a1'.repeat(32)}`;
const HASH_B = `0x${'b2'.repeat(32)}`;
const HASH_DOWN = `0x${'c3'.repeat(32)}`;

function call(method: string, params?: unknown, id: number | string = 1): Record<string, unknown> {
  return params === undefined ? { jsonrpc: '2.0', id, method } : { jsonrpc: '2.0', id, method, params };
}

/** A block with the hash that was asked for (so the gateway's hash check accepts it). */
function blockFor(item: unknown): unknown {
  const params = (item as RpcItem).params as [string, boolean];
  return { hash: params[0], number: '0x10', parentHash: `0x${'00'.repeat(32)}`, transactions: [] };
}

describe('GET /metrics after scripted traffic', () => {
  let tg: TestGateway;
  let flaky: ScriptedUpstream;
  let main: ScriptedUpstream;
  let dead: ScriptedUpstream;
  let poorTeam: Team;
  let poorKey: { id: string; secret: string };
  let samples: Sample[];
  let text: string;
  /** X-Credits-Cost of every response, per team id. */
  const chargedByTeam = new Map<string, number>();

  const addCharge = (teamId: string, headers: Headers): void => {
    chargedByTeam.set(teamId, (chargedByTeam.get(teamId) ?? 0) + Number(headers.get('x-credits-cost') ?? 'NaN'));
  };

  function value(name: string, labels: Record<string, string>): number | undefined {
    return samples.find((sample) => sample.name === name && sameLabels(sample.labels, labels))?.value;
  }

  beforeAll(async () => {
    flaky = await startScriptedUpstream({ kind: 'status', status: 500, body: 'upstream exploded' });
    main = await startScriptedUpstream((received) =>
      received.methods[0] === 'eth_call'
        ? { kind: 'rpc-error', code: 3, message: 'execution reverted' }
        : { kind: 'result', result: blockFor },
    );
    dead = await startScriptedUpstream({ kind: 'status', status: 503 });
    tg = await startTestGateway({
      networks: [
        {
          id: 'evm',
          kind: 'evm',
          verification: 'off',
          chainId: 31337,
          // flaky is first in config order: the first forwarded call tries it, fails, and fails over.
          // Neither serves `eth_madeUp*`: such a call is `-32601` (any other unlisted name would be forwarded).
          upstreams: [
            { id: 'flaky', url: flaky.url, methods: { deny: ['eth_madeUp*'] } },
            { id: 'main', url: main.url, methods: { deny: ['eth_madeUp*'] } },
          ],
          methods: { eth_call: 10 },
        },
        { id: 'down', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'dead', url: dead.url }] },
      ],
    });
    poorTeam = await tg.store.createTeam({ name: 'poor-team', dailyCredits: 50 });
    const issued = await issueKey(tg.store, { teamId: poorTeam.id });
    poorKey = { id: issued.key.id, secret: issued.secret };

    const evm = tg.url('evm');
    const team = tg.team.id;
    // Sequential on purpose: the order decides which upstream each forwarded call reaches.
    const chainId = await rpc(evm, call('eth_chainId'));
    expect(chainId.body.result).toBe('0x7a69');
    addCharge(team, chainId.headers);

    const miss = await rpc(evm, call('eth_getBlockByHash', [HASH_A, false]));
    expect(miss.status).toBe(200);
    expect(miss.body.result.hash).toBe(HASH_A);
    expect(miss.headers.get('x-cache')).toBe('miss');
    addCharge(team, miss.headers);

    const hit = await rpc(evm, call('eth_getBlockByHash', [HASH_A.toUpperCase().replace('0X', '0x'), false]));
    expect(hit.body.result.hash).toBe(HASH_A);
    expect(hit.headers.get('x-cache')).toBe('hit');
    addCharge(team, hit.headers);

    const invalid = await rpc(evm, call('eth_getBlockByHash', ['0x1234', false]));
    expect(invalid.body.error.code).toBe(-32602);
    addCharge(team, invalid.headers);

    const unknown = await rpc(evm, call('eth_madeUpMethod_9f3c', []));
    expect(unknown.body.error.code).toBe(-32601);
    addCharge(team, unknown.headers);

    const reverted = await rpc(evm, call('eth_call', [{ to: `0x${'11'.repeat(20)}`, data: '0x' }, 'latest']));
    expect(reverted.body.error).toEqual({ code: 3, message: 'execution reverted' });
    addCharge(team, reverted.headers);

    // Runs of alike items, then one more of the first kind: counted per item, not per run.
    const batchMethods = ['eth_chainId', 'eth_chainId', 'net_version', 'net_version', 'eth_chainId'];
    const batch = await rpc(evm, batchMethods.map((method, index) => call(method, undefined, `b${index}`)));
    expect(batch.body.map((reply: { result: unknown }) => reply.result)).toEqual(['0x7a69', '0x7a69', '31337', '31337', '0x7a69']);
    addCharge(team, batch.headers);

    const unauthorised = await rpc(tg.url('evm', 'tg_notARealKeyButLongEnough_0123456789'), call('eth_chainId'));
    expect(unauthorised.status).toBe(401);

    const poorUrl = tg.url('evm', poorKey.secret);
    const refused = await rpc(poorUrl, call('eth_getBlockByHash', [HASH_B, false]));
    expect(refused.status).toBe(402);
    expect(refused.body.error.data.reason).toBe('daily_credits_exhausted');
    addCharge(poorTeam.id, refused.headers);
    const cheap = await rpc(poorUrl, call('eth_chainId'));
    expect(cheap.status).toBe(200);
    addCharge(poorTeam.id, cheap.headers);

    const down = await rpc(tg.url('down'), call('eth_getBlockByHash', [HASH_DOWN, true]));
    expect(down.status).toBe(502);
    expect(down.body.error.data.attempts).toEqual([{ upstream: 'dead', reason: 'http_503' }]);
    addCharge(team, down.headers);

    const response = await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/plain/);
    text = await response.text();
    samples = parsePrometheus(text);
  }, 20_000);

  afterAll(async () => {
    await tg?.close();
    await Promise.all([flaky?.close(), main?.close(), dead?.close()]);
  });

  it('counts every call by network, method label, outcome and HTTP status', () => {
    const requests = samples.filter((sample) => sample.name === 'tollgate_requests_total');
    const table = requests.map(({ labels, value: count }) => ({ ...labels, count }));
    expect(table).toHaveLength(9);
    expect(table).toEqual(
      expect.arrayContaining([
        { network: 'evm', method: 'eth_chainId', outcome: 'ok', status: '200', count: 5 },
        { network: 'evm', method: 'net_version', outcome: 'ok', status: '200', count: 2 },
        { network: 'evm', method: 'eth_getBlockByHash', outcome: 'ok', status: '200', count: 2 },
        { network: 'evm', method: 'eth_getBlockByHash', outcome: 'invalid_params', status: '200', count: 1 },
        { network: 'evm', method: 'other', outcome: 'method_not_found', status: '200', count: 1 },
        { network: 'evm', method: 'eth_call', outcome: 'upstream_error', status: '200', count: 1 },
        { network: 'evm', method: 'none', outcome: 'invalid_key', status: '401', count: 1 },
        { network: 'evm', method: 'eth_getBlockByHash', outcome: 'credits_exhausted', status: '402', count: 1 },
        { network: 'down', method: 'eth_getBlockByHash', outcome: 'upstreams_failed', status: '502', count: 1 },
      ]),
    );
    // The unknown method name itself is never a label value.
    expect(text).not.toContain('eth_madeUpMethod_9f3c');
  });

  it('counts upstream attempts per upstream and outcome, with one duration per attempt', () => {
    const attempts = samples
      .filter((sample) => sample.name === 'tollgate_upstream_requests_total')
      .map(({ labels, value: count }) => ({ ...labels, count }));
    expect(attempts).toEqual(
      expect.arrayContaining([
        // The first forwarded call: flaky answered 500, main answered (failover).
        { network: 'evm', upstream: 'flaky', outcome: 'http_500', count: 1 },
        { network: 'evm', upstream: 'main', outcome: 'result', count: 1 },
        { network: 'evm', upstream: 'main', outcome: 'rpc_error', count: 1 },
        { network: 'down', upstream: 'dead', outcome: 'http_503', count: 1 },
      ]),
    );
    expect(attempts).toHaveLength(4);
    expect(flaky.calls).toHaveLength(1);
    expect(main.calls).toHaveLength(2);
    expect(value('tollgate_upstream_request_duration_seconds_count', { network: 'evm', upstream: 'flaky' })).toBe(1);
    expect(value('tollgate_upstream_request_duration_seconds_count', { network: 'evm', upstream: 'main' })).toBe(2);
    expect(value('tollgate_upstream_request_duration_seconds_count', { network: 'down', upstream: 'dead' })).toBe(1);
    // The circuit of no upstream opened (default threshold 5).
    expect(value('tollgate_upstream_healthy', { network: 'evm', upstream: 'flaky' })).toBe(1);
    expect(value('tollgate_upstream_healthy', { network: 'evm', upstream: 'main' })).toBe(1);
    expect(value('tollgate_upstream_healthy', { network: 'down', upstream: 'dead' })).toBe(1);
  });

  it('counts cache hits and misses, and reports the bytes held', () => {
    const blocks = { method: 'eth_getBlockByHash', tier: 'memory' };
    expect(value('tollgate_cache_lookups_total', { network: 'evm', ...blocks, result: 'hit' })).toBe(1);
    // The first HASH_A call, and the poor team's HASH_B call (looked up before credits are checked).
    expect(value('tollgate_cache_lookups_total', { network: 'evm', ...blocks, result: 'miss' })).toBe(2);
    expect(value('tollgate_cache_lookups_total', { network: 'down', ...blocks, result: 'miss' })).toBe(1);
    expect(value('tollgate_cache_upstream_calls_saved_total', { network: 'evm', method: 'eth_getBlockByHash', reason: 'memory' })).toBe(1);
    expect(value('tollgate_cache_entries', {})).toBe(1);
    expect(value('tollgate_cache_bytes', {})).toBeGreaterThan(JSON.stringify(blockFor({ params: [HASH_A, false] })).length);
    expect(value('tollgate_cache_evictions_total', {})).toBe(0);
  });

  it('counts credits per team id exactly as the responses charged them', () => {
    const team = tg.team.id;
    // eth_chainId ×4 + net_version ×2 (5 each), eth_getBlockByHash miss + hit (80 each), eth_call (10).
    expect(chargedByTeam.get(team)).toBe(5 + 80 + 80 + 0 + 0 + 10 + 25 + 0);
    expect(value('tollgate_credits_charged_total', { network: 'evm', method: 'eth_chainId', team })).toBe(20);
    expect(value('tollgate_credits_charged_total', { network: 'evm', method: 'net_version', team })).toBe(10);
    expect(value('tollgate_credits_charged_total', { network: 'evm', method: 'eth_getBlockByHash', team })).toBe(160);
    expect(value('tollgate_credits_charged_total', { network: 'evm', method: 'eth_call', team })).toBe(10);
    expect(value('tollgate_credits_charged_total', { network: 'evm', method: 'eth_chainId', team: poorTeam.id })).toBe(5);
    for (const [teamId, charged] of chargedByTeam) {
      const sum = samples
        .filter((sample) => sample.name === 'tollgate_credits_charged_total' && sample.labels.team === teamId)
        .reduce((total, sample) => total + sample.value, 0);
      expect(sum, teamId).toBe(charged);
    }
    // Nothing charged on the network whose upstream failed.
    expect(samples.filter((sample) => sample.name === 'tollgate_credits_charged_total' && sample.labels.network === 'down')).toEqual([]);
  });

  it('counts the 402 as a credit rejection', () => {
    const rejections = samples.filter((sample) => sample.name === 'tollgate_credit_rejections_total');
    expect(rejections.map(({ labels, value: count }) => ({ ...labels, count }))).toEqual([
      { network: 'evm', reason: 'daily_credits_exhausted', count: 1 },
    ]);
  });

  it('observes one request duration per HTTP request, labelled by method (batch for batches)', () => {
    const count = (network: string, method: string) => value('tollgate_request_duration_seconds_count', { network, method });
    expect(count('evm', 'eth_chainId')).toBe(2); // the two single eth_chainId requests
    expect(count('evm', 'batch')).toBe(1);
    expect(count('evm', 'eth_getBlockByHash')).toBe(4); // miss, hit, invalid params, 402
    expect(count('evm', 'other')).toBe(1);
    expect(count('evm', 'eth_call')).toBe(1);
    expect(count('evm', 'none')).toBe(1); // the 401
    expect(count('down', 'eth_getBlockByHash')).toBe(1);
    const total = samples
      .filter((sample) => sample.name === 'tollgate_request_duration_seconds_count')
      .reduce((sum, sample) => sum + sample.value, 0);
    expect(total).toBe(11);
    // The +Inf bucket equals the count.
    expect(value('tollgate_request_duration_seconds_bucket', { network: 'evm', method: 'batch', le: '+Inf' })).toBe(1);
    expect(value('tollgate_requests_in_flight', {})).toBe(0);
  });

  it('exposes only tollgate_ metrics, and never an API key, key id or upstream URL', () => {
    const names = new Set(samples.map((sample) => sample.name));
    expect([...names].filter((name) => !name.startsWith('tollgate_'))).toEqual([]);
    expect(names).toContain('tollgate_process_cpu_seconds_total');
    for (const secret of [tg.apiKey, tg.apiKey.slice(3), poorKey.secret, poorKey.secret.slice(3), 'tg_notARealKeyButLongEnough_0123456789']) {
      expect(text).not.toContain(secret);
    }
    for (const keyId of [tg.keyId, poorKey.id]) expect(text).not.toContain(keyId);
    for (const upstream of [flaky, main, dead]) expect(text).not.toContain(upstream.url);
    expect(text).not.toContain('127.0.0.1');
    const allowedLabels = new Set(['network', 'method', 'outcome', 'status', 'upstream', 'result', 'tier', 'team', 'reason', 'le', 'kind', 'type', 'space', 'source', 'version', 'major', 'minor', 'patch']);
    for (const sample of samples) for (const label of Object.keys(sample.labels)) expect(allowedLabels, `${sample.name}{${label}}`).toContain(label);
    const teamValues = new Set(samples.flatMap((sample) => (sample.labels.team === undefined ? [] : [sample.labels.team])));
    expect([...teamValues].sort()).toEqual([tg.team.id, poorTeam.id].sort());
  });

  it('answers 401 without the admin token, or with a wrong one', async () => {
    const missing = await fetch(`${tg.gateway.adminOrigin}/metrics`);
    expect(missing.status).toBe(401);
    expect(missing.headers.get('www-authenticate')).toBe('Bearer');
    expect(await missing.text()).not.toContain('tollgate_');
    const wrong = await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: 'Bearer not-the-admin-token-000' } });
    expect(wrong.status).toBe(401);
    const withKey = await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${tg.apiKey}` } });
    expect(withKey.status).toBe(401);
  });
});

describe('parsePrometheus', () => {
  it('reads names, escaped label values and special values', () => {
    expect(parsePrometheus('# HELP x y\n# TYPE x counter\nx_total{a="1",b="q\\"uote\\\\"} 3\ny 2.5\nz_bucket{le="+Inf"} +Inf\n')).toEqual([
      { name: 'x_total', labels: { a: '1', b: 'q"uote\\' }, value: 3 },
      { name: 'y', labels: {}, value: 2.5 },
      { name: 'z_bucket', labels: { le: '+Inf' }, value: Infinity },
    ]);
    expect(() => parsePrometheus('x{a=1} 2')).toThrow();
  });
});
