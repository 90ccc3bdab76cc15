// Regression tests for what a hostile client found (issue 18), one block per numbered defect:
// 1. deep nesting → 500 and a charge with no header; 2. unbounded params reaching upstreams and
// stalling the devnet; 3. charged without an answer; 4. secrets in logs; 5. log amplification;
// 6. ids that changed value; 7. slowloris bounds off by Node's 30 s check interval.
// A real gateway on loopback, scripted upstreams, raw TCP where fetch cannot say it.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { rpcServerOptions } from '../src/server/http-connections.js';
import { parseConfig } from '../src/config/load.js';
import { startSampleDasServer, type SampleDasServer } from '../src/devnet/sample-das/index.js';
import { CLI, ensureBuilt } from './helpers/build.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { postRequest, rawExchange, trickle } from './helpers/raw-http.js';
import { startScriptedUpstream, type RpcItem, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';

/** A valid Solana public key (32 zero bytes). */
const PUBKEY = '11111111111111111111111111111111';
const SLOW_UPSTREAM_MS = 200;

type LogLine = Record<string, unknown> & { msg: string };

function blockOrHex(item: unknown): unknown {
  const request = item as RpcItem;
  if (request.method === 'eth_getBlockByHash') return { hash: (request.params as string[])[0], number: '0x1', transactions: [] };
  return '0x1';
}

let hashCounter = 0;
const freshHash = (): string => `0x${(++hashCounter).toString(16).padStart(8, '0')}${'cd'.repeat(28)}`;

function deepObject(levels: number): string {
  return `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;
}

const upstreams: ScriptedUpstream[] = [];
const gateways: TestGateway[] = [];
let tg: TestGateway;
let evm: ScriptedUpstream;
let slow: ScriptedUpstream;
let das: ScriptedUpstream;

beforeAll(async () => {
  evm = await startScriptedUpstream({ kind: 'result', result: blockOrHex });
  slow = await startScriptedUpstream({ kind: 'result', result: blockOrHex, delayMs: SLOW_UPSTREAM_MS });
  das = await startScriptedUpstream({ kind: 'result', result: { total: 0, limit: 1, items: [] } });
  upstreams.push(evm, slow, das);
  tg = await startTestGateway({
    networks: [
      { id: 'evm', kind: 'evm', chainId: 1, upstreams: [{ id: 'evm-up', url: evm.url }], methods: { eth_call: 80 } },
      // Scripted blocks are not real blocks: only their hash field is checked here.
      { id: 'slow', kind: 'evm', chainId: 1, upstreams: [{ id: 'slow-up', url: slow.url }], verification: 'off' },
      { id: 'das', kind: 'asset', upstreams: [{ id: 'das-up', url: das.url }] },
    ],
  });
  gateways.push(tg);
});

afterAll(async () => {
  await Promise.all(gateways.map((gateway) => gateway.close()));
  await Promise.all(upstreams.map((upstream) => upstream.close()));
});

const today = (): string => new Date().toISOString().slice(0, 10);

/** Credits the ledger holds for the team today: settled usage and the day's total (settled + reserved). */
async function ledger(gateway: TestGateway): Promise<{ settled: number; used: number }> {
  const rows = await gateway.store.usage({ teamId: gateway.team.id, fromDay: today(), toDay: today() });
  const [peek] = await gateway.store.applyLedger([{ type: 'peek', teamId: gateway.team.id, day: today() }]);
  return { settled: rows.reduce((sum, row) => sum + row.credits, 0), used: peek!.teamUsed };
}

function logLines(gateway: TestGateway): LogLine[] {
  return gateway.logLines.map((line) => JSON.parse(line) as LogLine);
}

/** How many `request` lines (one per request answered or given up) the gateway has logged. */
function requestLineCount(gateway: TestGateway): number {
  return logLines(gateway).filter((line) => line.msg === 'request').length;
}

async function requestLine(gateway: TestGateway, requestId: string): Promise<LogLine> {
  await vi.waitFor(() => expect(logLines(gateway).some((line) => line.msg === 'request' && line.requestId === requestId)).toBe(true), { timeout: 5_000 });
  const lines = logLines(gateway).filter((line) => line.msg === 'request' && line.requestId === requestId);
  expect(lines).toHaveLength(1);
  return lines[0]!;
}

let requestCounter = 0;
const requestId = (label: string): string => `${label}-${++requestCounter}`;

function assetsCall(id: unknown, params: unknown): Record<string, unknown> {
  return { jsonrpc: '2.0', id, method: 'getAssetsByGroup', params };
}

describe('1. deep nesting: no recursion limit is reachable, one item never fails its batch', () => {
  it('getAssetsByGroup with options nested 5,000 levels deep → 200, -32602 naming the field, nothing forwarded or charged', async () => {
    const before = await ledger(tg);
    const calls = das.calls.length;
    const id = requestId('deep');
    const body = `{"jsonrpc":"2.0","id":1,"method":"getAssetsByGroup","params":{"groupKey":"collection","groupValue":"${PUBKEY}","options":${deepObject(5_000)}}}`;
    const r = await rpc(tg.url('das'), undefined, { rawBody: body, headers: { 'x-request-id': id } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ jsonrpc: '2.0', id: 1, error: { code: -32602 } });
    expect(r.body.error.message).toContain('options');
    expect(r.headers.get('x-credits-cost')).toBe('0');
    expect(das.calls.length).toBe(calls);
    expect(await ledger(tg)).toEqual(before);
    expect(await requestLine(tg, id)).toMatchObject({ status: 200, credits: 0 });
  });

  it.each([
    ['valid item first', true],
    ['deep item first', false],
  ])('in a batch (%s) the valid sibling is answered and charged 160; X-Credits-Cost, ledger and log line agree', async (_name, validFirst) => {
    const before = await ledger(tg);
    const id = requestId('deep-batch');
    const valid = JSON.stringify(assetsCall('valid', { groupKey: 'collection', groupValue: PUBKEY }));
    const deep = `{"jsonrpc":"2.0","id":"deep","method":"getAssetsByGroup","params":{"groupKey":"collection","groupValue":"${PUBKEY}","options":${deepObject(5_000)}}}`;
    const body = validFirst ? `[${valid},${deep}]` : `[${deep},${valid}]`;
    const r = await rpc(tg.url('das'), undefined, { rawBody: body, headers: { 'x-request-id': id } });
    expect(r.status).toBe(200);
    expect(r.body).toHaveLength(2);
    const byId = new Map<string, any>(r.body.map((reply: { id: string }) => [reply.id, reply]));
    expect(byId.get('valid').result).toEqual({ total: 0, limit: 1, items: [] });
    expect(byId.get('deep').error.code).toBe(-32602);
    expect(r.headers.get('x-credits-cost')).toBe('160');
    const after = await ledger(tg);
    expect(after.settled - before.settled).toBe(160);
    expect(after.used - before.used).toBe(160);
    expect(await requestLine(tg, id)).toMatchObject({ status: 200, credits: 160 });
  });

  it('an unexpected failure inside one batch item is that item\'s -32603; its sibling is answered, charged and in the header', async () => {
    // An operator who lifts the depth bound far past what JSON serialisation can take: the deep
    // item fails on its way upstream (a RangeError), the other item must not notice.
    const upstream = await startScriptedUpstream({ kind: 'result', result: '0x1' });
    upstreams.push(upstream);
    const lifted = await startTestGateway({
      config: { server: { host: '127.0.0.1', port: 0, maxParamsDepth: 100_000 } },
      networks: [{ id: 'evm', kind: 'evm', chainId: 1, upstreams: [{ id: 'u', url: upstream.url }], methods: { eth_call: 80 } }],
    });
    gateways.push(lifted);
    const id = requestId('internal');
    const deep = `{"jsonrpc":"2.0","id":2,"method":"eth_call","params":[${'['.repeat(50_000)}${']'.repeat(50_000)}]}`;
    const body = `[{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{"to":"0x0000000000000000000000000000000000000000"},"latest"]},${deep}]`;
    const r = await rpc(lifted.url('evm'), undefined, { rawBody: body, headers: { 'x-request-id': id } });
    expect(r.status).toBe(200);
    expect(r.body).toHaveLength(2);
    expect(r.body[0]).toEqual({ jsonrpc: '2.0', id: 1, result: '0x1' });
    expect(r.body[1]).toMatchObject({ jsonrpc: '2.0', id: 2, error: { code: -32603 } });
    expect(r.headers.get('x-credits-cost')).toBe('80');
    expect(await ledger(lifted)).toEqual({ settled: 80, used: 80 });
    expect(await requestLine(lifted, id)).toMatchObject({ status: 200, credits: 80 });
  });
});

describe('2. bounded parameters', () => {
  it('a 200,000-character cursor gets Cursor Validation Err at once, never reaches the upstream, and the message is short', async () => {
    const calls = das.calls.length;
    const cursor = '2'.repeat(200_000);
    const r = await rpc(tg.url('das'), assetsCall(1, { groupKey: 'collection', groupValue: PUBKEY, cursor }));
    expect(r.status).toBe(200);
    expect(r.body.error.code).toBe(-32000);
    expect(r.body.error.message).toMatch(/^Cursor Validation Err: 2+…? is invalid$/);
    expect(r.body.error.message.length).toBeLessThan(200);
    expect(das.calls.length).toBe(calls);
  });

  it.each([
    ['groupKey', { groupKey: 'c'.repeat(10_000), groupValue: PUBKEY }, /groupKey/],
    ['options', { groupKey: 'collection', groupValue: PUBKEY, options: { junk: 'x'.repeat(10_000) } }, /options/],
  ])('an oversized %s → -32602 naming it, not forwarded', async (_field, params, message) => {
    const calls = das.calls.length;
    const r = await rpc(tg.url('das'), assetsCall(1, params));
    expect(r.body.error.code).toBe(-32602);
    expect(r.body.error.message).toMatch(message);
    expect(r.body.error.message.length).toBeLessThan(200);
    expect(das.calls.length).toBe(calls);
  });

  it('an overlong groupValue or before is refused with a bounded Pubkey Validation Err', async () => {
    for (const params of [
      { groupKey: 'collection', groupValue: '3'.repeat(100_000) },
      { groupKey: 'collection', groupValue: PUBKEY, before: '3'.repeat(100_000) },
    ]) {
      const r = await rpc(tg.url('das'), assetsCall(1, params));
      expect(r.body.error.code).toBe(-32000);
      expect(r.body.error.message).toMatch(/^Pubkey Validation Err: 3+…? is invalid$/);
      expect(r.body.error.message.length).toBeLessThan(200);
    }
  });

  it('pass-through params larger than server.maxParamsBytes → -32602 for that item only', async () => {
    const upstream = await startScriptedUpstream({ kind: 'result', result: '0x1' });
    upstreams.push(upstream);
    const bounded = await startTestGateway({
      config: { server: { host: '127.0.0.1', port: 0, maxParamsBytes: 1_000 } },
      networks: [{ id: 'evm', kind: 'evm', chainId: 1, upstreams: [{ id: 'u', url: upstream.url }], methods: { eth_call: 80 } }],
    });
    gateways.push(bounded);
    const big = { jsonrpc: '2.0', id: 'big', method: 'eth_call', params: [{ data: `0x${'ab'.repeat(1_000)}` }, 'latest'] };
    const small = { jsonrpc: '2.0', id: 'small', method: 'eth_call', params: [{ data: '0xab' }, 'latest'] };
    const r = await rpc(bounded.url('evm'), [big, small]);
    expect(r.body[0]).toMatchObject({ id: 'big', error: { code: -32602 } });
    expect(r.body[0].error.message).toMatch(/params.*1000 bytes/);
    expect(r.body[1]).toEqual({ jsonrpc: '2.0', id: 'small', result: '0x1' });
    expect(upstream.calls).toHaveLength(1);
  });

  describe('the sample DAS fixture', () => {
    let fixture: SampleDasServer;
    beforeAll(async () => {
      fixture = await startSampleDasServer();
    });
    afterAll(async () => {
      await fixture?.close();
    });

    it('refuses a 40,000-character cursor without decoding it (it took 3.2 s, quadratic in the length)', async () => {
      const started = performance.now();
      const r = await rpc(fixture.url, assetsCall(1, { groupKey: 'collection', groupValue: fixture.dataset.collections[0]!.id, cursor: '2'.repeat(40_000) }));
      const tookMs = performance.now() - started;
      expect(r.body.error).toMatchObject({ code: -32000 });
      expect(r.body.error.message).toMatch(/^Cursor Validation Err: /);
      // A generous bound for a loaded machine: the rejection is a length check, the old decode took seconds.
      expect(tookMs).toBeLessThan(1_000);
    });
  });
});

describe('2. (devnet) a busy sample DAS upstream cannot stall the gateway', () => {
  let child: ChildProcess | undefined;
  let dataDir: string;
  beforeAll(ensureBuilt, 180_000);
  afterAll(async () => {
    if (child !== undefined && child.exitCode === null) {
      const exited = new Promise((resolve) => child!.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    if (dataDir !== undefined) rmSync(dataDir, { recursive: true, force: true });
  });

  it('the gateway answers /healthz at once while the fixture is busy building a batch of full pages', async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'tollgate-hostile-devnet-'));
    child = spawn(process.execPath, [CLI, 'devnet', '--json', '--port', '0', '--data-dir', dataDir], { stdio: ['ignore', 'pipe', 'pipe'] });
    const info = await new Promise<{ assetUpstreamUrl: string; adminUrl: string; collections: string[] }>((resolve, reject) => {
      let stdout = '';
      child!.stdout!.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        const line = stdout.split('\n').find((candidate) => candidate.startsWith('{'));
        if (line !== undefined) resolve(JSON.parse(line));
      });
      child!.once('exit', (code) => reject(new Error(`devnet exited with ${code}`)));
    });
    // A full page of a collection, many times over: most of a second of work for the fixture. The answer
    // is never read (the work is building it); the first byte says the fixture is done.
    const groupValue = info.collections[0]!;
    const batch = JSON.stringify(Array.from({ length: 80 }, (_, index) => assetsCall(index, { groupKey: 'collection', groupValue, limit: 1000, page: 1 })));
    const { port, pathname } = new URL(info.assetUpstreamUrl);
    const started = performance.now();
    const busy = new Promise<number>((resolve, reject) => {
      const socket = connect(Number(port), '127.0.0.1', () => socket.write(postRequest(pathname, batch)));
      socket.once('data', () => {
        resolve(performance.now() - started);
        socket.destroy();
      });
      socket.once('error', reject);
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const probes: number[] = [];
    let done = false;
    void busy.then(() => (done = true));
    while (!done) {
      const probeStart = performance.now();
      const health = await fetch(`${info.adminUrl}/healthz`);
      expect(health.status).toBe(200);
      probes.push(performance.now() - probeStart);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const busyMs = await busy;
    // Sharing the fixture's thread, a probe waited for the whole batch (485 ms of 561 ms): the
    // first probe would then end only with the batch, so there would be one probe, as long as the
    // batch. How long the batch takes is the machine's business; the probes are measured against it.
    expect(probes.length).toBeGreaterThanOrEqual(2);
    expect(Math.max(...probes)).toBeLessThan(busyMs / 2);
  }, 90_000);
});

describe('3. charged only for answers delivered', () => {
  const path = (): string => new URL(tg.url('slow')).pathname;

  it('a normal call on the slow network is charged 80 (control)', async () => {
    const before = await ledger(tg);
    const r = await rpc(tg.url('slow'), { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [freshHash(), false] });
    expect(r.status).toBe(200);
    expect((await ledger(tg)).settled - before.settled).toBe(80);
  });

  // Whether the call still goes upstream depends on when the gateway sees the client go (a
  // half-close or refused bytes can arrive with the body); either way nothing is charged.
  it.each([
    ['resets the connection 1 ms after sending', true, (id: string, body: string) => rawExchange(tg.gateway.rpcPort, [postRequest(path(), body, [`X-Request-Id: ${id}`])], { afterSend: (socket) => setTimeout(() => socket.resetAndDestroy(), 1) })],
    ['half-closes right after sending', false, (id: string, body: string) => rawExchange(tg.gateway.rpcPort, [postRequest(path(), body, [`X-Request-Id: ${id}`])], { afterSend: (socket) => socket.end() })],
  ])('a client that %s is refunded and logged as 499', async (_name, surelyForwarded, send) => {
    const before = await ledger(tg);
    const calls = slow.calls.length;
    const id = requestId('gone');
    await send(id, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [freshHash(), false] }));
    const line = await requestLine(tg, id);
    expect(line).toMatchObject({ status: 499, credits: 0 });
    // The reset comes while the upstream is answering: the gateway had an answer it could not deliver.
    if (surelyForwarded) expect(slow.calls.length).toBe(calls + 1);
    expect(await ledger(tg)).toEqual(before);
  });

  it('a client that sends garbage after its request gets its answer (charged), then a 400 for the garbage, then the close', async () => {
    // Node answered the garbage with a 400 at once and closed: the call, charged, was never delivered.
    const before = await ledger(tg);
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [freshHash(), false] });
    const exchange = await rawExchange(tg.gateway.rpcPort, [postRequest(path(), body), 'GARBAGE\r\n\r\n'], { timeoutMs: 5_000 });
    expect(exchange.responses.map((response) => response.status)).toEqual([200, 400]);
    expect(JSON.parse(exchange.responses[0]!.body)).toMatchObject({ id: 1, result: { number: '0x1' } });
    expect(exchange.closedByServer).toBe(true);
    expect((await ledger(tg)).settled - before.settled).toBe(80);
  });

  it('a batch whose client resets mid-call is refunded item by item, the local answer included', async () => {
    const before = await ledger(tg);
    const id = requestId('gone-batch');
    const body = JSON.stringify([
      { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [freshHash(), false] },
      { jsonrpc: '2.0', id: 2, method: 'eth_chainId' },
    ]);
    await rawExchange(tg.gateway.rpcPort, [postRequest(path(), body, [`X-Request-Id: ${id}`])], { afterSend: (socket) => setTimeout(() => socket.resetAndDestroy(), 1) });
    expect(await requestLine(tg, id)).toMatchObject({ status: 499, credits: 0 });
    expect(await ledger(tg)).toEqual(before);
  });
});

describe('4. no secret in any log line, whatever the request', () => {
  it('keys and the admin token sent in every wrong place stay out of the logs', async () => {
    const origin = tg.gateway.rpcOrigin;
    const key = tg.apiKey;
    const bare = key.slice(3);
    const tail = 'Zq7TailOfAKeyAfterASeparator9xY';
    const body = { jsonrpc: '2.0', id: 1, method: 'eth_chainId' };
    const linesBefore = requestLineCount(tg);
    const viaFetch: Array<[string, Record<string, string>?, unknown?]> = [
      [`/evm/v2/${bare}`],
      [`/${bare}`],
      [`/evm/v3/tg_abcdefghij/${tail}`],
      [`/evm/v3/tg_abcdefghij?${tail}`],
      [`/evm/v2/${TEST_ADMIN_TOKEN}`],
      [`/${TEST_ADMIN_TOKEN}`],
      [`/evm/v3/${key}?token=${TEST_ADMIN_TOKEN}`],
      [`/evm/v3/${key}`, { 'x-request-id': key }],
      [`/evm/v3/${key}`, { 'x-request-id': TEST_ADMIN_TOKEN }],
      [`/evm/v3/${key}`, { 'x-request-id': bare }],
      [`/evm/v3/${key}`, {}, { jsonrpc: '2.0', id: 1, method: key }],
      [`/evm/v3/${key}`, {}, [{ jsonrpc: '2.0', id: 1, method: bare }, { jsonrpc: '2.0', method: TEST_ADMIN_TOKEN }]],
    ];
    for (const [path, headers, payload] of viaFetch) {
      const r = await rpc(`${origin}${path}`, payload ?? body, { headers: headers ?? {} });
      expect(r.headers.get('x-request-id')).not.toContain(bare);
      expect(r.headers.get('x-request-id')).not.toBe(TEST_ADMIN_TOKEN);
    }
    // A fragment never leaves a browser; a raw client can send one.
    await rawExchange(tg.gateway.rpcPort, [postRequest(`/evm/v3/tg_abcdefghij#${tail}`, JSON.stringify(body))], { responses: 1 });
    // A request's line follows its answer.
    await until(() => requestLineCount(tg) >= linesBefore + viaFetch.length + 1, 'the log line of every request sent');
    for (const line of tg.logLines) {
      for (const secret of [key, bare, tail, TEST_ADMIN_TOKEN]) expect(line, `a log line contains "${secret}"`).not.toContain(secret);
    }
  });

  it('a key without its prefix as X-Request-Id is not kept, even on a request rejected before its key is read (found by the fuzz suite)', async () => {
    const bare = tg.apiKey.slice(3);
    const linesBefore = requestLineCount(tg);
    const requests = [[`/evm/v3/${tg.apiKey}`, 'GET'], ['/nowhere', 'POST'], [`/evm/v3/${tg.apiKey}`, 'POST']] as const;
    for (const [path, method] of requests) {
      const r = await rpc(`${tg.gateway.rpcOrigin}${path}`, { jsonrpc: '2.0', id: 1, method: 'eth_chainId' }, { method, headers: { 'x-request-id': bare, 'user-agent': `sdk/1.0 ${bare}` } });
      expect(r.headers.get('x-request-id')).not.toBe(bare);
    }
    // A request's line follows its answer.
    await until(() => requestLineCount(tg) >= linesBefore + requests.length, 'the log line of every request sent');
    for (const line of tg.logLines) expect(line).not.toContain(bare);
    // An ordinary client id, a UUID and a trace id are kept.
    for (const kept of ['client-trace.42:abc_DEF-9', '550e8400-e29b-41d4-a716-446655440000', '4bf92f3577b34da6a3ce929d0e0e4736']) {
      const r = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 1, method: 'eth_chainId' }, { headers: { 'x-request-id': kept } });
      expect(r.headers.get('x-request-id')).toBe(kept);
    }
  });

  it('a key issued after start-up never reaches a log line either (tg_ keys are recognised by shape)', async () => {
    const { issueKey } = await import('../src/admin/key-issuer.js');
    const { secret } = await issueKey(tg.store, { teamId: tg.team.id });
    await rpc(`${tg.gateway.rpcOrigin}/evm/v3/${tg.apiKey}`, { jsonrpc: '2.0', id: 1, method: 'eth_chainId' }, { headers: { 'x-request-id': secret } });
    await rpc(`${tg.gateway.rpcOrigin}/evm/v3/${tg.apiKey}`, { jsonrpc: '2.0', id: 1, method: secret });
    await rpc(`${tg.gateway.rpcOrigin}/nowhere/${secret}`, { jsonrpc: '2.0', id: 1, method: 'eth_chainId' });
    for (const line of tg.logLines) expect(line).not.toContain(secret);
  });
});

describe('found by the fuzz suite', () => {
  it('a pipelined request with Expect: 100-continue gets its response whole (Node put its 100 Continue inside it)', async () => {
    const path = new URL(tg.url('evm')).pathname;
    const first = postRequest(path, '[]');
    const second = postRequest(path, '{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}', ['Expect: 100-continue']);
    const third = postRequest(path, '{"jsonrpc":"2.0","id":3,"method":"eth_chainId"}');
    const before = await ledger(tg);
    const exchange = await rawExchange(tg.gateway.rpcPort, [Buffer.concat([first, second, third])], { responses: 3 });
    expect(exchange.responses.map((response) => response.status)).toEqual([200, 200, 200]);
    expect(JSON.parse(exchange.responses[1]!.body)).toEqual({ jsonrpc: '2.0', id: 2, result: '0x1' });
    // Nor does it close the connection after it, dropping (charged) answers pipelined behind it.
    expect(JSON.parse(exchange.responses[2]!.body)).toEqual({ jsonrpc: '2.0', id: 3, result: '0x1' });
    expect((await ledger(tg)).settled - before.settled).toBe(10);
  });

  it.each([
    ['a 413 (body over the limit)', `Content-Type: application/json\r\nContent-Length: ${8 * 1024 * 1024}`, 413],
    ["the client's own Connection: close on a request refused before its body is read (415)", `Content-Type: text/plain\r\nContent-Length: ${2 * 1024 * 1024}\r\nConnection: close`, 415],
  ])('a connection closed after %s is closed without a reset: the large answer pipelined before it arrives whole', async (_name, headers, status) => {
    // Closing a socket with unread bytes sends a reset, which discards what is still queued for
    // the client: here a charged 4 MB answer that a slow reader had not read yet.
    const big = await startScriptedUpstream({ kind: 'result', result: 'x'.repeat(4 * 1024 * 1024) });
    upstreams.push(big);
    const bigNet = await startTestGateway({ networks: [{ id: 'evm', kind: 'evm', chainId: 1, upstreams: [{ id: 'u', url: big.url }], methods: { eth_call: 80 } }] });
    gateways.push(bigNet);
    const path = new URL(bigNet.url('evm')).pathname;
    const first = postRequest(path, '{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{},"latest"]}');
    const closer = Buffer.concat([Buffer.from(`POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${headers}\r\n\r\n`), Buffer.alloc(2 * 1024 * 1024, 0x20)]);
    const exchange = await rawExchange(bigNet.gateway.rpcPort, [Buffer.concat([first, closer])], { timeoutMs: 10_000, readAfterMs: 500 });
    expect(exchange.responses.map((response) => response.status)).toEqual([200, status]);
    expect(exchange.responses[0]!.body.length).toBeGreaterThan(4 * 1024 * 1024);
    expect(await ledger(bigNet)).toEqual({ settled: 80, used: 80 });
  });

  it('bytes refused after pipelined requests are answered after their answers, not in front of them', async () => {
    // Anything after a `Connection: close` request is refused by Node's parser at once, while the
    // first request is still at its (slow) upstream. Its 400 used to go out first and the
    // connection closed: the client took the 400 for its first answer; that answer was lost.
    const before = await ledger(tg);
    const path = new URL(tg.url('slow')).pathname;
    const first = postRequest(path, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [freshHash(), false] }));
    const second = postRequest(path, '{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}', ['Connection: close']);
    const exchange = await rawExchange(tg.gateway.rpcPort, [Buffer.concat([first, second, Buffer.from('[]')])], { timeoutMs: 5_000 });
    // The client asked to close after its second request: what it sent after that gets no answer.
    expect(exchange.responses.map((response) => response.status)).toEqual([200, 200]);
    expect(JSON.parse(exchange.responses[0]!.body)).toMatchObject({ id: 1, result: { number: '0x1' } });
    expect(JSON.parse(exchange.responses[1]!.body)).toEqual({ jsonrpc: '2.0', id: 2, result: '0x1' });
    expect(exchange.closedByServer).toBe(true);
    expect((await ledger(tg)).settled - before.settled).toBe(85);
  });

  it('a pipelined request broken mid-body is answered 400 after the answer before it, which is delivered and charged', async () => {
    const before = await ledger(tg);
    const path = new URL(tg.url('evm')).pathname;
    const first = postRequest(path, '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}');
    const broken = `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n[1,2]\r\nzz\r\n`;
    const exchange = await rawExchange(tg.gateway.rpcPort, [Buffer.concat([first, Buffer.from(broken)])], { timeoutMs: 5_000 });
    expect(exchange.responses.map((response) => response.status)).toEqual([200, 400]);
    expect(JSON.parse(exchange.responses[0]!.body)).toEqual({ jsonrpc: '2.0', id: 1, result: '0x1' });
    expect((await ledger(tg)).settled - before.settled).toBe(5);
  });

  it('an answer pipelined behind a slow one, charged and queued when the client resets, is given back and logged 499', async () => {
    // The second answer is charged and handed to its response while the first is still at its
    // upstream; Node queues it until the first is written. The client then resets: Node never
    // emits 'close' (nor 'finish') for a response still queued on a connection that closed, so
    // the charge stayed and the request was never logged (fuzz seed 1116334154).
    let release: () => void = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    const gated = await startScriptedUpstream(async () => {
      await released;
      return { kind: 'result', result: '0x1' };
    });
    upstreams.push(gated);
    const net = await startTestGateway({ networks: [{ id: 'evm', kind: 'evm', chainId: 1, upstreams: [{ id: 'gated', url: gated.url }], methods: { eth_call: 80 } }] });
    gateways.push(net);
    const path = new URL(net.url('evm')).pathname;
    const slowCall = postRequest(path, '{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[{},"latest"]}', ['X-Request-Id: queued-first']);
    const localCall = postRequest(path, '{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}', ['X-Request-Id: queued-second']);
    let client: Socket | undefined;
    const exchange = rawExchange(net.gateway.rpcPort, [Buffer.concat([slowCall, localCall])], { afterSend: (socket) => (client = socket) });
    // The reset is the scenario: once the second answer is charged (and queued), never before.
    await until(async () => client !== undefined && (await ledger(net)).settled === 5, 'the second answer charged');
    client!.resetAndDestroy();
    expect((await exchange).responses).toEqual([]);
    release();
    const statusOf = (id: string) => logLines(net).filter((line) => line.msg === 'request' && line.requestId === id).map((line) => [line.status, line.credits]);
    await until(() => statusOf('queued-first').length > 0 && statusOf('queued-second').length > 0, 'a log line for both requests', 5_000);
    expect(statusOf('queued-first')).toEqual([[499, 0]]);
    expect(statusOf('queued-second')).toEqual([[499, 0]]);
    await until(async () => (await ledger(net)).used === 0, 'the queued answer given back');
    expect(await ledger(net)).toEqual({ settled: 0, used: 0 });
  });

  it('a request broken mid-body while its key is being looked up is answered once, and the gateway lives on', async () => {
    // The 400 went out through its response while the handler awaited the (unknown) key's lookup;
    // the lookup's 401 then tried to write a second answer: an unhandled rejection, the process gone
    // (fuzz seed 828946038, case 928). Which comes first depends on timing: a guard for both orders.
    const id = requestId('broken-mid-lookup');
    const broken = `POST /evm/v3/tg_${'U'.repeat(32)} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Request-Id: ${id}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n[1,2]\r\nzz\r\n`;
    const exchange = await rawExchange(tg.gateway.rpcPort, [broken], { timeoutMs: 5_000 });
    // The 401 comes first if the lookup finished before the broken chunk was read; then the 400.
    expect(exchange.responses.map((response) => response.status)).toEqual(exchange.responses.length === 2 ? [401, 400] : [400]);
    // The handler's own line comes once it is done, the lookup included (a second answer it
    // tried to write would have ended the process by then).
    await requestLine(tg, id);
    const alive = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 1, method: 'eth_chainId' });
    expect(alive.status).toBe(200);
  });

  it('an HTTP/1.1 request without Host gets a JSON-RPC 400, not Node\'s bare one', async () => {
    const body = '{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}';
    const request = `POST ${new URL(tg.url('evm')).pathname} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const exchange = await rawExchange(tg.gateway.rpcPort, [request], { responses: 1 });
    expect(exchange.responses[0]?.status).toBe(400);
    expect(JSON.parse(exchange.responses[0]!.body)).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
  });
});

describe('5. log lines are bounded', () => {
  it('a 1,000,000-character method name gives a log line under 2 KB', async () => {
    const id = requestId('long-method');
    const r = await rpc(tg.url('evm'), { jsonrpc: '2.0', id: 1, method: 'm'.repeat(1_000_000) }, { headers: { 'x-request-id': id } });
    expect(r.body.error.code).toBe(-32601);
    const line = tg.logLines.find((candidate) => candidate.includes(`"requestId":"${id}"`));
    expect(line).toBeDefined();
    expect(line!.length).toBeLessThan(2_000);
  });

  it('a batch of 100 methods of 10,000 characters each gives a log line under 4 KB', async () => {
    const id = requestId('long-batch');
    const batch = Array.from({ length: 100 }, (_, index) => ({ jsonrpc: '2.0', id: index, method: `${index}`.padEnd(10_000, 'x') }));
    const r = await rpc(tg.url('evm'), batch, { headers: { 'x-request-id': id } });
    expect(r.body).toHaveLength(100);
    const line = tg.logLines.find((candidate) => candidate.includes(`"requestId":"${id}"`));
    expect(line).toBeDefined();
    expect(line!.length).toBeLessThan(4_000);
  });
});

describe('6. ids are echoed as the bytes the client sent', () => {
  const ids = ['9007199254740993', '123456789012345678901234567890', '1e-400', '1e400', '-0', '1.0', '1E+2', '-12.500e-3', '"\\u0041\\n"', '"é"', 'null', '0'];

  it.each(ids)('id %s, single and in a batch', async (id) => {
    const single = await fetch(tg.url('evm'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"jsonrpc":"2.0","id":${id},"method":"eth_chainId"}` });
    const text = await single.text();
    expect(text).toBe(`{"jsonrpc":"2.0","id":${id},"result":"0x1"}`);
    const batch = await fetch(tg.url('evm'), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: `[{"id" : ${id} ,"jsonrpc":"2.0","method":"eth_chainId"},{"jsonrpc":"2.0","method":"eth_sign","id":${id}}]`,
    });
    const batchText = await batch.text();
    expect(batchText.startsWith(`[{"jsonrpc":"2.0","id":${id},"result":"0x1"},{"jsonrpc":"2.0","id":${id},"error":`)).toBe(true);
  });

  it('the last of duplicate id members is the one echoed (as JSON.parse reads it)', async () => {
    const r = await fetch(tg.url('evm'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":1,"method":"eth_chainId","id":"second"}' });
    expect(await r.text()).toBe('{"jsonrpc":"2.0","id":"second","result":"0x1"}');
  });

  it('ids that are not JSON-RPC ids (objects, arrays, booleans) are still refused with -32600 and id null', async () => {
    for (const id of ['{"a":1}', '[1]', 'true']) {
      const r = await fetch(tg.url('evm'), { method: 'POST', headers: { 'content-type': 'application/json' }, body: `{"jsonrpc":"2.0","id":${id},"method":"eth_chainId"}` });
      expect(await r.json()).toMatchObject({ id: null, error: { code: -32600 } });
    }
  });
});

describe('7. slow clients are cut off at the documented bounds, within a second', () => {
  let bounded: TestGateway;
  const HEADERS_MS = 1_000;
  const RECEIVE_MS = 2_000;
  beforeAll(async () => {
    bounded = await startTestGateway({
      config: { server: { host: '127.0.0.1', port: 0, headersTimeoutMs: HEADERS_MS, receiveTimeoutMs: RECEIVE_MS } },
      networks: [{ id: 'evm', kind: 'evm', chainId: 1, upstreams: [{ id: 'u', url: evm.url }] }],
    });
    gateways.push(bounded);
  });

  it('the defaults check connections at least every second (Node checks every 30 s unless told)', () => {
    const options = rpcServerOptions(parseConfig({ networks: [{ id: 'n', kind: 'evm', chainId: 1, baseUrls: ['*/n'], upstreams: [{ id: 'u', url: 'http://127.0.0.1:1' }] }], admin: {} }, {}, 'test').server);
    expect(options).toMatchObject({ headersTimeout: 30_000, requestTimeout: 60_000 });
    expect(options.connectionsCheckingInterval).toBeLessThanOrEqual(1_000);
  });

  it(`headers trickled one line every 100 ms: answered 408 and closed within a second after ${HEADERS_MS} ms`, async () => {
    const lines = Array.from({ length: 100 }, (_, index) => `X-Trickle-${index}: 1\r\n`);
    const exchange = await trickle(bounded.gateway.rpcPort, `POST ${new URL(bounded.url('evm')).pathname} HTTP/1.1\r\nHost: 127.0.0.1\r\n`, lines, 100, HEADERS_MS + 5_000);
    expect(exchange.closedByServer).toBe(true);
    expect(exchange.elapsedMs).toBeGreaterThanOrEqual(HEADERS_MS - 50);
    expect(exchange.elapsedMs).toBeLessThan(HEADERS_MS + 1_000);
    expect(exchange.responses[0]?.status).toBe(408);
    expect(JSON.parse(exchange.responses[0]!.body)).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } });
  });

  it(`a body trickled one byte every 100 ms: answered 408 and closed within a second after ${RECEIVE_MS} ms`, async () => {
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', padding: 'x'.repeat(200) });
    const head = `POST ${new URL(bounded.url('evm')).pathname} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nX-Request-Id: body-trickle\r\n\r\n`;
    const exchange = await trickle(bounded.gateway.rpcPort, head, body.split(''), 100, RECEIVE_MS + 5_000);
    expect(exchange.closedByServer).toBe(true);
    expect(exchange.elapsedMs).toBeGreaterThanOrEqual(RECEIVE_MS - 50);
    expect(exchange.elapsedMs).toBeLessThan(RECEIVE_MS + 1_000);
    expect(exchange.responses[0]?.status).toBe(408);
    expect(await requestLine(bounded, 'body-trickle')).toMatchObject({ status: 408, error: 'TG_ERR_REQUEST_TIMEOUT', credits: 0 });
  });
});
