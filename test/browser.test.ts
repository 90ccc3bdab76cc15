// A real browser (docs/keys.md): headless Chromium from the system
// (Debian's `chromium` package; .ci/run installs it), driven by puppeteer-core, loads a page from
// a second loopback origin whose script bundles viem (esbuild, built here into a temp dir) and
// calls the gateway: viem's getChainId and getBlock({ blockHash }) against a real anvil, a
// getAssetsByGroup POST with named params against the sample DAS server, X-Credits-Remaining read
// from JavaScript, the JSON-RPC bodies of a 402 and a 429, a 403 readable by the origin the key
// allows, and a key restricted to another origin blocked by the browser itself. Every assertion
// is on what the page saw (page.evaluate's return values). A screenshot of the page is written to
// a temp dir named in the log.
//
// Chromium is found at $TOLLGATE_CHROMIUM or as `chromium` / `chromium-browser` / `google-chrome`
// on PATH. Missing, this file FAILS (CI must run it); TOLLGATE_SKIP_BROWSER=1 skips it locally.

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { applySettingsPatch } from '../src/auth/key-settings.js';
import { generateSampleDataset, startSampleDasServer, type SampleDasServer } from '../src/devnet/sample-das/index.js';
import { ROOT } from './helpers/build.js';
import { startSeededAnvil, type SeededAnvil } from './helpers/anvil.js';
import { startTestGateway, type TestGateway } from './helpers/gateway.js';
import { CHROMIUM_MISSING, findChromium, SKIP_BROWSER_TESTS } from './helpers/chromium.js';

const DAILY_CREDITS = 1_000_000;

type Seen = { ok: boolean; error?: string; details?: string; status?: number; body?: any; creditsRemaining?: string | null; retryAfter?: string | null; chainId?: number; hash?: string; transactions?: number };

let anvil: SeededAnvil;
let das: SampleDasServer;
let collection: string;
let tg: TestGateway;
let pageServer: Server;
let pageOrigin: string;
let browser: Browser;
let page: Page;
let workDir: string;
const keys: Record<'broke' | 'throttled' | 'elsewhere' | 'pageOnly', string> = { broke: '', throttled: '', elsewhere: '', pageOnly: '' };

async function teamKey(team: { dailyCredits: number; creditsPerSecond?: number }, settings?: Record<string, unknown>): Promise<string> {
  const created = await tg.store.createTeam({ name: `browser-${Math.random().toString(36).slice(2)}`, ...team });
  const { key, secret } = await issueKey(tg.store, { teamId: created.id });
  if (settings !== undefined) await tg.store.updateKey(key.id, { settings: applySettingsPatch(null, settings) });
  return secret;
}

/** Calls one of the page's functions (test/browser/page.ts) inside the page, and returns what it saw. */
function inPage(name: 'getChainId' | 'getBlock' | 'post', ...args: unknown[]): Promise<Seen> {
  return page.evaluate((fn: string, fnArgs: unknown[]) => (globalThis as any).tollgate[fn](...fnArgs), name, args) as Promise<Seen>;
}

describe.skipIf(SKIP_BROWSER_TESTS)('a dapp page in headless Chromium', () => {
  beforeAll(async () => {
    const executablePath = findChromium();
    if (executablePath === undefined) {
      throw new Error(CHROMIUM_MISSING);
    }
    workDir = mkdtempSync(join(tmpdir(), 'tollgate-browser-'));
    const bundled = build({
      entryPoints: [join(ROOT, 'test', 'browser', 'page.ts')],
      bundle: true,
      format: 'iife',
      platform: 'browser',
      target: 'chrome120',
      outfile: join(workDir, 'page.js'),
      logLevel: 'silent',
    });
    const dataset = generateSampleDataset({ seed: 7 });
    collection = [...dataset.collections].sort((a, b) => b.size - a.size)[0]!.id;
    [anvil, das] = await Promise.all([startSeededAnvil({}, { blocks: 2, txPerBlock: 2 }), startSampleDasServer({ dataset }), bundled]);
    tg = await startTestGateway({
      dailyCredits: DAILY_CREDITS,
      networks: [
        { id: 'eth', kind: 'evm', chainId: 31337, upstreams: [{ id: 'anvil', url: anvil.node.url }] },
        { id: 'das', kind: 'asset', upstreams: [{ id: 'sample-das', url: das.url }] },
      ],
    });
    const html = '<!doctype html><html><head><meta charset="utf-8"><title>tollgate</title><style>pre { white-space: pre-wrap; word-break: break-all; font-size: 11px; }</style></head><body><h1>Tollgate from a page</h1><script src="/page.js"></script></body></html>';
    const script = readFileSync(join(workDir, 'page.js'));
    pageServer = createServer((req, res) => {
      if (req.url === '/page.js') return void res.writeHead(200, { 'content-type': 'text/javascript' }).end(script);
      res.writeHead(200, { 'content-type': 'text/html' }).end(html);
    });
    await new Promise<void>((resolve) => pageServer.listen(0, '127.0.0.1', resolve));
    pageOrigin = `http://127.0.0.1:${(pageServer.address() as AddressInfo).port}`;
    keys.broke = await teamKey({ dailyCredits: 0 });
    keys.throttled = await teamKey({ dailyCredits: DAILY_CREDITS, creditsPerSecond: 1 });
    keys.elsewhere = await teamKey({ dailyCredits: DAILY_CREDITS }, { allowedOrigins: ['https://app.elsewhere.example'] });
    keys.pageOnly = await teamKey({ dailyCredits: DAILY_CREDITS }, { allowedOrigins: [pageOrigin], allowedMethods: ['eth_chainId'] });

    // Runs as root in a container: no sandbox; /dev/shm may be small.
    browser = await puppeteer.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'] });
    page = await browser.newPage();
    await page.goto(`${pageOrigin}/`, { waitUntil: 'load' });
    await page.waitForFunction(() => (globalThis as any).tollgate !== undefined);
  }, 90_000);

  afterAll(async () => {
    if (page !== undefined && workDir !== undefined) {
      const shot = join(mkdtempSync(join(tmpdir(), 'tollgate-browser-shot-')), 'browser-test.png');
      await page.screenshot({ path: shot, fullPage: true }).then(
        () => console.log(`browser test: screenshot of the page at ${shot}`),
        () => undefined,
      );
    }
    await browser?.close();
    await new Promise((resolve) => (pageServer === undefined ? resolve(undefined) : pageServer.close(resolve)));
    await tg?.close();
    await das?.close();
    await anvil?.node.stop();
    if (workDir !== undefined) rmSync(workDir, { recursive: true, force: true });
  });

  it('the page is on another origin than the gateway', () => {
    expect(pageOrigin).not.toBe(tg.gateway.rpcOrigin);
  });

  it('viem getChainId', async () => {
    const seen = await inPage('getChainId', tg.url('eth'));
    expect(seen).toMatchObject({ ok: true, chainId: 31337 });
  });

  it('viem getBlock({ blockHash }) of a block with transactions', async () => {
    const hash = anvil.seed.blocksWithTransactions[0]!;
    const seen = await inPage('getBlock', tg.url('eth'), hash);
    expect(seen).toMatchObject({ ok: true, hash });
    expect(seen.transactions).toBeGreaterThan(0);
  });

  it('getAssetsByGroup with named params, and X-Credits-Remaining read from JavaScript', async () => {
    const seen = await inPage('post', 'getAssetsByGroup', tg.url('das'), {
      jsonrpc: '2.0',
      id: 'page-1',
      method: 'getAssetsByGroup',
      params: { groupKey: 'collection', groupValue: collection, page: 1, limit: 5 },
    });
    expect(seen).toMatchObject({ ok: true, status: 200 });
    expect(seen.body.id).toBe('page-1');
    expect(seen.body.result.items).toHaveLength(5);
    const remaining = Number(seen.creditsRemaining);
    expect(remaining).toBeLessThanOrEqual(DAILY_CREDITS - 160);
    expect(remaining).toBeGreaterThan(0);
  });

  it('reads the JSON-RPC body of a 402', async () => {
    const seen = await inPage('post', '402', tg.url('eth', keys.broke), { jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] });
    expect(seen).toMatchObject({ ok: true, status: 402, creditsRemaining: '0' });
    expect(seen.body.error).toMatchObject({ code: -32005, data: { reason: 'daily_credits_exhausted', limit: 0 } });
    expect(Number(seen.retryAfter)).toBeGreaterThan(0);
  });

  it('reads the JSON-RPC body and Retry-After of a 429', async () => {
    let seen: Seen | undefined;
    for (let i = 0; i < 20 && seen?.status !== 429; i += 1) {
      seen = await inPage('post', '429', tg.url('eth', keys.throttled), { jsonrpc: '2.0', id: i, method: 'eth_chainId', params: [] });
    }
    expect(seen).toMatchObject({ ok: true, status: 429 });
    expect(seen!.body.error).toMatchObject({ code: -32005, data: { reason: 'rate_limited' } });
    expect(Number(seen!.retryAfter)).toBeGreaterThanOrEqual(1);
  });

  it('a 403 of a key that allows this origin is readable', async () => {
    const seen = await inPage('post', '403', tg.url('eth', keys.pageOnly), { jsonrpc: '2.0', id: 9, method: 'eth_blockNumber', params: [] });
    expect(seen).toMatchObject({ ok: true, status: 403 });
    expect(seen.body).toStrictEqual({ jsonrpc: '2.0', id: 9, error: { code: -32002, message: 'rejected due to key settings', data: { rule: 'method' } } });
    expect(await inPage('getChainId', tg.url('eth', keys.pageOnly))).toMatchObject({ ok: true, chainId: 31337 });
  });

  it('a key restricted to another origin is blocked by the browser (TypeError: Failed to fetch)', async () => {
    const raw = await inPage('post', 'refused', tg.url('eth', keys.elsewhere), { jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] });
    expect(raw).toMatchObject({ ok: false, error: 'TypeError: Failed to fetch' });
    const viaViem = await inPage('getChainId', tg.url('eth', keys.elsewhere));
    expect(viaViem.ok).toBe(false);
    expect(viaViem.details).toBe('Failed to fetch');
  });
});
