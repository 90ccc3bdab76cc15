// Quota alerts and key events as signed webhooks (docs/webhooks.md), against a real
// HTTP receiver on port 0 and real gateways: thresholds crossed by real calls fire once each (also
// with two gateway instances sharing one real redis-server), signatures verify with the
// documented scheme, a receiver that fails twice gets the event on the third attempt, and one
// that never answers is bounded. Events below 100 % carry the quota forecast, checked at an
// injected time against the arithmetic. Retry waits are injected: no test sleeps for a backoff.

import { createHmac } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createAlerting } from '../src/alerts/alerting.js';
import { verifySignature } from '../src/alerts/webhook-signature.js';
import { parseConfig } from '../src/config/load.js';
import { openStore, type Store } from '../src/store/index.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { useRedis } from './helpers/redis.js';
import { until } from './helpers/until.js';

const SECRET = 'whsec_test_0123456789abcdef';
const redis = useRedis();

interface Received {
  headers: IncomingMessage['headers'];
  body: string;
  json: any;
}

interface Receiver {
  url: string;
  received: Received[];
  close(): Promise<void>;
}

/** A real HTTP receiver; `answer` decides each response (status, or 'hang' to never answer). */
async function startReceiver(answer: (n: number) => number | 'hang' = () => 200): Promise<Receiver> {
  const received: Received[] = [];
  const hanging: ServerResponse[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      received.push({ headers: req.headers, body, json: JSON.parse(body) });
      const status = answer(received.length);
      if (status === 'hang') return void hanging.push(res);
      res.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    received,
    async close() {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const network = { id: 'eth', kind: 'evm', chainId: 1, upstreams: [{ id: 'none', url: 'http://127.0.0.1:9' }] };
const today = () => new Date().toISOString().slice(0, 10);
const call = (url: string, id: number) => rpc(url, { jsonrpc: '2.0', id, method: 'eth_chainId' });

function gatewayWith(receiver: Receiver, extra: Record<string, unknown> = {}, options: { store?: Store; dailyCredits?: number; sleeps?: number[]; now?: () => number } = {}): Promise<TestGateway> {
  return startTestGateway({
    dailyCredits: options.dailyCredits ?? 100,
    store: options.store,
    now: options.now,
    config: { webhooks: { url: receiver.url, signingSecret: SECRET, ...extra }, cache: { maxBytes: 0 } },
    networks: [network],
    webhookSleep: async (ms) => void options.sleeps?.push(ms),
  });
}

describe('quota.threshold', () => {
  it('fires once per threshold as real calls cross 75, 90 and 100 % of the quota, signed per the documented scheme', async () => {
    const receiver = await startReceiver();
    cleanups.push(receiver.close);
    const t = await gatewayWith(receiver);
    cleanups.push(t.close);
    // eth_chainId costs 5: 100 credits are 20 calls; 75 % is reached by call 15, 90 % by 18, 100 % by 20.
    for (let n = 1; n <= 14; n += 1) expect((await call(t.url('eth'), n)).status).toBe(200);
    await t.gateway.webhooksIdle();
    expect(receiver.received).toEqual([]);
    for (let n = 15; n <= 22; n += 1) await call(t.url('eth'), n);
    await until(() => receiver.received.length >= 3, 'three events');
    await t.gateway.webhooksIdle();
    expect(receiver.received).toHaveLength(3);
    const events = receiver.received.map((r) => r.json).sort((a, b) => a.threshold - b.threshold);
    const resetsAt = new Date(Date.parse(`${today()}T00:00:00Z`) + 86_400_000).toISOString();
    // The forecast depends on the time of day (its values are checked at an injected time below).
    expect(events.map((event) => 'forecast' in event)).toEqual([true, true, false]);
    expect(events.map(({ forecast: _forecast, ...event }) => event)).toEqual([
      { id: expect.stringMatching(/^evt_[0-9a-f]{24}$/), type: 'quota.threshold', team: t.team.id, day: today(), threshold: 75, used: 75, limit: 100, resetsAt },
      { id: expect.stringMatching(/^evt_/), type: 'quota.threshold', team: t.team.id, day: today(), threshold: 90, used: 90, limit: 100, resetsAt },
      { id: expect.stringMatching(/^evt_/), type: 'quota.threshold', team: t.team.id, day: today(), threshold: 100, used: 100, limit: 100, resetsAt },
    ]);
    expect(new Set(events.map((event) => event.id)).size).toBe(3);
    for (const { headers, body } of receiver.received) {
      expect(headers['content-type']).toBe('application/json');
      const header = headers['tollgate-signature'] as string;
      // The documented check, by hand: HMAC-SHA256 over `${t}.${body}`.
      const [, t0, v1] = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(header)!;
      expect(createHmac('sha256', SECRET).update(`${t0}.${body}`).digest('hex')).toBe(v1);
      expect(Math.abs(Number(t0) - Date.now() / 1000)).toBeLessThan(60);
      expect(verifySignature(header, body, SECRET, { nowSeconds: Date.now() / 1000, toleranceSeconds: 300 })).toBe(true);
      expect(verifySignature(header, body.replace('"limit":100', '"limit":1000'), SECRET, { nowSeconds: Date.now() / 1000, toleranceSeconds: 300 })).toBe(false);
      expect(verifySignature(header, body, 'another-secret-0123', { nowSeconds: Date.now() / 1000, toleranceSeconds: 300 })).toBe(false);
      expect(verifySignature(header, body, SECRET, { nowSeconds: Date.now() / 1000 + 3_600, toleranceSeconds: 300 })).toBe(false);
    }
    // The admin API lists the attempts; /metrics counts them.
    const deliveries: any = await (await fetch(`${t.gateway.adminOrigin}/v1/webhook-deliveries?team=${t.team.id}`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).json();
    expect(deliveries.deliveries).toHaveLength(3);
    expect(deliveries.deliveries.every((d: any) => d.outcome === 'delivered' && d.status === 200 && d.attempt === 1 && d.type === 'quota.threshold')).toBe(true);
    const metrics = await (await fetch(`${t.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    expect(metrics).toContain('tollgate_webhook_deliveries_total{type="quota.threshold",outcome="delivered"} 3');
  });

  it('75 and 90 % carry when the quota runs out at the last hour’s rate, computed at send time; 100 % carries none', async () => {
    const receiver = await startReceiver();
    cleanups.push(receiver.close);
    let time = Date.parse('2026-03-14T10:40:00Z');
    const t = await gatewayWith(receiver, {}, { now: () => time });
    cleanups.push(t.close);
    const calls = async (from: number, n: number) => {
      for (let id = from; id < from + n; id += 1) expect((await call(t.url('eth'), id)).status).toBe(200);
    };
    await calls(0, 12); // 60 credits in hour 10
    time = Date.parse('2026-03-14T11:15:00Z');
    await calls(12, 3); // 15 in hour 11: 75 used
    await until(() => receiver.received.length >= 1, 'the 75 % event');
    await calls(15, 3); // 90 used
    await until(() => receiver.received.length >= 2, 'the 90 % event');
    await calls(18, 2); // 100 used
    await until(() => receiver.received.length >= 3, 'the 100 % event');
    const [at75, at90, at100] = receiver.received.map((r) => r.json);
    // The last hour at 11:15: hour 11 + 0.75 × hour 10. 75 % used: 15 + 45 = 60 an hour, the 25 left last 25 minutes.
    expect(at75).toMatchObject({ threshold: 75, used: 75, limit: 100, forecast: { creditsLastHour: 15 + 0.75 * 60, runsOutAt: '2026-03-14T11:40:00.000Z' } });
    // 90 % used: 30 + 45 = 75 an hour, the 10 left last 8 minutes.
    expect(at90).toMatchObject({ threshold: 90, used: 90, forecast: { creditsLastHour: 30 + 0.75 * 60, runsOutAt: '2026-03-14T11:23:00.000Z' } });
    expect(at100).toEqual({ id: expect.stringMatching(/^evt_/), type: 'quota.threshold', team: t.team.id, day: '2026-03-14', threshold: 100, used: 100, limit: 100, resetsAt: '2026-03-15T00:00:00.000Z' });
  });

  it("a team's own thresholds and webhook (admin API) replace the defaults, signed with the team's secret", async () => {
    const fallback = await startReceiver();
    const own = await startReceiver();
    cleanups.push(fallback.close, own.close);
    const t = await gatewayWith(fallback);
    cleanups.push(t.close);
    const response = await fetch(`${t.gateway.adminOrigin}/v1/teams/${t.team.id}/alerts`, {
      method: 'PATCH',
      headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ thresholds: [50], webhookUrl: own.url }),
    });
    const { alerts, signingSecret }: any = await response.json();
    expect(alerts).toEqual({ thresholds: [50], webhookUrl: own.url, hasSigningSecret: true });
    expect(signingSecret).toMatch(/^whsec_/);
    for (let n = 1; n <= 20; n += 1) await call(t.url('eth'), n);
    await until(() => own.received.length >= 1, 'the team event');
    await t.gateway.webhooksIdle();
    expect(fallback.received).toEqual([]);
    expect(own.received.map((r) => r.json.threshold)).toEqual([50]);
    expect(verifySignature(own.received[0]!.headers['tollgate-signature'] as string, own.received[0]!.body, signingSecret, { nowSeconds: Date.now() / 1000, toleranceSeconds: 300 })).toBe(true);
  });

  it('two gateway instances on one redis-server: each threshold is sent once in all', async () => {
    const receiver = await startReceiver();
    cleanups.push(receiver.close);
    const keyPrefix = `webhooks:${Date.now()}:`;
    const storeConfig = { driver: 'redis' as const, url: redis.url, keyPrefix, usageRetentionDays: 35, commandTimeoutMs: 2_000, failOpen: false };
    const [storeA, storeB] = [await openStore(storeConfig), await openStore(storeConfig)];
    cleanups.push(() => storeA.close(), () => storeB.close());
    const a = await gatewayWith(receiver, {}, { store: storeA, dailyCredits: 200 });
    cleanups.push(a.close);
    const b = await gatewayWith(receiver, {}, { store: storeB });
    cleanups.push(b.close);
    // A's key, called through both replicas at once: 40 calls of 5 = 200 credits, the whole quota.
    const path = new URL(a.url('eth')).pathname;
    await Promise.all(Array.from({ length: 44 }, (_, n) => call(`${(n % 2 === 0 ? a : b).gateway.rpcOrigin}${path}`, n)));
    await until(() => receiver.received.length >= 3, 'three events');
    await Promise.all([a.gateway.webhooksIdle(), b.gateway.webhooksIdle()]);
    expect(receiver.received.map((r) => r.json.threshold).sort((x, y) => x - y)).toEqual([75, 90, 100]);
    expect(receiver.received.every((r) => r.json.team === a.team.id && r.json.limit === 200)).toBe(true);
    const [peek] = await storeA.applyLedger([{ type: 'peek', teamId: a.team.id, day: today() }] as const);
    expect(peek.teamUsed).toBe(200);
  });
});

describe('delivery', () => {
  it('a receiver that fails twice gets the event on the third attempt, after backoffs of 1 s and 2 s', async () => {
    const receiver = await startReceiver((n) => (n <= 2 ? 500 : 204));
    cleanups.push(receiver.close);
    const sleeps: number[] = [];
    const t = await gatewayWith(receiver, { thresholds: [100] }, { sleeps });
    cleanups.push(t.close);
    for (let n = 1; n <= 20; n += 1) await call(t.url('eth'), n);
    await until(() => receiver.received.length >= 3, 'three attempts');
    await t.gateway.webhooksIdle();
    expect(receiver.received.map((r) => r.headers['tollgate-delivery-attempt'])).toEqual(['1', '2', '3']);
    expect(new Set(receiver.received.map((r) => r.json.id)).size).toBe(1);
    expect(sleeps).toEqual([1_000, 2_000]);
    const { deliveries }: any = await (await fetch(`${t.gateway.adminOrigin}/v1/webhook-deliveries`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).json();
    expect(deliveries.map((d: any) => [d.attempt, d.status, d.outcome])).toEqual([
      [3, 204, 'delivered'],
      [2, 500, 'failed'],
      [1, 500, 'failed'],
    ]);
    const metrics = await (await fetch(`${t.gateway.adminOrigin}/metrics`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).text();
    expect(metrics).toContain('tollgate_webhook_deliveries_total{type="quota.threshold",outcome="failed"} 2');
    expect(metrics).toContain('tollgate_webhook_deliveries_total{type="quota.threshold",outcome="delivered"} 1');
  });

  it('a receiver that never answers is bounded: maxAttempts timeouts, then the event is given up', async () => {
    const receiver = await startReceiver(() => 'hang');
    cleanups.push(receiver.close);
    const sleeps: number[] = [];
    const t = await gatewayWith(receiver, { thresholds: [100], timeoutMs: 150, maxAttempts: 4, initialBackoffMs: 10_000, maxBackoffMs: 25_000 }, { sleeps });
    cleanups.push(t.close);
    for (let n = 1; n <= 20; n += 1) await call(t.url('eth'), n);
    await until(() => receiver.received.length >= 1, 'the first attempt');
    await t.gateway.webhooksIdle();
    expect(receiver.received).toHaveLength(4);
    expect(sleeps).toEqual([10_000, 20_000, 25_000]);
    const { deliveries }: any = await (await fetch(`${t.gateway.adminOrigin}/v1/webhook-deliveries`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })).json();
    expect(deliveries.map((d: any) => [d.attempt, d.status, d.outcome])).toEqual([
      [4, null, 'timeout'],
      [3, null, 'timeout'],
      [2, null, 'timeout'],
      [1, null, 'timeout'],
    ]);
  });
});

describe('key events', () => {
  it('key.revoked once when a key is revoked (team API or admin API), key.expiring once 7 days before expiry', async () => {
    const receiver = await startReceiver();
    cleanups.push(receiver.close);
    const t = await gatewayWith(receiver);
    cleanups.push(t.close);
    const admin = (path: string, body: unknown = {}) =>
      fetch(`${t.gateway.adminOrigin}${path}`, { method: 'POST', headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) }).then((r): Promise<any> => r.json());
    const revoked = await admin(`/v1/teams/${t.team.id}/keys`, { label: 'to-revoke' });
    await admin(`/v1/keys/${revoked.key.id}/revoke`);
    await admin(`/v1/keys/${revoked.key.id}/revoke`);
    const soon = Date.now() + 3 * 86_400_000;
    const expiring = await admin(`/v1/teams/${t.team.id}/keys`, { label: 'soon', expiresAt: new Date(soon).toISOString() });
    await admin(`/v1/teams/${t.team.id}/keys`, { label: 'later', expiresAt: new Date(Date.now() + 30 * 86_400_000).toISOString() });
    await until(() => receiver.received.length >= 1, 'key.revoked');
    // The periodic check, run twice by a second process on the same store: the revoked key was
    // announced already, the expiring key is announced once.
    const config = parseConfig({ webhooks: { url: receiver.url, signingSecret: SECRET }, networks: [{ ...network, baseUrls: ['*/eth'] }] }, {}, 'test');
    const other = createAlerting(t.store, config.webhooks, { now: Date.now, sleep: async () => undefined });
    await other.keys.check();
    await other.keys.check();
    await other.sender.idle();
    await t.gateway.webhooksIdle();
    const events = receiver.received.map((r) => r.json);
    expect(events).toEqual([
      { id: expect.stringMatching(/^evt_/), type: 'key.revoked', team: t.team.id, key: { id: revoked.key.id, label: 'to-revoke' }, revokedAt: expect.any(String) },
      { id: expect.stringMatching(/^evt_/), type: 'key.expiring', team: t.team.id, key: { id: expiring.key.id, label: 'soon' }, expiresAt: new Date(soon).toISOString() },
    ]);
    for (const { headers, body } of receiver.received) {
      expect(verifySignature(headers['tollgate-signature'] as string, body, SECRET, { nowSeconds: Date.now() / 1000, toleranceSeconds: 300 })).toBe(true);
    }
  });
});
