// The request explorer on the team page (docs/explorer.md), in a real Chromium driven by
// puppeteer-core against a real gateway on loopback: the team's recent requests are listed newest
// first with their errors, and filtering by method and by status shows exactly the matching rows.
// TOLLGATE_UPDATE_SCREENSHOTS=1 writes docs/explorer.png, otherwise a temp dir gets it.

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { issueTeamToken } from '../src/portal/team-token.js';
import { CHROMIUM_MISSING, findChromium, SKIP_BROWSER_TESTS } from './helpers/chromium.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';

declare const document: any;
type HTMLElement = any;

const SCREENSHOT =
  process.env.TOLLGATE_UPDATE_SCREENSHOTS === '1' ? join(import.meta.dirname, '..', 'docs', 'explorer.png') : join(mkdtempSync(join(tmpdir(), 'tollgate-explorer-')), 'explorer.png');

let t: TestGateway;
let upstream: ScriptedUpstream;
let browser: Browser;
let page: Page;
let token: string;
/** Request ids in the order they were sent, by what they were. */
const sent: Array<{ id: string; method: string; ok: boolean }> = [];
const problems: string[] = [];

/** The rows of the requests table as the page shows them. */
function shownRows(): Promise<Array<{ id: string; method: string; status: string; error: string; key: string }>> {
  return page.$$eval('#requests-table tbody tr', (rows) =>
    rows.map((row) => {
      const cells = [...(row as HTMLElement).querySelectorAll('td')].map((cell: HTMLElement) => cell.textContent as string);
      return { id: (row as HTMLElement).dataset.requestId as string, key: cells[1]!, method: cells[3]!, status: cells[4]!, error: cells[9]! };
    }),
  );
}

async function applyFilters(filters: { method?: string; status?: string }): Promise<void> {
  const before = await page.evaluate(() => Number(document.body.dataset.requestLoads ?? '0'));
  await page.$eval('#filter-method', (input, value) => ((input as HTMLElement).value = value), filters.method ?? '');
  await page.select('#filter-status', filters.status ?? '');
  await page.click('#filter-apply');
  await page.waitForFunction((n: number) => Number(document.body.dataset.requestLoads ?? '0') > n, { timeout: 10_000 }, before);
}

beforeAll(async () => {
  if (SKIP_BROWSER_TESTS) return;
  const executablePath = findChromium();
  if (executablePath === undefined) throw new Error(CHROMIUM_MISSING);
  upstream = await startScriptedUpstream((call) =>
    call.methods.includes('eth_call') ? { kind: 'rpc-error', code: 3, message: 'execution reverted: Ownable: caller is not the owner' } : { kind: 'result', result: '0x2a' },
  );
  t = await startTestGateway({
    config: { portal: { enabled: true, host: '127.0.0.1', port: 0 }, explorer: { flushIntervalMs: 20 } },
    networks: [{ id: 'eth', kind: 'evm', chainId: 1, hedge: { enabled: false }, upstreams: [{ id: 'node', url: upstream.url }] }],
  });
  token = (await issueTeamToken(t.store, t.team.id, 'browser')).secret;
  await t.store.updateKey(t.keyId, { label: 'backend' });
  const worker = await issueKey(t.store, { teamId: t.team.id, label: 'worker' });
  const calls: Array<{ method: string; params: unknown[]; key: string }> = [
    { method: 'eth_chainId', params: [], key: t.apiKey },
    { method: 'eth_blockNumber', params: [], key: t.apiKey },
    { method: 'eth_call', params: [{ to: '0x0000000000000000000000000000000000000001', data: '0x' }, 'latest'], key: worker.secret },
    { method: 'eth_blockNumber', params: [], key: worker.secret },
    { method: 'eth_call', params: [{ to: '0x0000000000000000000000000000000000000002', data: '0x' }, 'latest'], key: t.apiKey },
    { method: 'eth_chainId', params: [], key: worker.secret },
  ];
  for (const call of calls) {
    const answered = await rpc(t.url('eth', call.key), { jsonrpc: '2.0', id: 1, method: call.method, params: call.params });
    sent.push({ id: answered.headers.get('x-request-id')!, method: call.method, ok: answered.body.error === undefined });
  }
  expect(sent.map((entry) => entry.ok)).toEqual([true, true, false, true, false, true]);
  const lastId = sent[sent.length - 1]!.id;
  await until(async () => {
    const response = await fetch(`${t.gateway.portalOrigin}/v1/requests`, { headers: { authorization: `Bearer ${token}` } });
    return ((await response.json()) as { requests: Array<{ requestId: string }> }).requests.some((row) => row.requestId === lastId);
  }, 'the last request in the explorer');

  browser = await puppeteer.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  page = await browser.newPage();
  page.on('console', (message) => {
    if (message.type() === 'error' || message.type() === 'warn') problems.push(`console ${message.type()}: ${message.text()}`);
  });
  page.on('pageerror', (error) => problems.push(`page error: ${String(error)}`));
  await page.setViewport({ width: 1200, height: 1000 });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await t?.close();
  await upstream?.close();
});

describe.skipIf(SKIP_BROWSER_TESTS)('the request explorer on the team page, in Chromium', () => {
  it('lists the requests newest first with their errors, and filters by method and by status', async () => {
    await page.goto(`${t.gateway.portalOrigin}/`);
    await page.waitForSelector('#sign-in:not([hidden])');
    await page.type('#token', token);
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => Number(document.body.dataset.requestLoads ?? '0') > 0, { timeout: 10_000 });

    const all = await shownRows();
    expect(all.map((row) => row.id)).toEqual(sent.map((entry) => entry.id).reverse());
    expect(all.map((row) => row.method)).toEqual(sent.map((entry) => entry.method).reverse());
    const reverted = all.filter((row) => row.method === 'eth_call');
    expect(reverted).toHaveLength(2);
    for (const row of reverted) expect(row.error).toBe('3 execution reverted: Ownable: caller is not the owner');
    expect(all.find((row) => row.id === sent[2]!.id)!.key).toMatch(/^worker \(key_/);

    await applyFilters({ method: 'eth_blockNumber' });
    expect((await shownRows()).map((row) => row.id)).toEqual([sent[3]!.id, sent[1]!.id]);

    await applyFilters({ status: 'error' });
    const errors = await shownRows();
    expect(errors.map((row) => row.id)).toEqual([sent[4]!.id, sent[2]!.id]);
    expect(errors.every((row) => row.error.startsWith('3 execution reverted'))).toBe(true);

    await applyFilters({ method: 'eth_chainId', status: 'error' });
    expect(await shownRows()).toEqual([]);
    expect(await page.$eval('#requests-empty', (element) => (element as HTMLElement).hidden)).toBe(false);

    await applyFilters({ status: 'ok' });
    expect((await shownRows()).map((row) => row.id)).toEqual([sent[5]!.id, sent[3]!.id, sent[1]!.id, sent[0]!.id]);

    await applyFilters({});
    await page.$eval('#requests-title', (element) => (element as HTMLElement).scrollIntoView());
    await page.screenshot({ path: SCREENSHOT, fullPage: false });
    expect(problems).toEqual([]);
  });
});
