// What the Redis driver costs in round trips where the store contract cannot see it: the
// stale-reservation sweep and key rotation are each a fixed number of script calls, whatever
// the number of reservations or secrets (they used to be several round trips per reservation,
// and awaited reads in a loop). Counted with Redis's MONITOR feed on a server of this file's own.

import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../src/store/index.js';
import { useRedis } from './helpers/redis.js';

const redis = useRedis();
let raw: Redis;
beforeAll(() => {
  raw = new Redis(redis.url);
  return () => raw.disconnect();
});

const opened: Store[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((store) => store.close()));
});

async function freshStore(): Promise<{ store: Store; prefix: string }> {
  const prefix = `ledger:${randomBytes(4).toString('hex')}:`;
  const store = await openStore({ driver: 'redis', url: redis.url, keyPrefix: prefix, usageRetentionDays: 35, commandTimeoutMs: 5_000, failOpen: false });
  opened.push(store);
  return { store, prefix };
}

/**
 * The commands clients sent while `action` ran, by name, from Redis's MONITOR feed; commands a
 * script ran inside Redis are not round trips and are left out, as is a heartbeat's SET.
 */
async function roundTrips(action: () => Promise<unknown>): Promise<string[]> {
  const monitor = await raw.monitor();
  const marker = `end-${randomBytes(4).toString('hex')}`;
  const sent: string[] = [];
  const ended = new Promise<void>((resolve) => {
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (args[0]?.toLowerCase() === 'echo' && args[1] === marker) resolve();
      else if (source !== 'lua' && args[0]?.toLowerCase() !== 'set') sent.push(args[0]!.toLowerCase());
    });
  });
  await action();
  await raw.echo(marker);
  await ended;
  monitor.disconnect();
  return sent;
}

const today = () => new Date().toISOString().slice(0, 10);

describe('Redis ledger: round trips', () => {
  it('the sweep refunds any number of a dead process’s reservations in one script call after one that finds them', async () => {
    const { store, prefix } = await freshStore();
    const team = await store.createTeam({ name: 'sweep', dailyCredits: 1_000_000 });
    const key = await store.createKey({ teamId: team.id, secretHash: randomBytes(32).toString('hex') });
    const day = today();
    const subject = { teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_call', cost: 80, day, teamDailyCredits: 1_000_000, keyDailyCap: null, teamCreditsPerSecond: null };
    // One reservation of this (living) process, and one of a living process elsewhere (its heartbeat is fresh).
    await store.applyLedger([{ type: 'reserve', reservationId: 'mine', subject, nowMs: Date.now() }]);
    await raw.set(`${prefix}owner:elsewhere:1:alive`, '1', 'PX', 30_000);
    // 50 reservations of a process on another host that died (no heartbeat), written as the driver writes them.
    const owners = [...Array.from({ length: 50 }, () => 'elsewhere:2:dead'), 'elsewhere:1:alive'];
    const multi = raw.multi();
    owners.forEach((owner, index) => {
      const id = `other-${index}`;
      multi.hset(`${prefix}resv:${id}`, { teamId: team.id, keyId: key.id, day, network: 'eth', method: 'eth_call', cost: 80, owner, createdAt: Date.now() });
      multi.zadd(`${prefix}reservations`, Date.now(), id);
      multi.incrby(`${prefix}used:team:${team.id}:${day}`, 80).incrby(`${prefix}used:key:${key.id}:${day}`, 80);
    });
    await multi.exec();
    expect((await store.applyLedger([{ type: 'peek', teamId: team.id, day }]))[0].teamUsed).toBe(52 * 80);

    await store.recoverReservations(600_000); // loads the scripts, so that what is counted is their use
    expect((await store.applyLedger([{ type: 'peek', teamId: team.id, day }]))[0].teamUsed).toBe(2 * 80);
    // Again, counted: 25 more of the dead process.
    const again = raw.multi();
    for (let index = 0; index < 25; index += 1) {
      again.hset(`${prefix}resv:late-${index}`, { teamId: team.id, keyId: key.id, day, network: 'eth', method: 'eth_call', cost: 80, owner: 'elsewhere:2:dead', createdAt: Date.now() });
      again.zadd(`${prefix}reservations`, Date.now(), `late-${index}`);
      again.incrby(`${prefix}used:team:${team.id}:${day}`, 80).incrby(`${prefix}used:key:${key.id}:${day}`, 80);
    }
    await again.exec();
    let refunded = 0;
    // One script finds them, one EXISTS per other process they name reads its heartbeat (a driver
    // read: on Redis Cluster a script may not read a key of another node), then the refunds go as
    // one batch: decided on the totals this store last saw, which the dead process (here, the
    // writes above) changed since, so the script answers with the current ones and the batch is
    // decided again and committed. Two scripts, whatever the number of reservations.
    expect(await roundTrips(async () => (refunded = await store.recoverReservations(600_000)))).toEqual(['evalsha', 'exists', 'exists', 'evalsha', 'evalsha']);
    expect(refunded).toBe(25);

    // The living reservations stay and still settle.
    expect(await store.applyLedger([{ type: 'settle', reservationId: 'mine' }])).toEqual([{ ok: true, teamUsed: 160 }]);
    expect(await raw.zrange(`${prefix}reservations`, '0', '-1')).toEqual(['other-50']);
    expect(await raw.get(`${prefix}used:key:${key.id}:${day}`)).toBe('160');
  });

  it('a sweep that finds nothing is one script call', async () => {
    const { store } = await freshStore();
    await store.recoverReservations(600_000);
    expect(await roundTrips(() => store.recoverReservations(600_000))).toEqual(['evalsha']);
  });

  it('rotating a key with many secrets is one script call', async () => {
    const { store } = await freshStore();
    const team = await store.createTeam({ name: 'rotate', dailyCredits: 1_000 });
    const key = await store.createKey({ teamId: team.id, secretHash: randomBytes(32).toString('hex') });
    for (let round = 0; round < 10; round += 1) await store.rotateKey(key.id, randomBytes(32).toString('hex'), 1_000_000 + round);
    const newest = randomBytes(32).toString('hex');
    expect(await roundTrips(() => store.rotateKey(key.id, newest, 500_000))).toEqual(['evalsha']);
    expect((await store.findKeyBySecretHash(newest))!.secretValidUntil).toBeNull();
  });

  it('a replica whose remembered values are stale commits after one retry, with the current values', async () => {
    const { store, prefix } = await freshStore();
    const team = await store.createTeam({ name: 'stale', dailyCredits: 1_000 });
    const key = await store.createKey({ teamId: team.id, secretHash: randomBytes(32).toString('hex') });
    const subject = { teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_call', cost: 80, day: today(), teamDailyCredits: 1_000, keyDailyCap: null, teamCreditsPerSecond: null };
    expect(await store.applyLedger([{ type: 'charge', subject, nowMs: Date.now() }])).toEqual([{ ok: true, teamUsed: 80 }]);
    // Another replica spends 900 of the team's 1,000.
    await raw.incrby(`${prefix}used:team:${team.id}:${today()}`, 900);
    let refused: unknown;
    expect(await roundTrips(async () => (refused = await store.applyLedger([{ type: 'charge', subject, nowMs: Date.now() }])))).toEqual(['evalsha', 'evalsha']);
    expect(refused).toEqual([{ ok: false, reason: 'daily_credits_exhausted', scope: 'team', limit: 1_000, used: 980, teamUsed: 980 }]);
    // Now known: the next batch is one call.
    let charged: unknown;
    expect(await roundTrips(async () => (charged = await store.applyLedger([{ type: 'charge', subject: { ...subject, cost: 20 }, nowMs: Date.now() }])))).toEqual(['evalsha']);
    expect(charged).toEqual([{ ok: true, teamUsed: 1_000 }]);
  });
});
