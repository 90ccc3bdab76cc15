// Operations (README, Operations): health and readiness probes, SIGTERM drain of the real
// `tollgate serve` process, and config reload (SIGHUP on the process, `POST /v1/reload` in
// process): new upstreams and costs take effect for the next request, a broken file is rejected and
// the running config keeps serving, and requests in flight during a reload complete.

import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Writable } from 'node:stream';
import { stringify as toYaml } from 'yaml';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { loadConfigFile } from '../src/config/load.js';
import { startGateway, type RunningGateway } from '../src/gateway.js';
import { createLogger } from '../src/logging/logger.js';
import { openStore, type Store } from '../src/store/index.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { CLI, ROOT, ensureBuilt } from './helpers/build.js';
import { killSpawned, spawnGateway } from './helpers/spawn-gateway.js';
import { until } from './helpers/until.js';
import { startScriptedUpstream, type RpcItem, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';

// The scripted upstreams in this file answer made-up blocks (only their hash is right), so block
// verification is off on its EVM networks: verification has its own suites (block-verification,
// right-answers), and this file tests something else.

const run = promisify(execFile);
const ADMIN_TOKEN = 'ops-admin-token-0123456789abcdef';

const upstreams: ScriptedUpstream[] = [];
async function scripted(behaviour: Parameters<typeof startScriptedUpstream>[0]): Promise<ScriptedUpstream> {
  const upstream = await startScriptedUpstream(behaviour);
  upstreams.push(upstream);
  return upstream;
}

const tmpDirs: string[] = [];
function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-ops-'));
  tmpDirs.push(dir);
  return dir;
}

afterAll(async () => {
  await Promise.all(upstreams.map((upstream) => upstream.close()));
  for (const dir of tmpDirs) rmSync(dir, { recursive: true, force: true });
});

let nextHash = 1;
/** A fresh block hash per call, so the block cache never answers in place of an upstream. */
function freshHash(): string {
  return `0x${(nextHash++).toString(16).padStart(64, '0')}`;
}

function getBlock(hash = freshHash(), id: unknown = 1): Record<string, unknown> {
  return { jsonrpc: '2.0', id, method: 'eth_getBlockByHash', params: [hash, false] };
}

/** A block echoing the requested hash (the gateway rejects any other). */
function blockResult(delayMs?: number): ScriptedBehaviour {
  return {
    kind: 'result',
    result: (item: unknown) => ({ hash: ((item as RpcItem).params as string[])[0], number: '0x2a', transactions: [] }),
    ...(delayMs === undefined ? {} : { delayMs }),
  };
}

/** An EVM network config section served at `*\/<id>`. */
function evmNetwork(upstreamUrls: Array<{ id: string; url: string }>, methods: Record<string, number> = {}): Record<string, unknown> {
  return { id: 'evm', kind: 'evm', verification: 'off', chainId: 31337, baseUrls: ['*/evm'], upstreams: upstreamUrls, methods };
}

describe('health and readiness', () => {
  let tg: TestGateway;

  beforeAll(async () => {
    const good = await scripted(blockResult());
    const failing = await scripted({ kind: 'status', status: 500 });
    tg = await startTestGateway({
      networks: [
        { id: 'healthy-net', kind: 'evm', verification: 'off', chainId: 1, upstreams: [{ id: 'good', url: good.url }] },
        {
          id: 'flaky-net',
          kind: 'evm',
          verification: 'off',
          chainId: 1,
          upstreams: [{ id: 'always-500', url: failing.url }],
          circuitBreaker: { failureThreshold: 2, cooldownMs: 60_000 },
        },
      ],
    });
  });

  afterAll(async () => {
    await tg?.close();
  });

  it('/healthz and /readyz answer 200 without a token while every network has a closed circuit', async () => {
    const health = await fetch(`${tg.gateway.adminOrigin}/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toEqual({ status: 'ok' });
    const ready = await fetch(`${tg.gateway.adminOrigin}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready', draining: false, store: true, networks: { 'healthy-net': true, 'flaky-net': true } });
  });

  it('/readyz is 503 naming the network once its only upstream circuit opens; /healthz stays 200', async () => {
    for (let attempt = 0; attempt < 2; attempt++) {
      const failed = await rpc(tg.url('flaky-net'), getBlock());
      expect(failed.status).toBe(502);
    }
    const ready = await fetch(`${tg.gateway.adminOrigin}/readyz`);
    expect(ready.status).toBe(503);
    const body = (await ready.json()) as { status: string; networks: Record<string, boolean> };
    expect(body).toMatchObject({ status: 'not ready', networks: { 'healthy-net': true, 'flaky-net': false } });
    expect((await fetch(`${tg.gateway.adminOrigin}/healthz`)).status).toBe(200);

    // The open circuit is skipped: no attempt, 503, nothing charged.
    const skipped = await rpc(tg.url('flaky-net'), getBlock());
    expect(skipped.status).toBe(503);
    expect(skipped.body.error.data.attempts).toEqual([{ upstream: 'always-500', reason: 'circuit_open' }]);
    expect(skipped.headers.get('x-credits-cost')).toBe('0');
    const healthy = await rpc(tg.url('healthy-net'), getBlock());
    expect(healthy.status).toBe(200);

    const metrics = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    expect(metrics).toContain('tollgate_upstream_healthy{network="flaky-net",upstream="always-500"} 0');
    expect(metrics).toContain('tollgate_upstream_healthy{network="healthy-net",upstream="good"} 1');
  });
});

// ---------------------------------------------------------------------------------------------
// The real process: `node dist/cli.js serve --config <file>`.


/** A team and key in a fresh SQLite file, made with the CLI's admin verbs. */
async function provision(dir: string): Promise<{ db: string; apiKey: string }> {
  const db = join(dir, 'gw.db');
  await run(process.execPath, [CLI, '--db', db, 'teams', 'create', 'ops', '--daily-credits', '1000000'], { cwd: ROOT });
  const { stdout } = await run(process.execPath, [CLI, '--db', db, 'keys', 'create', '--team', 'ops'], { cwd: ROOT });
  return { db, apiKey: (JSON.parse(stdout) as { secret: string }).secret };
}

function gatewayYaml(db: string, networks: Array<Record<string, unknown>>, extra: Record<string, unknown> = {}): string {
  return toYaml({
    server: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN },
    store: { driver: 'sqlite', path: db },
    networks,
    ...extra,
  });
}

afterEach(async () => {
  // A failed test must not leave a gateway running.
  await killSpawned();
});

function connectionError(origin: string): Promise<string | undefined> {
  const { hostname, port } = new URL(origin);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname, port: Number(port) });
    socket.once('connect', () => {
      socket.destroy();
      resolve(undefined);
    });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code));
  });
}

describe('tollgate serve (the real process)', () => {
  /** One SQLite file with a team and key, shared by the processes below (one at a time). */
  let db: string;
  let apiKey: string;
  beforeAll(async () => {
    await ensureBuilt();
    ({ db, apiKey } = await provision(tempDir()));
  }, 120_000);

  it('drains on SIGTERM: the in-flight request completes, /readyz is 503, new connections are refused, exit 0', async () => {
    const dir = tempDir();
    const slow = await scripted(blockResult(1_500));
    const configPath = join(dir, 'gw.yaml');
    writeFileSync(configPath, gatewayYaml(db, [evmNetwork([{ id: 'slow', url: slow.url }])]));
    const gateway = await spawnGateway(configPath);
    const url = `${gateway.rpcOrigin}/evm/v3/${apiKey}`;
    expect((await fetch(`${gateway.adminOrigin}/readyz`)).status).toBe(200);

    const hash = freshHash();
    const inFlight = rpc(url, getBlock(hash, 'in-flight'));
    let answered: number | undefined;
    void inFlight.then(() => (answered = Date.now()));
    await until(() => slow.calls.length === 1, 'the upstream call');
    gateway.child.kill('SIGTERM');

    // Readiness flips at once, while the admin listener stays up for the in-flight request's sake.
    const readyStatuses: number[] = [];
    await until(async () => {
      try {
        readyStatuses.push((await fetch(`${gateway.adminOrigin}/readyz`)).status);
      } catch {
        readyStatuses.push(-1); // the admin listener is already closed
      }
      return readyStatuses.at(-1) !== 200 || answered !== undefined;
    }, '/readyz leaving 200');
    expect(answered, 'the in-flight request was still running when readiness changed').toBeUndefined();
    expect(readyStatuses.at(-1)).toBe(503);
    // The RPC listener stopped accepting at the same moment.
    expect(await connectionError(gateway.rpcOrigin)).toBe('ECONNREFUSED');

    const response = await inFlight;
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ jsonrpc: '2.0', id: 'in-flight', result: { hash } });
    const answeredAt = Date.now();
    const { code, signal } = await gateway.exited;
    expect({ code, signal }).toEqual({ code: 0, signal: null });
    // Once the last request is answered the process goes; the client's keep-alive connection
    // must not hold the drain open until server.drainTimeoutMs (25 s by default).
    expect(Date.now() - answeredAt).toBeLessThan(8_000);
    expect(gateway.lines.some((line) => line.msg === 'request' && line.status === 200)).toBe(true);
    expect(gateway.output()).not.toContain(apiKey);
  }, 20_000);

  it('reloads on SIGHUP: a new upstream and a new cost serve the next request; a broken file is rejected and the old config keeps serving', async () => {
    const dir = tempDir();
    const first = await scripted(blockResult());
    const added = await scripted(blockResult());
    const configPath = join(dir, 'gw.yaml');
    const v1 = gatewayYaml(db, [evmNetwork([{ id: 'first', url: first.url }])]);
    const v2 = gatewayYaml(db, [evmNetwork([{ id: 'first', url: first.url }, { id: 'added', url: added.url }], { eth_getBlockByHash: 40 })]);
    writeFileSync(configPath, v1);
    const gateway = await spawnGateway(configPath);
    const url = `${gateway.rpcOrigin}/evm/v3/${apiKey}`;

    const before = await rpc(url, getBlock());
    expect(before.status).toBe(200);
    expect(before.headers.get('x-credits-cost')).toBe('80');
    expect(first.calls).toHaveLength(1);

    // From now on only the added upstream can answer.
    first.setBehaviour({ kind: 'status', status: 500 });
    writeFileSync(configPath, v2);
    gateway.child.kill('SIGHUP');
    await gateway.waitForLine((line) => line.msg === 'config reloaded: networks, upstreams and costs', 'config reloaded');
    const after = await rpc(url, getBlock());
    expect(after.status).toBe(200);
    expect(after.headers.get('x-credits-cost')).toBe('40');
    expect(added.calls).toHaveLength(1);
    expect(added.calls[0]!.methods).toEqual(['eth_getBlockByHash']);

    const brokenFiles = [
      { name: 'invalid YAML', text: 'networks:\n  - id: evm\n    kind: [evm\n', message: /not valid YAML/ },
      { name: 'an unknown key', text: v2.replace('kind: evm', 'kind: evm\n    upstreamz: []'), message: /networks\.0\.upstreamz: unknown key/ },
    ];
    for (const [index, broken] of brokenFiles.entries()) {
      writeFileSync(configPath, broken.text);
      gateway.child.kill('SIGHUP');
      const rejected = await gateway.waitForLine(
        (line) => line.msg === 'config reload rejected; the running config stays' && gateway.lines.filter((l) => l.msg === line.msg).indexOf(line) === index,
        `reload rejected (${broken.name})`,
      );
      expect(rejected.level).toBe('error');
      expect(String((rejected.err as { message?: string }).message)).toMatch(broken.message);
      const still = await rpc(url, getBlock());
      expect(still.status, broken.name).toBe(200);
      expect(still.headers.get('x-credits-cost'), broken.name).toBe('40');
      expect(added.calls, broken.name).toHaveLength(2 + index);
    }
    expect(gateway.child.exitCode).toBeNull();

    gateway.child.kill('SIGTERM');
    expect((await gateway.exited).code).toBe(0);
  }, 20_000);
});

// ---------------------------------------------------------------------------------------------
// In process: `POST /v1/reload` on a gateway started with `loadConfig`.

interface ReloadableGateway {
  gateway: RunningGateway;
  url: string;
  configPath: string;
  logLines: string[];
  reload(token?: string): Promise<{ status: number; body: any }>;
  close(): Promise<void>;
}

async function startReloadable(networks: Array<Record<string, unknown>>): Promise<ReloadableGateway> {
  const dir = tempDir();
  const configPath = join(dir, 'gw.yaml');
  writeFileSync(configPath, toYaml({ server: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN }, networks }));
  const logLines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') logLines.push(line);
      callback();
    },
  });
  const store: Store = await openStore({ driver: 'sqlite', path: ':memory:' });
  const team = await store.createTeam({ name: 'reload-team', dailyCredits: 1_000_000 });
  const { secret } = await issueKey(store, { teamId: team.id });
  const gateway = await startGateway(loadConfigFile(configPath), {
    store,
    logger: createLogger({ destination }),
    loadConfig: () => loadConfigFile(configPath),
  });
  return {
    gateway,
    url: `${gateway.rpcOrigin}/evm/v3/${secret}`,
    configPath,
    logLines,
    async reload(token = ADMIN_TOKEN) {
      const response = await fetch(`${gateway.adminOrigin}/v1/reload`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
      return { status: response.status, body: await response.json() };
    },
    async close() {
      await gateway.close();
      await store.close();
    },
  };
}

function networksYaml(networks: Array<Record<string, unknown>>): string {
  return toYaml({ server: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN }, networks });
}

describe('POST /v1/reload', () => {
  const gateways: ReloadableGateway[] = [];
  afterAll(async () => {
    await Promise.all(gateways.map((gateway) => gateway.close()));
  });

  it('swaps upstreams and costs in, rejects a broken file with 400 and keeps serving the running config', async () => {
    const first = await scripted(blockResult());
    const added = await scripted(blockResult());
    const tg = await startReloadable([evmNetwork([{ id: 'first', url: first.url }])]);
    gateways.push(tg);

    const before = await rpc(tg.url, getBlock());
    expect(before.headers.get('x-credits-cost')).toBe('80');
    expect(tg.gateway.config.networks[0]!.upstreams.map((upstream) => upstream.id)).toEqual(['first']);

    expect((await tg.reload('wrong-token-0123456789')).status).toBe(401);

    first.setBehaviour({ kind: 'status', status: 500 });
    const v2 = networksYaml([evmNetwork([{ id: 'first', url: first.url }, { id: 'added', url: added.url }], { eth_getBlockByHash: 40 })]);
    writeFileSync(tg.configPath, v2);
    expect(await tg.reload()).toEqual({ status: 200, body: { reloaded: true, networks: ['evm'] } });
    expect(tg.gateway.config.networks[0]!.upstreams.map((upstream) => upstream.id)).toEqual(['first', 'added']);
    const after = await rpc(tg.url, getBlock());
    expect(after.status).toBe(200);
    expect(after.headers.get('x-credits-cost')).toBe('40');
    expect(added.calls).toHaveLength(1);

    // A provider key typed into the file, on the line the YAML error points at.
    const literalSecret = 'literal-provider-secret-7c1e9a3b5d';
    const broken = [
      { text: `networks:\n  - id: evm\n    upstreams:\n      - url: https://x.example/?api-key=${literalSecret} : [\n`, message: /not valid YAML: .*at line 4, column \d+$/ },
      { text: v2.replace('chainId: 31337', 'chainId: 31337\n    surprise: true'), message: /networks\.0\.surprise: unknown key/ },
      { text: networksYaml([{ ...evmNetwork([{ id: 'added', url: added.url }]), chainId: undefined }]), message: /chainId/ },
    ];
    for (const [index, { text, message }] of broken.entries()) {
      writeFileSync(tg.configPath, text);
      const rejected = await tg.reload();
      expect(rejected.status, text).toBe(400);
      expect(rejected.body.error.code).toBe('invalid_config');
      expect(rejected.body.error.message).toMatch(message);
      const still = await rpc(tg.url, getBlock());
      expect(still.status).toBe(200);
      expect(still.headers.get('x-credits-cost')).toBe('40');
      expect(added.calls).toHaveLength(2 + index);
    }
    const errors = tg.logLines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === 'config reload rejected; the running config stays');
    expect(errors).toHaveLength(3);
    // The YAML error names the line without quoting it: the line may hold a secret.
    for (const line of tg.logLines) expect(line).not.toContain(literalSecret);

    const metrics = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
    expect(metrics).toContain('tollgate_config_reloads_total{result="ok"} 1');
    expect(metrics).toContain('tollgate_config_reloads_total{result="rejected"} 3');
  });

  it('says which changed sections only take effect at the next restart, and keeps them as they were', async () => {
    const upstream = await scripted(blockResult());
    const network = evmNetwork([{ id: 'only', url: upstream.url }]);
    const tg = await startReloadable([network]);
    gateways.push(tg);
    writeFileSync(
      tg.configPath,
      toYaml({ server: { host: '127.0.0.1', port: 0, maxBatchItems: 2 }, admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN }, cache: { maxBytes: 1024 }, networks: [network] }),
    );
    expect((await tg.reload()).status).toBe(200);
    const warnings = tg.logLines
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((line) => line.msg === 'these config sections change only at the next restart');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]!.sections).toEqual(['server', 'cache']);
    // The running server section stays: a batch of 3 is still within the old limit of 100.
    const batch = await rpc(tg.url, [getBlock(), getBlock(), getBlock()]);
    expect(batch.status).toBe(200);
    expect(Array.isArray(batch.body) && batch.body.length).toBe(3);
  });

  it('lets requests in flight during a reload finish on the config they started with', async () => {
    const slow = await scripted(blockResult(700));
    const tg = await startReloadable([evmNetwork([{ id: 'slow', url: slow.url }])]);
    gateways.push(tg);

    const inFlightGauge = async () => {
      const text = await (await fetch(`${tg.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
      return Number(/^tollgate_requests_in_flight (\d+)$/m.exec(text)?.[1]);
    };
    const hash = freshHash();
    const inFlight = rpc(tg.url, getBlock(hash, 'during-reload'));
    await until(() => slow.calls.length === 1, 'the upstream call');
    expect(await inFlightGauge()).toBe(1);
    writeFileSync(tg.configPath, networksYaml([evmNetwork([{ id: 'slow', url: slow.url }], { eth_getBlockByHash: 40 })]));
    expect((await tg.reload()).status).toBe(200);
    expect(await inFlightGauge()).toBe(1); // still counted while it runs on the retired config

    const response = await inFlight;
    expect(response.status).toBe(200);
    expect(await inFlightGauge()).toBe(0);
    expect(response.body).toEqual({ jsonrpc: '2.0', id: 'during-reload', result: { hash, number: '0x2a', transactions: [] } });
    // Priced when it started.
    expect(response.headers.get('x-credits-cost')).toBe('80');
    const next = await rpc(tg.url, getBlock());
    expect(next.status).toBe(200);
    expect(next.headers.get('x-credits-cost')).toBe('40');
  });

  it('lets a request in flight during a reload still fail over to another upstream of its config', async () => {
    // The first upstream answers 500 only after the reload happened; the request then needs the
    // second upstream of the set it started with.
    const slowFailing = await scripted({ kind: 'status', status: 500, delayMs: 500 });
    const backup = await scripted(blockResult());
    const tg = await startReloadable([evmNetwork([{ id: 'slow-failing', url: slowFailing.url }, { id: 'backup', url: backup.url }])]);
    gateways.push(tg);

    const hash = freshHash();
    const inFlight = rpc(tg.url, getBlock(hash, 'failover-during-reload'));
    await until(() => slowFailing.calls.length === 1, 'the first upstream call');
    writeFileSync(tg.configPath, networksYaml([evmNetwork([{ id: 'backup', url: backup.url }], { eth_getBlockByHash: 40 })]));
    expect((await tg.reload()).status).toBe(200);

    const response = await inFlight;
    expect(response.body.error, JSON.stringify(response.body)).toBeUndefined();
    expect(response.status).toBe(200);
    expect(response.body.result.hash).toBe(hash);
    expect(backup.calls).toHaveLength(1);
  });
});

// ---------------------------------------------------------------------------------------------
// In process: `GET` and `PUT /v1/log-level` on a running gateway.

describe('PUT /v1/log-level', () => {
  let tg: ReloadableGateway;
  beforeAll(async () => {
    tg = await startReloadable([evmNetwork([{ id: 'node', url: (await scripted(blockResult())).url }])]);
  });
  afterAll(async () => {
    await tg.close();
  });

  const admin = async (init: RequestInit = {}, token = ADMIN_TOKEN): Promise<{ status: number; body: any }> => {
    const response = await fetch(`${tg.gateway.adminOrigin}/v1/log-level`, { ...init, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } });
    return { status: response.status, body: await response.json() };
  };
  const setLevel = (level: unknown, token?: string) => admin({ method: 'PUT', body: JSON.stringify({ level }) }, token);
  const call = async (requestId: string): Promise<void> => {
    const response = await fetch(tg.url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-request-id': requestId }, body: JSON.stringify(getBlock()) });
    expect(response.status).toBe(200);
    await response.arrayBuffer();
  };
  const requestLineIds = () => tg.logLines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === 'request').map((line) => line.requestId);

  it('turns the request lines off at warn and on again at info, without a restart; the change itself is logged', async () => {
    expect(await admin()).toEqual({ status: 200, body: { level: 'info' } });
    await call('before-the-change');
    await until(() => requestLineIds().includes('before-the-change'), 'the request line at info');

    expect(await setLevel('warn')).toEqual({ status: 200, body: { level: 'warn' } });
    expect(await admin()).toEqual({ status: 200, body: { level: 'warn' } });
    for (let index = 0; index < 5; index += 1) await call(`at-warn-${index}`);

    expect(await setLevel('info')).toEqual({ status: 200, body: { level: 'info' } });
    await call('after-the-change');
    await until(() => requestLineIds().includes('after-the-change'), 'the request line at info again');
    // The calls at warn were answered before the level went back to info: none left a line.
    expect(requestLineIds()).toEqual(['before-the-change', 'after-the-change']);
    const changes = tg.logLines.map((line) => JSON.parse(line) as Record<string, unknown>).filter((line) => line.msg === 'log level changed');
    expect(changes.map(({ level, from, to }) => ({ level, from, to }))).toEqual([
      { level: 'warn', from: 'info', to: 'warn' },
      { level: 'warn', from: 'warn', to: 'info' },
    ]);
  });

  it('refuses an unknown level, an unknown field and a wrong token, and keeps the level it had', async () => {
    const unknown = await setLevel('loud');
    expect(unknown.status).toBe(400);
    expect(unknown.body.error.code).toBe('bad_request');
    expect(unknown.body.error.message).toMatch(/^level: /);
    const extra = await admin({ method: 'PUT', body: JSON.stringify({ level: 'debug', forWorkers: true }) });
    expect(extra.status).toBe(400);
    expect(extra.body.error.message).toContain('forWorkers');
    expect((await setLevel('debug', 'wrong-token-0123456789')).status).toBe(401);
    expect(await admin()).toEqual({ status: 200, body: { level: 'info' } });
  });
});
