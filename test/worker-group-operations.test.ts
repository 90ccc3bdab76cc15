// The operations of a `serve --workers 2` group as one gateway: one /metrics that adds up what
// every worker answered (accepted by promtool, and by a real Prometheus that evaluates every
// query of the Grafana dashboard against it), SIGTERM that drains every worker, and SIGHUP /
// `POST /v1/reload` that change every worker or, for an invalid file, none.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { useSeededAnvil } from './helpers/anvil.js';
import { ROOT, ensureBuilt } from './helpers/build.js';
import { startScriptedUpstream } from './helpers/scripted-upstream.js';
import { killSpawned } from './helpers/spawn-gateway.js';
import { until } from './helpers/until.js';
import { GROUP_ADMIN_TOKEN, readGroupLedger, sampleSum, setUpGroup, startGroup, type GroupSetup } from './helpers/worker-group.js';

const anvil = useSeededAnvil({}, { blocks: 4, txPerBlock: 1 });
const setups: GroupSetup[] = [];
const tmpDirs: string[] = [];

beforeAll(async () => {
  await ensureBuilt();
}, 180_000);
afterEach(async () => {
  await killSpawned();
});
afterAll(() => {
  for (const setup of setups) setup.cleanUp();
  for (const dir of tmpDirs) rmSync(dir, { recursive: true, force: true });
});

const rpcCall = (method: string, params: unknown[], id: unknown) => JSON.stringify({ jsonrpc: '2.0', id, method, params });
const evmNetwork = (id: string, upstreamUrl: string) => ({ id, kind: 'evm', chainId: 31337, baseUrls: [`*/${id}`], upstreams: [{ id: 'node', url: upstreamUrl }] });

async function groupSetup(networks: unknown[]): Promise<GroupSetup> {
  const setup = await setUpGroup({ workers: 2, dailyCredits: 1_000_000_000 });
  setups.push(setup);
  setup.writeConfig(networks);
  return setup;
}

function runTool(command: string, args: string[], input: string): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, output }));
    child.stdin.end(input);
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Every PromQL expression of the dashboard, with Grafana's variables replaced as Grafana would. */
function dashboardQueries(): string[] {
  const dashboard = JSON.parse(readFileSync(join(ROOT, 'dashboards', 'tollgate.json'), 'utf8')) as { panels: unknown[] };
  const exprs: string[] = [];
  const walk = (panels: unknown[]) => {
    for (const panel of panels as Array<{ panels?: unknown[]; targets?: Array<{ expr?: string }> }>) {
      if (panel.panels) walk(panel.panels);
      for (const target of panel.targets ?? []) if (target.expr) exprs.push(target.expr);
    }
  };
  walk(dashboard.panels);
  return exprs.map((expr) => expr.replaceAll('$network', '.*').replaceAll('$__rate_interval', '15s'));
}

describe('one /metrics for a 2-worker group', () => {
  it('request counters equal what the clients received, summed over the workers; promtool accepts the exposition; Prometheus evaluates every dashboard query', async () => {
    const setup = await groupSetup([evmNetwork('eth', anvil.node.url)]);
    const group = await startGroup(setup);
    const url = `${group.rpcOrigin}/eth/v3/${setup.secret}`;
    // Many connections, so the primary hands them to both workers.
    const client = new Agent({ connections: 16 });
    /** What the clients received, by the labels the gateway counts them under. */
    const received = new Map<string, number>();
    const tally = (method: string, status: number) => received.set(`${method} ${status}`, (received.get(`${method} ${status}`) ?? 0) + 1);
    const calls = Array.from({ length: 400 }, (_, index) => {
      switch (index % 4) {
        case 0:
          return { url, body: rpcCall('eth_chainId', [], index), method: 'eth_chainId' };
        case 1:
          return { url, body: rpcCall('eth_getBlockByHash', [anvil.seed.blockHashes[index % anvil.seed.blockHashes.length], false], index), method: 'eth_getBlockByHash' };
        case 2:
          // Not a method of the catalogue: counted as `other`.
          return { url, body: rpcCall('made_upMethod', [], index), method: 'other' };
        default:
          // A key that does not exist: rejected as a whole (401), `method="none"`.
          return { url: `${group.rpcOrigin}/eth/v3/tg_nosuchkey${index}`, body: rpcCall('eth_chainId', [], index), method: 'none' };
      }
    });
    try {
      await Promise.all(
        calls.map(async (call) => {
          const response = await request(call.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: call.body, dispatcher: client });
          await response.body.text();
          tally(call.method, response.statusCode);
        }),
      );
      // Both workers answered some (so the sum below is over workers, not one process's count).
      await until(() => [...group.requestsByWorker().values()].reduce((sum, count) => sum + count, 0) === calls.length, 'a log line per request');
      const byWorker = group.requestsByWorker();
      expect([...byWorker.keys()].sort()).toStrictEqual([1, 2]);
      for (const count of byWorker.values()) expect(count).toBeLessThan(calls.length);

      const text = await group.metricsText();
      for (const [key, count] of received) {
        const [method, status] = key.split(' ') as [string, string];
        expect(sampleSum(text, 'tollgate_requests_total', { method, status }), key).toBe(count);
      }
      expect(sampleSum(text, 'tollgate_requests_total')).toBe(calls.length);
      expect(sampleSum(text, 'tollgate_request_duration_seconds_count')).toBe(calls.length);
      expect(received.get('eth_chainId 200')).toBe(100);
      expect(received.get('none 401')).toBe(100);
      // Gauges merged as documented: one group, two workers serving, nothing in flight.
      expect(sampleSum(text, 'tollgate_workers')).toBe(2);
      expect(sampleSum(text, 'tollgate_requests_in_flight')).toBe(0);
      expect(sampleSum(text, 'tollgate_upstream_healthy', { network: 'eth', upstream: 'node' })).toBe(1);
      // One line per metric family: the merge left no duplicate.
      const helps = text.split('\n').filter((line) => line.startsWith('# HELP '));
      expect(new Set(helps).size).toBe(helps.length);

      const promtool = await runTool('promtool', ['check', 'metrics'], text);
      expect(promtool.output).toBe('');
      expect(promtool.code).toBe(0);

      // A real Prometheus scraping the admin listener every second.
      const dir = mkdtempSync(join(tmpdir(), 'tollgate-prometheus-'));
      tmpDirs.push(dir);
      writeFileSync(join(dir, 'token'), GROUP_ADMIN_TOKEN);
      const adminHost = new URL(group.adminOrigin).host;
      writeFileSync(
        join(dir, 'prometheus.yml'),
        JSON.stringify({
          global: { scrape_interval: '1s', evaluation_interval: '1s' },
          scrape_configs: [{ job_name: 'tollgate', authorization: { type: 'Bearer', credentials_file: join(dir, 'token') }, static_configs: [{ targets: [adminHost] }] }],
        }),
      );
      const port = await freePort();
      const prom = spawn('prometheus', [`--config.file=${join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`], { stdio: 'ignore' });
      try {
        const api = async (query: string) => {
          const response = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(query)}`);
          return (await response.json()) as { status: string; error?: string; data: { result: Array<{ value: [number, string] }> } };
        };
        // Three scrapes with traffic between them, so every rate() has samples to work on.
        for (let scrape = 1; scrape <= 3; scrape += 1) {
          await until(
            async () => {
              const answer = await api('count_over_time(up{job="tollgate"}[1m])').catch(() => undefined);
              return Number(answer?.data.result[0]?.value[1] ?? 0) >= scrape;
            },
            `Prometheus scrape ${scrape}`,
            30_000,
          );
          await Promise.all(
            Array.from({ length: 20 }, async (_, index) => {
              const response = await request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: rpcCall('eth_chainId', [], index), dispatcher: client });
              await response.body.text();
            }),
          );
        }
        expect((await api('up{job="tollgate"}')).data.result[0]?.value[1]).toBe('1');
        const queries = dashboardQueries();
        expect(queries.length).toBeGreaterThan(40);
        for (const query of queries) {
          const answer = await api(query);
          expect(answer.status, `${query}: ${answer.error}`).toBe('success');
        }
        // And they see the group's traffic, not one worker's.
        const total = await api('sum(tollgate_requests_total)');
        expect(Number(total.data.result[0]?.value[1])).toBeGreaterThanOrEqual(calls.length);
        const rate = await api(queries[0]!);
        expect(Number(rate.data.result[0]?.value[1])).toBeGreaterThan(0);
      } finally {
        const gone = new Promise((resolve) => prom.once('exit', resolve));
        prom.kill('SIGTERM');
        await gone;
      }
      expect((await group.stop('SIGTERM')).code).toBe(0);
    } finally {
      await client.destroy();
    }
  }, 120_000);
});

describe('signals reach every worker', () => {
  it('SIGTERM drains every worker: the calls in flight on both are answered and charged, then the group exits 0', async () => {
    const IN_FLIGHT = 8;
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    // Holds every call until the test lets go: they are in flight in the workers when SIGTERM comes.
    const upstream = await startScriptedUpstream(async () => {
      await released;
      return { kind: 'result', result: '0x2a' };
    });
    const setup = await groupSetup([{ ...evmNetwork('eth', upstream.url), healthCheck: { intervalMs: 0 } }]);
    const group = await startGroup(setup);
    const url = `${group.rpcOrigin}/eth/v3/${setup.secret}`;
    // One connection per call, so the primary hands them to both workers.
    const client = new Agent({ connections: IN_FLIGHT });
    try {
      const answers = Array.from({ length: IN_FLIGHT }, async (_, index) => {
        const response = await request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: rpcCall('eth_getBalance', [`0x${'ab'.repeat(20)}`, 'latest'], index), dispatcher: client });
        return { status: response.statusCode, cost: response.headers['x-credits-cost'], body: await response.body.json() };
      });
      await until(() => upstream.calls.length === IN_FLIGHT, 'every call at the upstream');
      group.child.kill('SIGTERM');
      await group.waitForLine((line) => line.msg === 'draining every worker: refusing new connections, finishing in-flight requests', 'the primary draining');
      for (const worker of [1, 2]) await group.waitForLine((line) => line.worker === worker && String(line.msg).startsWith('draining:'), `worker ${worker} draining`);
      // Draining: not ready any more, still alive (the admin listener stays up to the end).
      const readiness = await group.admin('/readyz');
      expect(readiness.status).toBe(503);
      expect(await readiness.json()).toMatchObject({ status: 'not ready', draining: true });
      expect(group.child.exitCode).toBeNull();

      release();
      const results = await Promise.all(answers);
      for (const [index, result] of results.entries()) {
        expect(result).toStrictEqual({ status: 200, cost: expect.any(String), body: { jsonrpc: '2.0', id: index, result: '0x2a' } });
      }
      expect(await group.exited).toStrictEqual({ code: 0, signal: null });
      // Both workers had calls in flight, and every answered call is charged.
      const byWorker = group.requestsByWorker();
      expect([...byWorker.keys()].sort()).toStrictEqual([1, 2]);
      const ledger = readGroupLedger(setup.db);
      expect(ledger).toStrictEqual({ usageCredits: IN_FLIGHT * Number(results[0]!.cost), usageRequests: IN_FLIGHT, teamUsed: IN_FLIGHT * Number(results[0]!.cost), reservations: 0, reservedCredits: 0 });
    } finally {
      release();
      await client.destroy();
      await upstream.close();
    }
  }, 90_000);

  it('SIGHUP and POST /v1/reload with a valid file change every worker; with an invalid file, none', async () => {
    const setup = await groupSetup([evmNetwork('eth', anvil.node.url)]);
    const group = await startGroup(setup);
    /** Status of `eth_chainId` on `network` over `count` new connections (spread over the workers). */
    const statusesOn = async (network: string, count = 8): Promise<number[]> => {
      const client = new Agent({ connections: count });
      try {
        return await Promise.all(
          Array.from({ length: count }, async (_, index) => {
            const response = await request(`${group.rpcOrigin}/${network}/v3/${setup.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: rpcCall('eth_chainId', [], index), dispatcher: client });
            await response.body.text();
            return response.statusCode;
          }),
        );
      } finally {
        await client.destroy();
      }
    };
    const reloadLines = (worker: number) => group.lines.filter((line) => line.worker === worker && line.msg === 'config reloaded: networks, upstreams and costs').length;
    expect(await statusesOn('eth2')).toStrictEqual(Array(8).fill(404));

    // A valid file with a second network: SIGHUP, and every worker serves it.
    setup.writeConfig([evmNetwork('eth', anvil.node.url), evmNetwork('eth2', anvil.node.url)]);
    group.child.kill('SIGHUP');
    await group.waitForLine((line) => line.msg === 'config reloaded in every worker: networks, upstreams and costs', 'the group reloaded');
    // Each worker logs its reload before it acknowledges it, but the workers' lines and the
    // primary's come through separate pipes: a worker's line can reach the test after the
    // primary's line (or answer), so it is awaited, then the count is checked exactly.
    await until(() => reloadLines(1) >= 1 && reloadLines(2) >= 1, 'both workers logged the reload');
    expect([reloadLines(1), reloadLines(2)]).toStrictEqual([1, 1]);
    expect(await statusesOn('eth2')).toStrictEqual(Array(8).fill(200));

    // An invalid file: the primary refuses it, no worker hears of it, both still serve eth2.
    writeFileSync(setup.configFile, JSON.stringify({ ...JSON.parse(readFileSync(setup.configFile, 'utf8')), unknownSection: true }));
    group.child.kill('SIGHUP');
    await group.waitForLine((line) => line.msg === 'config reload rejected; no worker changed', 'the reload rejected');
    const refused = await group.admin('/v1/reload', { method: 'POST' });
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({ error: { code: 'invalid_config' } });
    expect([reloadLines(1), reloadLines(2)]).toStrictEqual([1, 1]);
    expect(await statusesOn('eth2')).toStrictEqual(Array(8).fill(200));

    // POST /v1/reload with a valid file without eth2: gone from every worker.
    setup.writeConfig([evmNetwork('eth', anvil.node.url)]);
    const reloaded = await group.admin('/v1/reload', { method: 'POST' });
    expect(await reloaded.json()).toStrictEqual({ reloaded: true, networks: ['eth'] });
    await until(() => reloadLines(1) >= 2 && reloadLines(2) >= 2, 'both workers logged the second reload');
    expect([reloadLines(1), reloadLines(2)]).toStrictEqual([2, 2]);
    expect(await statusesOn('eth2')).toStrictEqual(Array(8).fill(404));
    expect(await statusesOn('eth')).toStrictEqual(Array(8).fill(200));

    // Counted once per reload of the group, not once per worker.
    const metrics = await group.metricsText();
    expect(sampleSum(metrics, 'tollgate_config_reloads_total', { result: 'ok' })).toBe(2);
    expect(sampleSum(metrics, 'tollgate_config_reloads_total', { result: 'rejected' })).toBe(2);
    expect((await group.stop('SIGTERM')).code).toBe(0);
  }, 90_000);
});

describe('the admin API and the portal of a 2-worker group', () => {
  it('PUT /v1/log-level changes every worker; a worker restarted after it starts at the new level', async () => {
    const setup = await groupSetup([evmNetwork('eth', anvil.node.url)]);
    const group = await startGroup(setup);
    /** Eight calls over eight new connections (spread over the workers), every one answered 200. */
    const callAll = async (): Promise<void> => {
      const client = new Agent({ connections: 8 });
      try {
        const statuses = await Promise.all(
          Array.from({ length: 8 }, async (_, index) => {
            const response = await request(`${group.rpcOrigin}/eth/v3/${setup.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: rpcCall('eth_chainId', [], index), dispatcher: client });
            await response.body.text();
            return response.statusCode;
          }),
        );
        expect(statuses).toStrictEqual(Array(8).fill(200));
      } finally {
        await client.destroy();
      }
    };
    const setLevel = (level: string) => group.admin('/v1/log-level', { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ level }) });
    const changesTo = (worker: number, level: string) => group.lines.filter((line) => line.worker === worker && line.msg === 'log level changed' && line.to === level).length;

    await until(async () => {
      await callAll();
      return group.requestsByWorker().size === 2;
    }, 'request lines from both workers at info');
    const toWarn = await setLevel('warn');
    expect(toWarn.status).toBe(200);
    expect(await toWarn.json()).toStrictEqual({ level: 'warn' });
    // Each worker logs the change before it acknowledges it; its lines reach the pipe later.
    await until(() => changesTo(1, 'warn') === 1 && changesTo(2, 'warn') === 1, 'both workers at warn');
    const linesAtWarn = group.requestsByWorker();

    // Worker 1 dies; its successor is given the group's level, not the one the group started with.
    process.kill(group.pids[0]!, 'SIGKILL');
    await group.waitForLine((line) => line.msg === 'worker ended unasked; restarting it' && line.slot === 1, 'worker 1 ended');
    // The primary's "restarted and listening" is an info line, not written at warn: readiness tells instead.
    await until(async () => {
      const readiness = (await (await fetch(`${group.adminOrigin}/readyz`)).json()) as { workers: Record<string, boolean> };
      return readiness.workers['1'] === true && readiness.workers['2'] === true;
    }, 'worker 1 back and ready');
    for (let round = 0; round < 3; round += 1) await callAll();

    expect((await setLevel('info')).status).toBe(200);
    // Worker 1's successor logs a change from warn: it was at warn (at info it would log no change).
    await until(() => changesTo(1, 'info') === 1 && changesTo(2, 'info') === 1, 'both workers back at info');
    expect(group.lines.filter((line) => line.worker === 1 && line.msg === 'log level changed' && line.to === 'info').map((line) => line.from)).toStrictEqual(['warn']);
    // Each worker's change line follows whatever it wrote at warn: no request line at all.
    expect(group.requestsByWorker()).toStrictEqual(linesAtWarn);
    await until(async () => {
      await callAll();
      const now = group.requestsByWorker();
      return now.get(1)! > linesAtWarn.get(1)! && now.get(2)! > linesAtWarn.get(2)!;
    }, 'request lines from both workers at info again');
    expect(await (await group.admin('/v1/log-level')).json()).toStrictEqual({ level: 'info' });
    expect((await group.stop('SIGTERM')).code).toBe(0);
  }, 90_000);

  it('a key revoked through the primary stops working on every worker at once (not after auth.keyCacheTtlMs); the portal is served', async () => {
    const setup = await groupSetup([evmNetwork('eth', anvil.node.url)]);
    // Long enough that only the primary's message can explain a refusal within the test.
    setup.writeConfig([evmNetwork('eth', anvil.node.url)], { auth: { keyCacheTtlMs: 600_000 }, portal: { enabled: true, host: '127.0.0.1', port: 0 } });
    const group = await startGroup(setup);
    const statuses = async (): Promise<number[]> => {
      const client = new Agent({ connections: 8 });
      try {
        return await Promise.all(
          Array.from({ length: 8 }, async (_, index) => {
            const response = await request(`${group.rpcOrigin}/eth/v3/${setup.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: rpcCall('eth_chainId', [], index), dispatcher: client });
            await response.body.text();
            return response.statusCode;
          }),
        );
      } finally {
        await client.destroy();
      }
    };
    // Every worker has the key cached.
    expect(await statuses()).toStrictEqual(Array(8).fill(200));
    await until(() => group.requestsByWorker().size === 2, 'both workers served the key');

    const revoked = await group.admin(`/v1/keys/${setup.keyId}/revoke`, { method: 'POST' });
    expect(revoked.status).toBe(200);
    await until(async () => (await statuses()).every((status) => status === 401), 'the key refused on every connection');
    expect(await statuses()).toStrictEqual(Array(8).fill(401));

    // The portal listens once, in the primary.
    expect(group.portalOrigin).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect((await fetch(`${group.portalOrigin}/`)).status).toBe(200);
    expect((await group.stop('SIGTERM')).code).toBe(0);
  }, 90_000);
});
