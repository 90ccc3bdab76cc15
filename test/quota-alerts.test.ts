// The quota alert check on the request path (src/alerts/quota-alerts.ts): it reads only what the
// ledger already answered and thresholds held in memory. Against a real SQLite store whose
// alert-related calls are counted: 400 charges crossing three thresholds read the team's
// settings once and claim three events, never once per request; the hourly usage behind the
// forecast is read only to send the 75 and 90 % events (the 100 % event has none); reservations
// are checked at their settle, and a refunded reservation never fires.

import { afterEach, describe, expect, it } from 'vitest';
import { createAlertTargets } from '../src/alerts/alert-targets.js';
import { createQuotaAlerts } from '../src/alerts/quota-alerts.js';
import type { WebhookEvent, WebhookSender } from '../src/alerts/webhook-sender.js';
import { openStore, type ChargeSubject, type Store } from '../src/store/index.js';

const stores: Store[] = [];
afterEach(async () => {
  await Promise.all(stores.splice(0).map((store) => store.close()));
});

// Mid-hour: the last hour reads one day's hourly usage.
const NOW = Date.parse('2026-03-14T12:30:00Z');
const now = () => NOW;

async function setUp(dailyCredits: number) {
  const store = await openStore({ driver: 'sqlite', path: ':memory:' }, { now });
  stores.push(store);
  const team = await store.createTeam({ name: 'acme', dailyCredits });
  const key = await store.createKey({ teamId: team.id, secretHash: 'h'.repeat(64) });
  const calls = { alertSettings: 0, claimEvent: 0, hourlyUsage: 0 };
  const counted = {
    alertSettings: (teamId: string) => ((calls.alertSettings += 1), store.alertSettings(teamId)),
    claimEvent: (eventKey: string, ttlMs: number) => ((calls.claimEvent += 1), store.claimEvent(eventKey, ttlMs)),
    hourlyUsage: (query: { teamId: string; day: string }) => ((calls.hourlyUsage += 1), store.hourlyUsage(query)),
  };
  const sent: WebhookEvent[] = [];
  const sender: WebhookSender = { deliver: async (event) => (sent.push(event), true), idle: async () => undefined, close: async () => undefined };
  const alerts = createQuotaAlerts({ store: counted, targets: createAlertTargets(counted, { url: 'http://127.0.0.1:9/hook', signingSecret: 'x'.repeat(16), thresholds: [75, 90, 100] }, { now, onLoaded: (id) => alerts.settingsLoaded(id) }), sender, now });
  const ledger = alerts.watch(store);
  const day = '2026-03-14';
  const subject: ChargeSubject = { teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_call', cost: 1, day, teamDailyCredits: dailyCredits, keyDailyCap: null, teamCreditsPerSecond: null };
  // Every check the ledger started has ended: an empty `sent` then means nothing fired, not "not yet".
  const flush = () => alerts.idle();
  return { ledger, subject, calls, sent, flush };
}

describe('quota alerts on the request path', () => {
  it('400 charges crossing 75/90/100 %: one settings read, three claims, three events', async () => {
    const { ledger, subject, calls, sent, flush } = await setUp(300);
    for (let n = 0; n < 224; n += 1) await ledger.applyLedger([{ type: 'charge', subject, nowMs: NOW }]);
    await flush();
    expect(calls).toEqual({ alertSettings: 1, claimEvent: 0, hourlyUsage: 0 });
    for (let n = 224; n < 400; n += 1) await ledger.applyLedger([{ type: 'charge', subject, nowMs: NOW }]);
    await flush();
    expect(calls).toEqual({ alertSettings: 1, claimEvent: 3, hourlyUsage: 2 });
    expect(sent.map((event) => [event.threshold, event.used, 'forecast' in event])).toEqual([
      [75, 225, true],
      [90, 270, true],
      [100, 300, false],
    ]);
  });

  it('a reservation is checked when it settles; a refunded one never fires', async () => {
    const { ledger, subject, sent, flush } = await setUp(100);
    await ledger.applyLedger([{ type: 'charge', subject: { ...subject, cost: 70 }, nowMs: NOW }]);
    await flush();
    await ledger.applyLedger([{ type: 'reserve', reservationId: 'r1', subject: { ...subject, cost: 10 }, nowMs: NOW }]);
    await ledger.applyLedger([{ type: 'refund', reservationId: 'r1' }]);
    await flush();
    expect(sent).toEqual([]);
    await ledger.applyLedger([{ type: 'reserve', reservationId: 'r2', subject: { ...subject, cost: 10 }, nowMs: NOW }]);
    await flush();
    expect(sent).toEqual([]);
    await ledger.applyLedger([{ type: 'settle', reservationId: 'r2' }]);
    await flush();
    expect(sent.map((event) => event.threshold)).toEqual([75]);
  });
});
