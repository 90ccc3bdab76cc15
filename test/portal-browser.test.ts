// The team portal in a real browser (docs/portal.md): Chromium driven by
// puppeteer-core against a real gateway on loopback. Sign in with a team token; the numbers on
// the page equal the ledger's; create a key and call the gateway with it; after a reload the page
// shows the new usage; rotate and revoke it; sign out. A second team's token sees none of it.
// Under the balance, the quota forecast: the gateway's clock runs from 14:15 UTC today, so the
// last hour is hour 14 and the times it gives are known.
// The page must also fit 360 px, be usable by keyboard and label its controls, and a normal visit
// must leave the browser console empty: no error or warning, no page error, no failed request
// (signed out, the page's own session check answers 200; its icon is served).
// Chromium is found as test/helpers/chromium.ts says (.ci/run installs it); without it this
// file fails. TOLLGATE_UPDATE_SCREENSHOTS=1 writes docs/portal.png, otherwise a temp dir gets it.

import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { CHROMIUM_MISSING, findChromium, SKIP_BROWSER_TESTS } from './helpers/chromium.js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { issueKey } from '../src/admin/key-issuer.js';
import { issueTeamToken } from '../src/portal/team-token.js';
import type { Team } from '../src/store/index.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';

// Functions passed to page.evaluate run in the page and see its globals; the test program is
// typed for Node (no DOM lib, which would change other files' types), so they are declared here.
declare const document: any;
declare const window: any;
type HTMLElement = any;
type HTMLInputElement = any;

const SCREENSHOT = process.env.TOLLGATE_UPDATE_SCREENSHOTS === '1' ? join(import.meta.dirname, '..', 'docs', 'portal.png') : join(mkdtempSync(join(tmpdir(), 'tollgate-portal-')), 'portal.png');

let t: TestGateway;
let browser: Browser;
let page: Page;
let teamB: Team;
let tokenA: string;
let tokenB: string;
let keyOfB: string;
/** What the browser reported that a user would see as broken: console errors and warnings, page errors, failed requests. */
const problems: string[] = [];

// The gateway's clock: real time, moved so that the test starts at 14:15:00 UTC of today.
const clockOffset = Date.parse(`${new Date().toISOString().slice(0, 10)}T14:15:00Z`) - Date.now();
const now = () => Date.now() + clockOffset;
const today = () => new Date(now()).toISOString().slice(0, 10);
const call = (secret: string, method = 'eth_chainId') => rpc(t.url('eth', secret), { jsonrpc: '2.0', id: 1, method });

async function ledgerUsed(teamId: string): Promise<number> {
  const [peek] = await t.store.applyLedger([{ type: 'peek', teamId, day: today() }] as const);
  return peek.teamUsed;
}

const valueOf = (id: string) => page.$eval(`#${id}`, (element) => (element as HTMLElement).dataset.value ?? '');
const loads = () => page.evaluate(() => Number(document.body.dataset.loads ?? '0'));
async function waitForLoad(after: number): Promise<void> {
  await page.waitForFunction((n: number) => Number(document.body.dataset.loads ?? '0') > n, { timeout: 10_000 }, after);
}

async function signIn(token: string): Promise<void> {
  await page.goto(`${t.gateway.portalOrigin}/`);
  await page.waitForSelector('#sign-in:not([hidden])');
  // By keyboard: Tab to the token field, type, Enter submits.
  for (let n = 0; n < 10 && (await page.evaluate(() => document.activeElement?.id)) !== 'token'; n += 1) await page.keyboard.press('Tab');
  expect(await page.evaluate(() => document.activeElement?.id)).toBe('token');
  await page.keyboard.type(token);
  await page.keyboard.press('Enter');
  await page.waitForSelector('#dashboard:not([hidden])');
  await waitForLoad(0);
}

async function clickAndLoad(selector: string): Promise<void> {
  const before = await loads();
  await page.click(selector);
  await waitForLoad(before);
}

beforeAll(async () => {
  if (SKIP_BROWSER_TESTS) return;
  const executablePath = findChromium();
  if (executablePath === undefined) throw new Error(CHROMIUM_MISSING);
  t = await startTestGateway({
    dailyCredits: 10_000,
    now,
    config: { portal: { enabled: true, host: '127.0.0.1', port: 0 }, cache: { maxBytes: 0 } },
    networks: [{ id: 'eth', kind: 'evm', chainId: 1, upstreams: [{ id: 'none', url: 'http://127.0.0.1:9' }] }],
  });
  tokenA = (await issueTeamToken(t.store, t.team.id, 'browser')).secret;
  teamB = await t.store.createTeam({ name: 'other-team', dailyCredits: 777 });
  tokenB = (await issueTeamToken(t.store, teamB.id, 'browser')).secret;
  const issued = await issueKey(t.store, { teamId: teamB.id, label: 'b-secret-project' });
  keyOfB = issued.key.id;
  for (let n = 0; n < 3; n += 1) expect((await call(t.apiKey)).status).toBe(200);
  await t.store.updateKey(t.keyId, { label: 'backend' });
  expect((await call(issued.secret)).status).toBe(200);
  browser = await puppeteer.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  page = await browser.newPage();
  page.on('dialog', (dialog) => void dialog.accept());
  page.on('console', (message) => {
    if (message.type() === 'error' || message.type() === 'warn') problems.push(`console ${message.type()}: ${message.text()} (${message.location().url ?? ''})`);
  });
  page.on('pageerror', (error) => problems.push(`page error: ${String(error)}`));
  page.on('requestfailed', (request) => problems.push(`request failed: ${request.method()} ${request.url()} ${request.failure()?.errorText ?? ''}`));
  page.on('response', (response) => {
    if (response.status() >= 400) problems.push(`HTTP ${response.status()}: ${response.request().method()} ${response.url()}`);
  });
  await page.setViewport({ width: 1100, height: 900 });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await t?.close();
});

describe.skipIf(SKIP_BROWSER_TESTS)('the team portal in Chromium', () => {
  // Every test, every page state: the console stays empty.
  afterEach(() => {
    const seen = problems.splice(0);
    expect(seen).toEqual([]);
  });

  it('loads signed out with an empty console: the session check answers 200 {signedIn: false}, the icon is served', async () => {
    const icon = page.waitForResponse((response) => new URL(response.url()).pathname === '/favicon.svg', { timeout: 10_000 });
    const session = page.waitForResponse((response) => new URL(response.url()).pathname === '/session', { timeout: 10_000 });
    await page.goto(`${t.gateway.portalOrigin}/`);
    await page.waitForFunction(() => document.body.dataset.ready === 'true');
    expect(await page.$eval('#sign-in', (element) => (element as HTMLElement).hidden)).toBe(false);
    const answered = await session;
    expect(answered.status()).toBe(200);
    expect(await answered.json()).toEqual({ signedIn: false });
    const served = await icon;
    expect(served.status()).toBe(200);
    expect(served.headers()['content-type']).toBe('image/svg+xml');
    expect(await page.evaluate(() => document.querySelector('link[rel="icon"]')?.getAttribute('href'))).toBe('/favicon.svg');
    // A reload too (the icon may now come from the cache): still nothing in the console.
    await page.reload();
    await page.waitForFunction(() => document.body.dataset.ready === 'true');
    expect(problems).toEqual([]);
  });

  it('signs in with a team token into an HTTP-only session; the numbers equal the ledger', async () => {
    await signIn(tokenA);
    expect(await page.$eval('#team-name', (element) => element.textContent)).toBe(t.team.name);
    const used = await ledgerUsed(t.team.id);
    expect(used).toBe(15);
    expect(await valueOf('used')).toBe(String(used));
    expect(await valueOf('remaining')).toBe(String(10_000 - used));
    expect(await valueOf('limit')).toBe('10000');
    expect(await valueOf('resets')).toBe(new Date(Date.parse(`${today()}T00:00:00Z`) + 86_400_000).toISOString());
    const hourly = await t.store.hourlyUsage({ teamId: t.team.id, day: today() });
    expect(await valueOf('today-credits')).toBe(String(hourly.reduce((sum, row) => sum + row.credits, 0)));
    expect(await valueOf('today-requests')).toBe('3');
    // 15 credits in the last hour: the 9,985 left outlast the day.
    expect(await page.$eval('#forecast', (element) => [(element as HTMLElement).hidden, element.textContent])).toEqual([false, 'At this rate the quota lasts until the daily reset']);
    // The session cookie is invisible to scripts.
    expect(await page.evaluate(() => document.cookie)).toBe('');
    const cookies = await browser.cookies();
    expect(cookies.find((cookie) => cookie.name === 'tollgate_session')).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    // The 30-day chart is stacked by method, and by key on request.
    const labels = () => page.evaluate(() => (window as any).Chart.getChart(document.getElementById('daily-chart')).data.datasets.map((d: { label: string }) => d.label));
    expect(await labels()).toEqual(['eth_chainId']);
    await page.click('input[name="stack"][value="key"]');
    expect(await labels()).toEqual([`backend (${t.keyId})`]);
    await page.click('input[name="stack"][value="method"]');
  });

  it('creates a key (secret shown once); calls with it show up after a reload', async () => {
    await page.type('#key-label', 'browser-key');
    await page.type('#key-cap', '5000');
    await clickAndLoad('#key-submit');
    await page.waitForSelector('#secret-box:not([hidden])');
    const secret = await page.$eval('#secret-value', (element) => (element as HTMLInputElement).value);
    expect(secret).toMatch(/^tg_/);
    const row = await page.$$eval('#keys-table tbody tr', (rows) => rows.map((r) => r.textContent ?? ''));
    expect(row.some((text) => text.includes('browser-key') && text.includes('cap 5,000/day') && text.includes('never'))).toBe(true);
    expect((await call(secret)).status).toBe(200);
    expect((await call(secret, 'net_version')).status).toBe(200);
    await page.reload();
    await waitForLoad(0);
    const used = await ledgerUsed(t.team.id);
    expect(used).toBe(25);
    expect(await valueOf('used')).toBe('25');
    expect(await valueOf('remaining')).toBe(String(10_000 - 25));
    expect(await valueOf('today-requests')).toBe('5');
    // The secret is not shown again.
    expect(await page.$eval('#secret-box', (element) => (element as HTMLElement).hidden)).toBe(true);
    const lastUsed = await page.$$eval('#keys-table tbody tr', (rows) => rows.filter((r) => r.textContent?.includes('browser-key')).map((r) => r.querySelector('.last-used')?.textContent));
    expect(lastUsed[0]).toMatch(new RegExp(`^${today()} \\d{2}:00$`));
    // 360 px: nothing sticks out of the page (the keys table scrolls inside its own box).
    // The charts follow the new width on their resize observer's next frame, hence the wait.
    await page.setViewport({ width: 360, height: 800 });
    const fits = await page.waitForFunction(() => document.documentElement.scrollWidth <= 360, { timeout: 5_000 }).then(() => true, () => false);
    expect(fits, `page is ${await page.evaluate(() => document.documentElement.scrollWidth)} px wide at 360`).toBe(true);
    await page.setViewport({ width: 1100, height: 900 });
    await page.waitForFunction(() => document.getElementById('daily-chart').clientWidth > 800, { timeout: 5_000 });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    (globalThis as any).__browserKeySecret = secret;
  });

  it("edits a key's settings (PATCH through the admin service)", async () => {
    await page.click('button[aria-label="Edit key browser-key"]');
    expect(await page.$eval('#key-cap', (element) => (element as HTMLInputElement).value)).toBe('5000');
    await page.$eval('#key-cap', (element) => ((element as HTMLInputElement).value = ''));
    await page.type('#key-cap', '6000');
    await page.type('#key-networks', 'eth');
    await clickAndLoad('#key-submit');
    const row = await page.$$eval('#keys-table tbody tr', (rows) => rows.filter((r) => r.textContent?.includes('browser-key')).map((r) => r.textContent ?? ''));
    expect(row[0]).toContain('cap 6,000/day; networks: eth');
    const keys = await t.store.listKeys({ teamId: t.team.id });
    expect(keys.find((key) => key.label === 'browser-key')).toMatchObject({ dailyCap: 6000, allowedNetworks: ['eth'] });
  });

  it('shows what the period\'s calls cost at the providers and what the cache saved, from the usage rows; hidden without priced upstreams', async () => {
    expect(await page.$eval('#provider-spend', (element) => (element as HTMLElement).hidden)).toBe(true);
    // Provider spend as the gateway records it for calls to priced upstreams (test/upstream-budgets.test.ts drives that path).
    await t.store.addProviderSpend([
      { day: today(), teamId: t.team.id, keyId: t.keyId, network: 'eth', method: 'eth_call', units: 260, usd: 0.00013, savedUnits: 52 },
      { day: today(), teamId: teamB.id, keyId: keyOfB, network: 'eth', method: 'eth_call', units: 999, usd: 1, savedUnits: 999 },
    ]);
    await page.reload();
    await waitForLoad(0);
    const rows = await t.store.usage({ teamId: t.team.id, fromDay: today(), toDay: today() });
    expect(await page.$eval('#provider-spend', (element) => (element as HTMLElement).hidden)).toBe(false);
    expect(await valueOf('spend-units')).toBe(String(rows.reduce((sum, row) => sum + (row.upstreamUnits ?? 0), 0)));
    expect(await valueOf('saved-units')).toBe(String(rows.reduce((sum, row) => sum + (row.savedUnits ?? 0), 0)));
    expect(await page.$eval('#provider-spend', (element) => element.textContent)).toBe('What these calls cost at the providers: 260 units ($0.0001); the cache saved 52 units.');
  });

  it('every control is labelled and reachable by keyboard', async () => {
    const unlabelled = await page.evaluate(() =>
      [...document.querySelectorAll('input:not([type=hidden]), button, select, a[href]')]
        .filter((element) => {
          const el = element as HTMLElement;
          if (el.getAttribute('aria-label')) return false;
          if (el.tagName === 'BUTTON' || el.tagName === 'A') return (el.textContent ?? '').trim() === '';
          if (el.closest('label')) return false;
          return !(el.id && document.querySelector(`label[for="${el.id}"]`));
        })
        .map((element) => element.outerHTML),
    );
    expect(unlabelled).toEqual([]);
    // Tab reaches the Rotate button of the new key.
    const target = 'Rotate key browser-key';
    let reached = false;
    for (let n = 0; n < 60 && !reached; n += 1) {
      await page.keyboard.press('Tab');
      reached = (await page.evaluate(() => document.activeElement?.getAttribute('aria-label'))) === target;
    }
    expect(reached).toBe(true);
  });

  it('rotates (new secret shown once, old one stops) and revokes the key', async () => {
    const oldSecret = (globalThis as any).__browserKeySecret as string;
    await clickAndLoad('button[aria-label="Rotate key browser-key"]');
    await page.waitForSelector('#secret-box:not([hidden])');
    const rotated = await page.$eval('#secret-value', (element) => (element as HTMLInputElement).value);
    expect(rotated).not.toBe(oldSecret);
    expect((await call(rotated)).status).toBe(200);
    expect((await call(oldSecret)).status).toBe(401);
    await page.click('#dismiss-secret');
    await clickAndLoad('button[aria-label="Revoke key browser-key"]');
    const status = await page.$$eval('#keys-table tbody tr', (rows) => rows.filter((r) => r.textContent?.includes('browser-key')).map((r) => r.querySelector('.status')?.textContent));
    expect(status).toEqual(['revoked']);
    expect((await call(rotated)).status).toBe(401);
  });

  it('signs out: the session is gone, a reload shows the sign-in form', async () => {
    await page.click('#sign-out');
    await page.waitForSelector('#sign-in:not([hidden])');
    await page.reload();
    await page.waitForFunction(() => document.body.dataset.ready === 'true');
    expect(await page.$eval('#dashboard', (element) => (element as HTMLElement).hidden)).toBe(true);
    // With whatever cookies the browser still holds for the portal, the team API refuses: asked
    // from here, not from the page, whose console would rightly log the 401.
    const cookies = (await browser.cookies()).map((cookie) => `${cookie.name}=${cookie.value}`).join('; ');
    expect(cookies).not.toContain('tollgate_session');
    expect((await fetch(`${t.gateway.portalOrigin}/v1/keys`, { headers: { cookie: cookies } })).status).toBe(401);
  });

  it("a second team's token sees its own numbers and none of the first team's keys or usage", async () => {
    await signIn(tokenB);
    const text = await page.evaluate(() => document.body.innerText);
    expect(text).toContain('other-team');
    expect(text).toContain(keyOfB);
    for (const foreign of ['browser-key', 'backend', t.keyId, t.team.name]) expect(text).not.toContain(foreign);
    expect(await valueOf('used')).toBe(String(await ledgerUsed(teamB.id)));
    expect(await valueOf('used')).toBe('5');
    expect(await valueOf('limit')).toBe('777');
    const labels = await page.evaluate(() => (window as any).Chart.getChart(document.getElementById('daily-chart')).data.datasets.map((d: { label: string }) => d.label));
    expect(labels).toEqual(['eth_chainId']);
    const keyIds = await page.$$eval('#keys-table tbody tr', (rows) => rows.map((r) => (r as HTMLElement).dataset.keyId));
    expect(keyIds).toEqual([keyOfB]);
    // With a quota of 6, the 1 credit left lasts 12 minutes at the last hour's 5 (hour 14's).
    await t.store.updateTeam(teamB.id, { dailyCredits: 6 });
    const before = now();
    await page.reload();
    await waitForLoad(0);
    const after = now();
    const runsOutAt = await valueOf('forecast');
    expect(Date.parse(runsOutAt)).toBeGreaterThanOrEqual(before + 12 * 60_000);
    expect(Date.parse(runsOutAt)).toBeLessThanOrEqual(after + 12 * 60_000);
    expect(await page.$eval('#forecast', (element) => element.textContent)).toBe(`At this rate the daily quota runs out at ${runsOutAt.slice(11, 16)} UTC`);
  });
});
