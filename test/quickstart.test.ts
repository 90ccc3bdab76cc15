// The newcomer's path (README, Quick start): `tollgate devnet --json` (what `npm start` runs)
// prints one JSON line on stdout with everything needed to call both first-class methods, serves
// real answers through the gateway, and takes anvil down with it on SIGTERM and SIGINT.

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { WebSocket } from '../src/websocket/ws-library.js';
import { createPublicClient, http } from 'viem';
import { readyText } from '../src/devnet/devnet.js';
import { until } from './helpers/until.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CLI, ROOT, ensureBuilt } from './helpers/build.js';

const DEVNET_KEYS = ['evmUrl', 'evmWsUrl', 'assetUrl', 'apiKey', 'evmUpstreamUrl', 'assetUpstreamUrl', 'collections'];
const READY_TIMEOUT_MS = 30_000;
const EXIT_TIMEOUT_MS = 10_000;

interface DevnetInfo {
  evmUrl: string;
  evmWsUrl: string;
  assetUrl: string;
  apiKey: string;
  evmUpstreamUrl: string;
  assetUpstreamUrl: string;
  collections: string[];
}

interface RunningDevnet {
  child: ChildProcess;
  info: DevnetInfo;
  /** The JSON line exactly as printed (without its newline). */
  line: string;
  stdout(): string;
  stderr(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const children = new Set<ChildProcess>();
/** Children spawned as process-group leaders: signals go to the whole group, as a terminal sends them. */
const groupLeaders = new Set<ChildProcess>();

function signalChild(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    if (groupLeaders.has(child) && child.pid !== undefined) process.kill(-child.pid, signal);
    else child.kill(signal);
  } catch {
    // already gone
  }
}
const tmpDirs: string[] = [];

function tempDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-quickstart-'));
  tmpDirs.push(dir);
  return dir;
}

/**
 * Spawns a devnet command and resolves once a JSON line appears on its stdout. `firstLineOnly`
 * picks the line: the first one for `node dist/cli.js` (nothing may precede it), the first `{` line
 * for `npm start` (npm prints its own `> script` banner first).
 */
function startDevnet(command: string, args: string[], options: { detached?: boolean; firstLineOnly: boolean }): Promise<RunningDevnet> {
  const child = spawn(command, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], detached: options.detached ?? false });
  children.add(child);
  if (options.detached) groupLeaders.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8');
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('exit', (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    });
  });

  return new Promise<RunningDevnet>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no JSON line within ${READY_TIMEOUT_MS} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`)), READY_TIMEOUT_MS);
    let done = false;
    child.stdout!.on('data', (chunk: string) => {
      stdout += chunk;
      if (done) return;
      const lines = stdout.split('\n');
      const complete = lines.slice(0, -1);
      const line = options.firstLineOnly ? complete[0] : complete.find((candidate) => candidate.startsWith('{'));
      if (line === undefined) return;
      done = true;
      clearTimeout(timer);
      try {
        resolve({ child, info: JSON.parse(line) as DevnetInfo, line, stdout: () => stdout, stderr: () => stderr, exited });
      } catch (error) {
        reject(new Error(`stdout line is not JSON: ${line}\n${String(error)}`));
      }
    });
    void exited.then(({ code, signal }) => {
      if (done) return;
      clearTimeout(timer);
      reject(new Error(`devnet exited (code ${code}, signal ${signal}) before printing its line\nstdout:\n${stdout}\nstderr:\n${stderr}`));
    });
  });
}

// The body is whatever JSON came back; the assertions below are its type check.
async function call(url: string, method: string, params: unknown, id: unknown = 1): Promise<{ status: number; body: any }> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
  });
  return { status: res.statusCode, body: await res.body.json() };
}

async function answers(url: string): Promise<boolean> {
  try {
    await call(url, 'eth_chainId', []);
    return true;
  } catch {
    return false;
  }
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms)),
  ]);
}

/** Both first-class methods answer real data through the gateway. */
async function exerciseDevnet(info: DevnetInfo): Promise<void> {
  // A block hash straight from anvil, then the same block through the gateway.
  const latest = await call(info.evmUpstreamUrl, 'eth_getBlockByNumber', ['latest', false]);
  const hash = latest.body.result.hash as string;
  expect(hash).toMatch(/^0x[0-9a-f]{64}$/);
  expect(latest.body.result.transactions.length).toBeGreaterThan(0);
  const block = await call(info.evmUrl, 'eth_getBlockByHash', [hash, false], 'quick');
  expect(block.status).toBe(200);
  expect(block.body).toEqual({ jsonrpc: '2.0', id: 'quick', result: latest.body.result });
  const hydrated = await call(info.evmUrl, 'eth_getBlockByHash', [hash, true]);
  expect(hydrated.body.result.transactions.map((tx: { hash: string }) => tx.hash)).toEqual(latest.body.result.transactions);

  const collection = info.collections[0]!;
  const params = { groupKey: 'collection', groupValue: collection, limit: 5, page: 1 };
  const assets = await call(info.assetUrl, 'getAssetsByGroup', params, 'das');
  expect(assets.status).toBe(200);
  expect(assets.body.id).toBe('das');
  expect(assets.body.result.items).toHaveLength(5);
  expect(assets.body.result.total).toBeGreaterThan(5);
  for (const item of assets.body.result.items) {
    expect(item.grouping).toContainEqual({ group_key: 'collection', group_value: collection });
  }
  const direct = await call(info.assetUpstreamUrl, 'getAssetsByGroup', params, 'das');
  expect(assets.body).toEqual(direct.body);

  // The WebSocket URL it prints serves requests and subscriptions.
  const socket = new WebSocket(info.evmWsUrl);
  const replies: any[] = [];
  socket.on('message', (data: Buffer) => replies.push(JSON.parse(data.toString('utf8'))));
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  socket.send(JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash, false] }, { jsonrpc: '2.0', id: 2, method: 'eth_subscribe', params: ['newHeads'] }]));
  await withTimeout(new Promise((resolve) => socket.once('message', resolve)), 5_000, 'the WebSocket answer');
  expect(replies[0][0]).toEqual({ jsonrpc: '2.0', id: 1, result: latest.body.result });
  expect(replies[0][1].result).toMatch(/^0x[0-9a-f]{32}$/);
  socket.close();
  // The whole catalogue is served: what the printed viem snippet does works against this URL.
  const printed = readyText({ ...info, anvilUrl: info.evmUpstreamUrl, dasUrl: info.assetUpstreamUrl, adminOrigin: 'http://127.0.0.1:1', adminToken: 't', portalOrigin: 'http://127.0.0.1:2', teamToken: 'tt', blockHash: hash, collection });
  expect(printed).toContain(`createPublicClient({ transport: http('${info.evmUrl}') })`);
  expect(printed).toContain(`curl -s -X POST -H 'content-type: application/json' '${info.evmUrl}'`);
  const client = createPublicClient({ transport: http(info.evmUrl) });
  expect(await client.getBlockNumber()).toBe(BigInt(Number.parseInt((await call(info.evmUpstreamUrl, 'eth_blockNumber', [])).body.result as string, 16)));
  expect(await client.getBalance({ address: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266' })).toBeGreaterThan(0n);
  // Dev-node controls stay on anvil's side: denied on the gateway (the devnet seeded anvil directly).
  const mine = await call(info.evmUrl, 'evm_mine', []);
  expect(mine.body.error).toEqual({ code: -32601, message: 'the method evm_mine is disabled on this gateway' });
}

function assertDevnetLine(info: DevnetInfo): void {
  // These keys are the contract; later additions (the admin listener's URL and token) may follow.
  expect(Object.keys(info)).toEqual(expect.arrayContaining(DEVNET_KEYS));
  for (const key of ['evmUrl', 'assetUrl', 'evmUpstreamUrl', 'assetUpstreamUrl'] as const) {
    expect(info[key]).toMatch(/^http:\/\/127\.0\.0\.1:\d+/);
  }
  expect(info.apiKey.length).toBeGreaterThanOrEqual(20);
  expect(info.evmUrl.endsWith(`/v3/${info.apiKey}`)).toBe(true);
  expect(info.evmWsUrl).toBe(`${info.evmUrl.replace(/^http/, 'ws').replace(/\/v3\//, '/ws/v3/')}`);
  expect(info.assetUrl.endsWith(`/v3/${info.apiKey}`)).toBe(true);
  expect(Array.isArray(info.collections)).toBe(true);
  expect(info.collections.length).toBeGreaterThan(0);
  for (const collection of info.collections) expect(collection).toMatch(/^[1-9A-HJ-NP-Za-km-z]{32,44}$/);
}

beforeAll(ensureBuilt, 180_000);

afterEach(async () => {
  // A failed test must not leave a devnet (and its anvil) running: ask politely, then insist.
  for (const child of [...children]) {
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    signalChild(child, 'SIGTERM');
    const killer = setTimeout(() => signalChild(child, 'SIGKILL'), 5_000);
    await gone;
    clearTimeout(killer);
  }
});

afterAll(() => {
  for (const dir of tmpDirs) rmSync(dir, { recursive: true, force: true });
});

describe('tollgate devnet --json', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`prints exactly one JSON line, serves both methods, and stops everything on ${signal}`, async () => {
      const dataDir = join(tempDir(), 'data');
      const devnet = await startDevnet(process.execPath, [CLI, 'devnet', '--json', '--port', '0', '--data-dir', dataDir], { firstLineOnly: true });
      assertDevnetLine(devnet.info);
      expect(existsSync(join(dataDir, 'devnet.db'))).toBe(true);
      expect(await answers(devnet.info.evmUpstreamUrl)).toBe(true);

      await exerciseDevnet(devnet.info);

      signalChild(devnet.child, signal);
      const { code } = await withTimeout(devnet.exited, EXIT_TIMEOUT_MS, `exit after ${signal}`);
      expect(code).toBe(0);
      // stdout carried the one line and nothing else; logs went to stderr.
      expect(devnet.stdout()).toBe(`${devnet.line}\n`);
      expect(devnet.stderr()).toContain('gateway listening');
      expect(devnet.stderr()).not.toContain(devnet.info.apiKey);
      const adminToken = (devnet.info as unknown as Record<string, unknown>).adminToken;
      if (typeof adminToken === 'string') expect(devnet.stderr()).not.toContain(adminToken);
      // Anvil, the sample DAS upstream and the gateway are all gone with it.
      expect(await answers(devnet.info.evmUpstreamUrl)).toBe(false);
      expect(await answers(devnet.info.assetUpstreamUrl)).toBe(false);
      expect(await answers(devnet.info.evmUrl)).toBe(false);
    });
  }
});

describe('npm start', () => {
  it('passes --json, --port and --data-dir through to `tollgate devnet`', async () => {
    const dataDir = join(tempDir(), 'npm-data');
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const devnet = await startDevnet(npm, ['start', '--', '--json', '--port', '0', '--data-dir', dataDir], {
      firstLineOnly: false,
      detached: true,
    });
    assertDevnetLine(devnet.info);
    // --port 0: an ephemeral port, not the default 8080.
    const port = Number(new URL(devnet.info.evmUrl).port);
    expect(port).toBeGreaterThan(0);
    expect(port).not.toBe(8080);
    // --data-dir: the store was created where we said.
    expect(existsSync(join(dataDir, 'devnet.db'))).toBe(true);
    const chainId = await call(devnet.info.evmUrl, 'eth_chainId', []);
    expect(chainId.body.result).toBe('0x7a69');
    // Only npm's banner and the JSON line: the devnet itself printed nothing else.
    const other = devnet
      .stdout()
      .split('\n')
      .filter((line) => line.trim() !== '' && line !== devnet.line && !line.startsWith('> '));
    expect(other).toEqual([]);

    // Ctrl-C in a terminal signals the whole foreground process group (npm, its `sh -c`, node).
    // (npm itself only forwards signals to its `sh -c`, which does not pass them on; a devnet
    // whose npm is killed notices that by itself, tested below.)
    signalChild(devnet.child, 'SIGINT');
    await withTimeout(devnet.exited, EXIT_TIMEOUT_MS, 'npm exit after SIGINT');
    await until(async () => !(await answers(devnet.info.evmUpstreamUrl)) && !(await answers(devnet.info.evmUrl)), 'anvil and the gateway stopping after npm start was interrupted', EXIT_TIMEOUT_MS);
    expect(await answers(devnet.info.evmUrl)).toBe(false);
  });

  it('npm start -- --workers 2: the same devnet served by two gateway workers, stopped together by Ctrl-C', async () => {
    const dataDir = join(tempDir(), 'npm-workers-data');
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const devnet = await startDevnet(npm, ['start', '--', '--json', '--port', '0', '--data-dir', dataDir, '--workers', '2'], { firstLineOnly: false, detached: true });
    assertDevnetLine(devnet.info);
    await exerciseDevnet(devnet.info);
    const info = devnet.info as unknown as { adminUrl: string; adminToken: string };
    const metrics = await (await fetch(`${info.adminUrl}/metrics`, { headers: { authorization: `Bearer ${info.adminToken}` } })).text();
    expect(metrics).toMatch(/^tollgate_workers 2$/m);
    // The workers log to stderr like the devnet's gateway: stdout holds npm's banner and the one line.
    const other = devnet
      .stdout()
      .split('\n')
      .filter((line) => line.trim() !== '' && line !== devnet.line && !line.startsWith('> '));
    expect(other).toEqual([]);
    expect(devnet.stderr()).toContain('"worker":2');

    signalChild(devnet.child, 'SIGINT');
    await withTimeout(devnet.exited, EXIT_TIMEOUT_MS, 'npm exit after SIGINT');
    await until(async () => !(await answers(devnet.info.evmUpstreamUrl)) && !(await answers(devnet.info.evmUrl)), 'anvil and the gateway workers stopping after npm start was interrupted', EXIT_TIMEOUT_MS);
    expect(await answers(devnet.info.evmUrl)).toBe(false);
  });

  it.runIf(process.platform === 'linux')('stops anvil and the gateway when the npm start process is killed with SIGKILL', async () => {
    const dataDir = join(tempDir(), 'npm-kill-data');
    const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
    const devnet = await startDevnet(npm, ['start', '--', '--json', '--port', '0', '--data-dir', dataDir], { firstLineOnly: false, detached: true });
    const group = devnet.child.pid!;
    expect(await answers(devnet.info.evmUpstreamUrl)).toBe(true);
    expect(await answers(devnet.info.evmUrl)).toBe(true);

    // Only the leader (npm) dies, as when a supervisor or CI step kills the process it started;
    // its `sh -c`, the devnet's node and anvil stay in the process group it led.
    process.kill(group, 'SIGKILL');
    // Running members of the group, from /proc: a zombie (an exited `sh` whose new parent, a
    // container's pid 1, never reaps it) runs nothing and holds no port.
    const groupAlive = (): boolean =>
      readdirSync('/proc')
        .filter((entry) => /^\d+$/.test(entry))
        .some((pid) => {
          try {
            const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
            const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
            return Number(pgrp) === group && state !== 'Z';
          } catch {
            return false;
          }
        });
    expect(groupAlive()).toBe(true);
    // The devnet notices its launcher is gone by polling (src/devnet/launcher-watch.ts) and stops.
    await until(() => !groupAlive(), 'every process of the npm start group (sh, node, anvil) to exit after SIGKILL', EXIT_TIMEOUT_MS);
    // They are gone, so nothing answers any more.
    expect(await answers(devnet.info.evmUpstreamUrl)).toBe(false);
    expect(await answers(devnet.info.evmUrl)).toBe(false);
  });
});
