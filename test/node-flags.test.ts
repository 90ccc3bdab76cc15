// The gateway's Node flags and allocator setting (src/startup/node-flags.ts): the `tollgate`
// command starts Node with heap settings under which answers held until validated do not set off
// full collection after full collection, and with a C allocator that gives a burst's buffers back;
// `tollgate serve` started without them says so at start.

import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { POOL_IDLE_RELEASE_MS } from '../src/jsonrpc/answer-buffers.js';
import { GATEWAY_ENVIRONMENT, GATEWAY_NODE_FLAGS, missingGatewayEnvironment, missingGatewayFlags } from '../src/startup/node-flags.js';
import { CLI, ensureBuilt, ROOT } from './helpers/build.js';
import { TEST_ADMIN_TOKEN } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { killSpawned, spawnGateway, type GatewayProcess } from './helpers/spawn-gateway.js';
import { until } from './helpers/until.js';
import { sampleSum, tollgateCli } from './helpers/worker-group.js';

describe('missingGatewayFlags', () => {
  it('finds the flags in NODE_OPTIONS or on the command line, by name whatever their value, in either spelling', () => {
    expect(missingGatewayFlags([], '')).toEqual(GATEWAY_NODE_FLAGS);
    expect(missingGatewayFlags(['--max-old-space-size=512'], '--inspect')).toEqual(GATEWAY_NODE_FLAGS);
    expect(missingGatewayFlags([...GATEWAY_NODE_FLAGS], '')).toEqual([]);
    expect(missingGatewayFlags(['--max_semi_space_size=32', '--expose_gc'], '--initial-old-space-size=512 --no-warnings')).toEqual([]);
    expect(missingGatewayFlags(['--max-semi-space-size=32'], '')).toEqual(['--initial-old-space-size=128', '--expose-gc']);
  });

  it('finds none missing from the command npm start runs, nor from its environment', () => {
    const { scripts } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    const words = scripts['start']!.split(/\s+/);
    expect(missingGatewayFlags(words, '')).toEqual([]);
    const assignments = Object.fromEntries(words.slice(0, words.indexOf('node')).map((word) => word.split('=') as [string, string]));
    expect(assignments).toEqual(GATEWAY_ENVIRONMENT);
  });
});

describe("the tollgate command's first line", () => {
  it('fits in 127 characters, so that kernels before Linux 5.1 (which cut a longer one) still pass every flag', () => {
    const firstLine = readFileSync(join(ROOT, 'src', 'cli.ts'), 'utf8').split('\n')[0]!;
    expect(firstLine.startsWith('#!/usr/bin/env -S ')).toBe(true);
    expect(firstLine.length).toBeLessThanOrEqual(127);
    expect(missingGatewayFlags(firstLine.split(/\s+/), '')).toEqual([]);
  });
});

describe('missingGatewayEnvironment', () => {
  it('names the allocator variables an environment does not set, whatever the value of those it does', () => {
    expect(missingGatewayEnvironment({})).toEqual(['MALLOC_MMAP_THRESHOLD_']);
    expect(missingGatewayEnvironment({ MALLOC_MMAP_THRESHOLD_: '4194304' })).toEqual([]);
  });
});

describe('tollgate serve', () => {
  const MiB = 1024 * 1024;
  /** A 1.5 MiB `getAssetsByGroup` page: each answer is collected in a 2 MiB pooled buffer. */
  const LARGE_RESULT = { total: 1000, limit: 1000, page: 1, items: Array.from({ length: 1000 }, (_, i) => ({ id: `asset-${i}`, content: { json_uri: `https://example.com/${'x'.repeat(1500)}` } })) };
  const LARGE_TEXT = JSON.stringify(LARGE_RESULT);
  const SMALL_RESULT = { ...LARGE_RESULT, limit: 1, items: LARGE_RESULT.items.slice(0, 20) };
  const BURST = 16;
  let upstream: ScriptedUpstream;
  let dasUpstream: ScriptedUpstream;
  let dir: string;
  let configFile: string;
  let gateway: GatewayProcess | undefined;

  beforeAll(async () => {
    await ensureBuilt();
    // npm marks a package's `bin` executable when it installs it; a build from source is not.
    chmodSync(CLI, 0o755);
    upstream = await startScriptedUpstream({ kind: 'result', result: '0x1' });
    // Pages of 1,000 assets are large, every other answer small (the gateway's health probes
    // included). The delay holds every large call of a burst until all have arrived: their answers
    // then come in together.
    dasUpstream = await startScriptedUpstream((call) =>
      (call.body as { params?: { limit?: number } }).params?.limit === 1000 ? { kind: 'result', result: LARGE_RESULT, delayMs: 200 } : { kind: 'result', result: SMALL_RESULT },
    );
    dir = mkdtempSync(join(tmpdir(), 'tollgate-node-flags-'));
    configFile = join(dir, 'gateway.yaml');
    const config = {
      server: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      store: { driver: 'sqlite', path: join(dir, 'gateway.db') },
      networks: [{ id: 'evm', kind: 'evm', chainId: 1, baseUrls: ['*/evm'], upstreams: [{ id: 'u', url: upstream.url }] }],
    };
    writeFileSync(configFile, JSON.stringify(config)); // JSON is YAML
  });
  afterEach(async () => {
    await gateway?.stop();
    gateway = undefined;
    await killSpawned();
  });
  afterAll(async () => {
    await upstream?.close();
    await dasUpstream?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  /** This process's environment without NODE_OPTIONS and the gateway's allocator setting: what the gateway under test sets, it sets itself. */
  const withoutGatewaySettings = (): NodeJS.ProcessEnv => {
    const environment: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '' };
    for (const name of Object.keys(GATEWAY_ENVIRONMENT)) delete environment[name];
    return environment;
  };
  const heapSettingsLine = (process: GatewayProcess) => process.waitForLine((line) => String(line.msg).startsWith('V8 heap settings'), 'the heap settings line');

  it('run as the tollgate command, starts Node with the heap settings its first line names', async () => {
    const environment = withoutGatewaySettings();
    gateway = await spawnGateway(configFile, { asCommand: true, env: environment });
    const line = await heapSettingsLine(gateway);
    expect(line, gateway.output()).toMatchObject({ level: 'info', nodeFlags: GATEWAY_NODE_FLAGS, environment: GATEWAY_ENVIRONMENT });
  });

  it('started by `node dist/cli.js serve` alone, says at start which flags are missing', async () => {
    const environment = withoutGatewaySettings();
    gateway = await spawnGateway(configFile, { nodeDefaults: true, env: environment });
    const line = await heapSettingsLine(gateway);
    expect(line, gateway.output()).toMatchObject({
      level: 'warn',
      missing: [...GATEWAY_NODE_FLAGS, 'MALLOC_MMAP_THRESHOLD_'],
      recommended: `MALLOC_MMAP_THRESHOLD_=1048576 node ${GATEWAY_NODE_FLAGS.join(' ')}`,
    });
  });

  it('drops the idle answer buffers once the answers stop, and the process gives their memory back', async () => {
    const db = join(dir, 'burst.db');
    await tollgateCli(db, 'teams', 'create', 'burst', '--daily-credits', '1000000');
    const { secret } = await tollgateCli(db, 'keys', 'create', '--team', 'burst');
    const burstConfigFile = join(dir, 'burst.yaml');
    const config = {
      server: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0, token: TEST_ADMIN_TOKEN },
      store: { driver: 'sqlite', path: db },
      cache: { maxBytes: 0 },
      networks: [{ id: 'das', kind: 'asset', baseUrls: ['*/das'], upstreams: [{ id: 'u', url: dasUpstream.url, connections: BURST }] }],
    };
    writeFileSync(burstConfigFile, JSON.stringify(config)); // JSON is YAML
    gateway = await spawnGateway(burstConfigFile, { keep: (line) => line.msg !== 'request' });
    const { rpcOrigin, adminOrigin } = gateway;
    const scrape = async (): Promise<{ idle: number; arrayBuffers: number; reused: number; allocated: number }> => {
      const text = await (await fetch(`${adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
      return {
        idle: sampleSum(text, 'tollgate_answer_buffers_idle_bytes'),
        arrayBuffers: sampleSum(text, 'tollgate_array_buffers_bytes'),
        reused: sampleSum(text, 'tollgate_answer_buffers_taken_total', { source: 'idle' }),
        allocated: sampleSum(text, 'tollgate_answer_buffers_taken_total', { source: 'allocated' }),
      };
    };
    // Each call a different page: identical calls in flight together share one upstream answer, whose buffer is never given back.
    const call = async (id: number): Promise<void> => {
      const response = await fetch(`${rpcOrigin}/das/v3/${secret}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id, method: 'getAssetsByGroup', params: { groupKey: 'collection', groupValue: 'J1S9H3QjnRtBbbuD4HjPV6RpRhwuk4zKbxsnCHuTgh9w', limit: 1000, page: id + 1 } }),
      });
      const text = await response.text();
      expect(response.status).toBe(200);
      expect(text === `{"jsonrpc":"2.0","id":${id},"result":${LARGE_TEXT}}`).toBe(true);
    };
    expect((await scrape()).idle).toBe(0);
    for (let round = 0; round < 3; round++) await Promise.all(Array.from({ length: BURST }, (_, i) => call(round * BURST + i)));
    const afterBurst = await scrape();
    // Every answer's buffer came back to the pool once its reply was written, and is kept for the
    // next: as many as were in use at once (the upstream sends its answers one after another, so
    // one or a few, not sixteen).
    expect(afterBurst.idle).toBeGreaterThanOrEqual(2 * MiB);
    // One buffer per page, most of them used again: the pool maps only what it never had idle.
    expect(afterBurst.reused + afterBurst.allocated).toBe(3 * BURST);
    expect(afterBurst.reused).toBeGreaterThan(afterBurst.allocated);
    expect(afterBurst.allocated * 2 * MiB).toBeGreaterThanOrEqual(afterBurst.idle);
    await until(async () => (await scrape()).idle === 0, 'the idle buffers to be dropped', POOL_IDLE_RELEASE_MS + 15_000);
    // Dropped and collected: the memory of the process's buffers falls by at least what the pool
    // held. (In a process this quiet V8 may also collect them on its own; under steady load it does
    // not for a long time, which the bench's RSS after its run shows, docs/benchmarks.md.)
    await until(async () => (await scrape()).arrayBuffers <= afterBurst.arrayBuffers - afterBurst.idle, 'the dropped buffers to be freed');
  }, 60_000);
});
