// The Store contract (docs/store.md: one interface, two drivers): every method of
// src/store/types.ts, run unchanged against the embedded SQLite driver, the Redis driver on one
// Redis (a real redis-server on loopback) and on Redis Cluster (six real redis-servers, three
// masters and three replicas), a fresh key prefix per test. Snapshots are exported from one
// driver and imported into another, as `tollgate migrate` does.

import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import type { StoreConfig } from '../src/config/schema.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openStore, StoreConflictError, type ApiKey, type KeySettings, type ChargeSubject, type LedgerResult, type RequestQuery, type RequestRecord, type Store, type StoreSnapshot, type Team } from '../src/store/index.js';
import { useRedis, useRedisCluster } from './helpers/redis.js';
import { EMPTY_SETTINGS } from '../src/auth/key-settings.js';

// ---------------------------------------------------------------------------------------------
// Drivers

const redis = useRedis();
const cluster = useRedisCluster();
const tempDir = mkdtempSync(join(tmpdir(), 'tollgate-store-contract-'));
afterAll(() => rmSync(tempDir, { recursive: true, force: true }));

let counter = 0;
const opened: Store[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((store) => store.close().catch(() => undefined)));
});

/** An empty store, and a way to open more handles on the same data (other processes / replicas). */
interface Backing {
  store: Store;
  another(): Promise<Store>;
  /** The config these stores were opened with, for a child process to open the same backing. */
  config: StoreConfig;
}

type DriverName = 'sqlite' | 'redis' | 'redis-cluster';

async function freshBacking(driver: DriverName, options: { now?: () => number } = {}): Promise<Backing> {
  counter += 1;
  const redisConfig = { driver: 'redis' as const, keyPrefix: `contract:${counter}:${randomBytes(4).toString('hex')}:`, usageRetentionDays: 35, commandTimeoutMs: 5_000, failOpen: false };
  const config: StoreConfig =
    driver === 'sqlite'
      ? { driver: 'sqlite', path: join(tempDir, `contract-${counter}.db`) }
      : driver === 'redis'
        ? { ...redisConfig, url: redis.url }
        : { ...redisConfig, cluster: cluster.get().seeds };
  const another = async () => {
    const store = await openStore(config, options);
    opened.push(store);
    return store;
  };
  return { store: await another(), another, config };
}

// ---------------------------------------------------------------------------------------------
// Helpers

const DAY_MS = 86_400_000;
const utcDay = (ms: number): string => new Date(ms).toISOString().slice(0, 10);
const TODAY = utcDay(Date.now());
const YESTERDAY = utcDay(Date.now() - DAY_MS);
const TWO_DAYS_AGO = utcDay(Date.now() - 2 * DAY_MS);

const hash = (): string => randomBytes(32).toString('hex');
const uniqueName = (label: string): string => `${label}-${randomBytes(4).toString('hex')}`;

function subject(team: Team, key: ApiKey, over: Partial<ChargeSubject> = {}): ChargeSubject {
  return {
    teamId: team.id,
    keyId: key.id,
    network: 'eth',
    method: 'eth_getBlockByHash',
    cost: 80,
    day: TODAY,
    teamDailyCredits: team.dailyCredits,
    keyDailyCap: key.dailyCap,
    teamCreditsPerSecond: team.creditsPerSecond,
    ...over,
  };
}

async function teamWithKey(store: Store, team: { dailyCredits: number; creditsPerSecond?: number | null }, key: { dailyCap?: number | null } = {}) {
  const created = await store.createTeam({ name: uniqueName('team'), ...team });
  const secretHash = hash();
  const apiKey = await store.createKey({ teamId: created.id, secretHash, ...key });
  return { team: created, key: apiKey, secretHash };
}

async function peek(store: Store, teamId: string, day = TODAY): Promise<number> {
  const [result] = await store.applyLedger([{ type: 'peek', teamId, day }]);
  return result!.teamUsed;
}

async function charge(store: Store, s: ChargeSubject, nowMs = Date.now()): Promise<LedgerResult> {
  const [result] = await store.applyLedger([{ type: 'charge', subject: s, nowMs }]);
  return result!;
}

const byName = (a: Team, b: Team) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
const byId = <T extends { id: string }>(a: T, b: T) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** A snapshot in a canonical order, for comparing what two drivers exported. */
function canonical(snapshot: StoreSnapshot): StoreSnapshot {
  return {
    ...snapshot,
    teams: [...snapshot.teams].sort(byId),
    keys: [...snapshot.keys]
      .sort(byId)
      .map((key) => ({ ...key, secrets: [...key.secrets].sort((a, b) => (a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0)) })),
    usage: snapshot.usage,
  };
}

// ---------------------------------------------------------------------------------------------
// The contract, per driver

describe.each<DriverName>(['sqlite', 'redis', 'redis-cluster'])('Store contract: %s driver', (driver) => {
  describe('shared secrets', () => {
    it('the first candidate stored under a name wins, for every handle on the same data; names are separate', async () => {
      const { store, another } = await freshBacking(driver);
      expect(await store.sharedSecret('filter-ids', 'first')).toBe('first');
      const replica = await another();
      expect(await replica.sharedSecret('filter-ids', 'second')).toBe('first');
      expect(await store.sharedSecret('filter-ids', 'third')).toBe('first');
      expect(await replica.sharedSecret('other', 'own')).toBe('own');
      // Concurrent first writers under a new name still agree on one value.
      const raced = await Promise.all([store.sharedSecret('raced', 'a'), replica.sharedSecret('raced', 'b')]);
      expect(raced[0]).toBe(raced[1]);
    });
  });

  describe('teams', () => {
    it('creates a team and finds it by id and by name; lists teams', async () => {
      const { store } = await freshBacking(driver);
      const before = Date.now();
      const alpha = await store.createTeam({ name: 'alpha', dailyCredits: 1_000, creditsPerSecond: 50 });
      const beta = await store.createTeam({ name: 'beta', dailyCredits: 2_000 });
      expect(alpha).toEqual({ id: expect.stringMatching(/^team_[0-9a-f]{16}$/), name: 'alpha', dailyCredits: 1_000, creditsPerSecond: 50, createdAt: expect.any(Number) });
      expect(alpha.createdAt).toBeGreaterThanOrEqual(before);
      expect(beta.creditsPerSecond).toBeNull();
      expect(alpha.id).not.toBe(beta.id);

      expect(await store.findTeam(alpha.id)).toEqual(alpha);
      expect(await store.findTeam('alpha')).toEqual(alpha);
      expect(await store.findTeam('beta')).toEqual(beta);
      expect(await store.findTeam('gamma')).toBeNull();
      expect(await store.findTeam('team_0000000000000000')).toBeNull();
      expect((await store.listTeams()).sort(byName)).toEqual([alpha, beta]);
    });

    it('updates a team, clears creditsPerSecond with null, and leaves unnamed fields alone', async () => {
      const { store } = await freshBacking(driver);
      const team = await store.createTeam({ name: 'upd', dailyCredits: 1_000, creditsPerSecond: 50 });

      expect(await store.updateTeam(team.id, { dailyCredits: 5_000 })).toEqual({ ...team, dailyCredits: 5_000 });
      expect(await store.updateTeam(team.id, { creditsPerSecond: 70 })).toEqual({ ...team, dailyCredits: 5_000, creditsPerSecond: 70 });
      expect(await store.updateTeam(team.id, { creditsPerSecond: null })).toEqual({ ...team, dailyCredits: 5_000, creditsPerSecond: null });
      expect(await store.updateTeam(team.id, {})).toEqual({ ...team, dailyCredits: 5_000, creditsPerSecond: null });
      expect(await store.findTeam(team.id)).toEqual({ ...team, dailyCredits: 5_000, creditsPerSecond: null });
      expect(await store.updateTeam('team_0000000000000000', { dailyCredits: 1 })).toBeNull();
    });

    it('refuses a duplicate team name with StoreConflictError and keeps the first team', async () => {
      const { store } = await freshBacking(driver);
      const first = await store.createTeam({ name: 'dup', dailyCredits: 100 });
      await expect(store.createTeam({ name: 'dup', dailyCredits: 999 })).rejects.toBeInstanceOf(StoreConflictError);
      expect(await store.findTeam('dup')).toEqual(first);
      expect(await store.listTeams()).toEqual([first]);
    });
  });

  describe('keys', () => {
    it('creates keys and finds them by id, by secret hash, and in lists (all and by team)', async () => {
      const { store } = await freshBacking(driver);
      const teamA = await store.createTeam({ name: 'a', dailyCredits: 1_000 });
      const teamB = await store.createTeam({ name: 'b', dailyCredits: 1_000 });
      const hashA1 = hash();
      const before = Date.now();
      const a1 = await store.createKey({
        teamId: teamA.id,
        secretHash: hashA1,
        label: 'ci',
        dailyCap: 500,
        allowedNetworks: ['eth', 'solana'],
        expiresAt: before + 60_000,
      });
      const a2 = await store.createKey({ teamId: teamA.id, secretHash: hash() });
      const b1 = await store.createKey({ teamId: teamB.id, secretHash: hash(), allowedNetworks: [] });

      expect(a1).toEqual({
        id: expect.stringMatching(/^key_[0-9a-f]{16}$/),
        teamId: teamA.id,
        label: 'ci',
        dailyCap: 500,
        allowedNetworks: ['eth', 'solana'],
        expiresAt: before + 60_000,
        revokedAt: null,
        createdAt: expect.any(Number),
        settings: null,
        hasKeySecret: false,
      });
      expect(a1.createdAt).toBeGreaterThanOrEqual(before);
      expect(a2).toMatchObject({ teamId: teamA.id, label: null, dailyCap: null, allowedNetworks: null, expiresAt: null, revokedAt: null });
      expect(b1.allowedNetworks).toEqual([]);

      expect(await store.findKey(a1.id)).toEqual(a1);
      expect(await store.findKey('key_0000000000000000')).toBeNull();
      expect(await store.findKeyBySecretHash(hashA1)).toEqual({ key: a1, team: teamA, secretValidUntil: null, keySecretHash: null });
      expect(await store.findKeyBySecretHash(hash())).toBeNull();

      expect((await store.listKeys()).sort(byId)).toEqual([a1, a2, b1].sort(byId));
      expect((await store.listKeys({ teamId: teamA.id })).sort(byId)).toEqual([a1, a2].sort(byId));
      expect(await store.listKeys({ teamId: teamB.id })).toEqual([b1]);
      expect(await store.listKeys({ teamId: 'team_0000000000000000' })).toEqual([]);
    });

    it('updates a key: sets and clears each field, leaves unnamed fields alone', async () => {
      const { store } = await freshBacking(driver);
      const { key, secretHash, team } = await teamWithKey(store, { dailyCredits: 1_000 }, { dailyCap: 100 });

      const updated = await store.updateKey(key.id, { label: 'renamed', allowedNetworks: ['eth'], expiresAt: 42 });
      expect(updated).toEqual({ ...key, label: 'renamed', allowedNetworks: ['eth'], expiresAt: 42 });
      const cleared = await store.updateKey(key.id, { label: null, dailyCap: null, allowedNetworks: null, expiresAt: null });
      expect(cleared).toEqual({ ...key, label: null, dailyCap: null, allowedNetworks: null, expiresAt: null });
      expect(await store.updateKey(key.id, {})).toEqual(cleared);
      expect(await store.findKeyBySecretHash(secretHash)).toEqual({ key: cleared, team, secretValidUntil: null, keySecretHash: null });
      expect(await store.updateKey('key_0000000000000000', { label: 'x' })).toBeNull();
    });

    it('stores key settings and the key secret hash: set, replaced, cleared; other fields left alone; found with the key', async () => {
      const { store, another } = await freshBacking(driver);
      const { key, secretHash, team } = await teamWithKey(store, { dailyCredits: 1_000 }, { dailyCap: 100 });
      const settings: KeySettings = {
        allowedOrigins: ['https://app.example.com', 'https://*.example.org'],
        allowedUserAgents: ['MyDapp'],
        allowedIps: ['10.0.0.0/8', '2001:db8::/32'],
        allowedMethods: ['eth_call', 'net_*'],
        allowedAddresses: [`0x${'a'.repeat(40)}`],
        requireSecret: true,
        requireJwt: false,
        jwtKeys: [{ id: 'k1', alg: 'ES256', jwk: { kty: 'EC', crv: 'P-256', x: 'x', y: 'y' } }],
        jwtAudience: 'tollgate',
      };
      const keySecretHash = hash();
      const updated = await store.updateKey(key.id, { settings, keySecretHash });
      expect(updated).toEqual({ ...key, settings, hasKeySecret: true });
      // Another handle (another process or replica) reads the same.
      expect(await (await another()).findKeyBySecretHash(secretHash)).toEqual({ key: updated, team, secretValidUntil: null, keySecretHash });
      expect(await store.updateKey(key.id, { label: 'renamed' })).toEqual({ ...updated, label: 'renamed' });
      const narrowed = { ...settings, allowedMethods: ['eth_getBalance'] };
      expect((await store.updateKey(key.id, { settings: narrowed }))!.settings).toEqual(narrowed);
      const cleared = await store.updateKey(key.id, { settings: null, keySecretHash: null });
      expect(cleared).toEqual({ ...key, label: 'renamed', settings: null, hasKeySecret: false });
      expect((await store.findKeyBySecretHash(secretHash))!.keySecretHash).toBeNull();
      const created = await store.createKey({ teamId: team.id, secretHash: hash(), settings });
      expect(created.settings).toEqual(settings);
      expect(await store.findKey(created.id)).toEqual(created);
    });

    it('revokes a key once: a second revoke keeps the first time; unknown ids give false', async () => {
      const { store } = await freshBacking(driver);
      const { key, secretHash } = await teamWithKey(store, { dailyCredits: 1_000 });
      expect(await store.revokeKey(key.id, 1_000)).toBe(true);
      expect(await store.revokeKey(key.id, 2_000)).toBe(true);
      expect((await store.findKey(key.id))!.revokedAt).toBe(1_000);
      // Revoked keys are still found by their secret (authentication decides).
      expect((await store.findKeyBySecretHash(secretHash))!.key.revokedAt).toBe(1_000);
      expect(await store.revokeKey('key_0000000000000000', 3_000)).toBe(false);
    });

    it('rotates a key: the old secret gets secretValidUntil, the new one is found, repeated rotations keep the earliest bound', async () => {
      const { store } = await freshBacking(driver);
      const { key, secretHash: first, team } = await teamWithKey(store, { dailyCredits: 1_000 });
      const second = hash();
      expect(await store.rotateKey(key.id, second, 5_000)).toBe(true);
      expect(await store.findKeyBySecretHash(first)).toEqual({ key, team, secretValidUntil: 5_000, keySecretHash: null });
      expect(await store.findKeyBySecretHash(second)).toEqual({ key, team, secretValidUntil: null, keySecretHash: null });

      const third = hash();
      expect(await store.rotateKey(key.id, third, 9_000)).toBe(true);
      expect((await store.findKeyBySecretHash(first))!.secretValidUntil).toBe(5_000);
      expect((await store.findKeyBySecretHash(second))!.secretValidUntil).toBe(9_000);
      expect((await store.findKeyBySecretHash(third))!.secretValidUntil).toBeNull();

      expect(await store.rotateKey('key_0000000000000000', hash(), 1)).toBe(false);
    });

    it('two rotations at once: each is atomic, the first secret keeps the earlier bound and both new secrets work', async () => {
      const { store, another } = await freshBacking(driver);
      const { key, secretHash: first } = await teamWithKey(store, { dailyCredits: 1_000 });
      const [second, third] = [hash(), hash()];
      await Promise.all([store.rotateKey(key.id, second, 5_000), (await another()).rotateKey(key.id, third, 9_000)]);
      expect((await store.findKeyBySecretHash(first))!.secretValidUntil).toBe(5_000);
      const bounds = [(await store.findKeyBySecretHash(second))!.secretValidUntil, (await store.findKeyBySecretHash(third))!.secretValidUntil];
      // Whichever ran second bounded the other's new secret by its own bound.
      expect([
        [9_000, null],
        [null, 5_000],
      ]).toContainEqual(bounds);
    });
  });

  describe('ledger', () => {
    it('charges within the quota and records one usage row', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000 });
      expect(await charge(store, subject(team, key))).toEqual({ ok: true, teamUsed: 80 });
      expect(await charge(store, subject(team, key))).toEqual({ ok: true, teamUsed: 160 });
      expect(await peek(store, team.id)).toBe(160);
      expect(await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY })).toEqual([
        { day: TODAY, teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_getBlockByHash', credits: 160, requests: 2 },
      ]);
    });

    it('refuses a charge over the team quota (scope team, with limit and used) and charges nothing', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 200 });
      expect(await charge(store, subject(team, key))).toEqual({ ok: true, teamUsed: 80 });
      expect(await charge(store, subject(team, key))).toEqual({ ok: true, teamUsed: 160 });
      expect(await charge(store, subject(team, key))).toEqual({
        ok: false,
        reason: 'daily_credits_exhausted',
        scope: 'team',
        limit: 200,
        used: 160,
        teamUsed: 160,
      });
      // A cheaper call still fits.
      expect(await charge(store, subject(team, key, { method: 'eth_chainId', cost: 40 }))).toEqual({ ok: true, teamUsed: 200 });
      expect(await peek(store, team.id)).toBe(200);
      const rows = await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY });
      expect(rows.reduce((sum, row) => sum + row.credits, 0)).toBe(200);
    });

    it("refuses a charge over the key's own cap with scope key", async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 10_000 }, { dailyCap: 100 });
      const other = await store.createKey({ teamId: team.id, secretHash: hash() });
      expect(await charge(store, subject(team, key))).toEqual({ ok: true, teamUsed: 80 });
      expect(await charge(store, subject(team, key))).toEqual({
        ok: false,
        reason: 'daily_credits_exhausted',
        scope: 'key',
        limit: 100,
        used: 80,
        teamUsed: 80,
      });
      // The cap is the key's, not the team's: another key of the team still spends.
      expect(await charge(store, subject(team, other))).toEqual({ ok: true, teamUsed: 160 });
      // When both would refuse, the team quota is the one reported.
      const tight = await teamWithKey(store, { dailyCredits: 60 }, { dailyCap: 50 });
      expect(await charge(store, subject(tight.team, tight.key))).toMatchObject({ ok: false, scope: 'team', limit: 60, used: 0 });
    });

    it('limits throughput per team: rate_limited with retryAfterMs, admitted again once the bucket refilled', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000_000, creditsPerSecond: 100 });
      const t0 = Date.now();
      // The bucket starts full (one second's credits, 100): 80 fit, the next 80 need 60 more credits = 600 ms.
      expect(await charge(store, subject(team, key), t0)).toEqual({ ok: true, teamUsed: 80 });
      expect(await charge(store, subject(team, key), t0)).toEqual({ ok: false, reason: 'rate_limited', retryAfterMs: 600, teamUsed: 80 });
      expect(await charge(store, subject(team, key), t0 + 300)).toEqual({ ok: false, reason: 'rate_limited', retryAfterMs: 300, teamUsed: 80 });
      expect(await charge(store, subject(team, key), t0 + 600)).toEqual({ ok: true, teamUsed: 160 });
      // A refused call charged nothing.
      expect(await peek(store, team.id)).toBe(160);
      // Another team has its own bucket.
      const other = await teamWithKey(store, { dailyCredits: 1_000_000, creditsPerSecond: 100 });
      expect(await charge(store, subject(other.team, other.key), t0 + 600)).toEqual({ ok: true, teamUsed: 80 });
    });

    it("the bucket's time never goes back: a charge stamped earlier (a replica whose clock is behind) does not refill it", async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000_000, creditsPerSecond: 100 });
      const t0 = Date.now();
      expect(await charge(store, subject(team, key), t0)).toEqual({ ok: true, teamUsed: 80 });
      expect(await charge(store, subject(team, key), t0 - 5_000)).toEqual({ ok: false, reason: 'rate_limited', retryAfterMs: 600, teamUsed: 80 });
      // 300 ms after the first draw, not 5.3 s: still 300 ms to wait.
      expect(await charge(store, subject(team, key), t0 + 300)).toEqual({ ok: false, reason: 'rate_limited', retryAfterMs: 300, teamUsed: 80 });
      expect(await charge(store, subject(team, key), t0 + 600)).toEqual({ ok: true, teamUsed: 160 });
    });

    it('a reservation made and settled in one batch is charged once and leaves nothing held', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000 });
      const results = await store.applyLedger([
        { type: 'reserve', reservationId: 'r-same-batch', subject: subject(team, key), nowMs: Date.now() - 60_000 },
        { type: 'settle', reservationId: 'r-same-batch' },
        { type: 'settle', reservationId: 'r-same-batch' },
      ]);
      expect(results).toEqual([{ ok: true, teamUsed: 80 }, { ok: true, teamUsed: 80 }, { ok: false, reason: 'reservation_gone' }]);
      expect(await store.recoverReservations(0)).toBe(0);
      expect(await peek(store, team.id)).toBe(80);
      expect(await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY })).toEqual([
        { day: TODAY, teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_getBlockByHash', credits: 80, requests: 1 },
      ]);
    });

    it('reserve then settle: teamUsed is held at reserve time and unchanged by the settle, which writes the usage row', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000 });
      const [reserved] = await store.applyLedger([{ type: 'reserve', reservationId: 'r-settle', subject: subject(team, key), nowMs: Date.now() }]);
      expect(reserved).toEqual({ ok: true, teamUsed: 80 });
      expect(await peek(store, team.id)).toBe(80);
      expect(await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY })).toEqual([]);

      const [settled] = await store.applyLedger([{ type: 'settle', reservationId: 'r-settle' }]);
      expect(settled).toEqual({ ok: true, teamUsed: 80 });
      expect(await peek(store, team.id)).toBe(80);
      expect(await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY })).toEqual([
        { day: TODAY, teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_getBlockByHash', credits: 80, requests: 1 },
      ]);
      // Settling twice does not charge twice.
      await store.applyLedger([{ type: 'settle', reservationId: 'r-settle' }]);
      expect(await peek(store, team.id)).toBe(80);
      expect((await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY }))[0]!.credits).toBe(80);
    });

    it('reserve then refund gives the credits back and writes no usage', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000 });
      expect(await charge(store, subject(team, key, { method: 'eth_chainId', cost: 5 }))).toEqual({ ok: true, teamUsed: 5 });
      const results = await store.applyLedger([{ type: 'reserve', reservationId: 'r-refund', subject: subject(team, key), nowMs: Date.now() }]);
      expect(results).toEqual([{ ok: true, teamUsed: 85 }]);
      expect(await store.applyLedger([{ type: 'refund', reservationId: 'r-refund' }])).toEqual([{ ok: true, teamUsed: 5 }]);
      expect(await peek(store, team.id)).toBe(5);
      // A second refund (or a settle after the refund) changes nothing.
      await store.applyLedger([{ type: 'refund', reservationId: 'r-refund' }, { type: 'settle', reservationId: 'r-refund' }]);
      expect(await peek(store, team.id)).toBe(5);
      expect(await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY })).toEqual([
        { day: TODAY, teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_chainId', credits: 5, requests: 1 },
      ]);
      // The key's day total went back too: a cap of exactly the remaining room admits again.
      expect(await charge(store, subject(team, key, { keyDailyCap: 85 }))).toEqual({ ok: true, teamUsed: 85 });
    });

    it('reverse gives back a charge whose answer was not written: day totals, key total and usage row (credits and requests)', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000 });
      expect(await charge(store, subject(team, key))).toEqual({ ok: true, teamUsed: 80 });
      expect(await charge(store, subject(team, key))).toEqual({ ok: true, teamUsed: 160 });
      expect(await store.applyLedger([{ type: 'reverse', subject: subject(team, key) }])).toEqual([{ ok: true, teamUsed: 80 }]);
      expect(await peek(store, team.id)).toBe(80);
      expect(await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY })).toEqual([
        { day: TODAY, teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_getBlockByHash', credits: 80, requests: 1 },
      ]);
      // The key's day total went back too: a cap of exactly the remaining room admits again.
      expect(await charge(store, subject(team, key, { keyDailyCap: 160 }))).toEqual({ ok: true, teamUsed: 160 });
    });

    it('settle or refund of an unknown reservation is harmless, and says the reservation is gone', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000 });
      await charge(store, subject(team, key));
      const results = await store.applyLedger([
        { type: 'settle', reservationId: 'never-reserved' },
        { type: 'refund', reservationId: 'never-reserved-either' },
      ]);
      // Was { ok: true, teamUsed: 0 }, which a caller could not tell from a charge (issue 16).
      expect(results).toEqual([
        { ok: false, reason: 'reservation_gone' },
        { ok: false, reason: 'reservation_gone' },
      ]);
      expect(await peek(store, team.id)).toBe(80);
      expect((await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY })).map((row) => row.credits)).toEqual([80]);
    });

    it('peek reads a day without changing it (0 for a day with no spend)', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000 });
      expect(await peek(store, team.id)).toBe(0);
      await charge(store, subject(team, key));
      expect(await store.applyLedger([{ type: 'peek', teamId: team.id, day: TODAY }, { type: 'peek', teamId: team.id, day: YESTERDAY }])).toEqual([
        { ok: true, teamUsed: 80 },
        { ok: true, teamUsed: 0 },
      ]);
      expect(await peek(store, 'team_0000000000000000')).toBe(0);
    });

    it('applies the operations of one batch in order (3 charges of 80 against 200: ok, ok, refused)', async () => {
      const { store } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 200 });
      const nowMs = Date.now();
      const results = await store.applyLedger([
        { type: 'peek', teamId: team.id, day: TODAY },
        { type: 'charge', subject: subject(team, key), nowMs },
        { type: 'reserve', reservationId: 'r-batch', subject: subject(team, key), nowMs },
        { type: 'charge', subject: subject(team, key), nowMs },
        { type: 'refund', reservationId: 'r-batch' },
        { type: 'charge', subject: subject(team, key), nowMs },
        { type: 'peek', teamId: team.id, day: TODAY },
      ]);
      expect(results).toEqual([
        { ok: true, teamUsed: 0 },
        { ok: true, teamUsed: 80 },
        { ok: true, teamUsed: 160 },
        { ok: false, reason: 'daily_credits_exhausted', scope: 'team', limit: 200, used: 160, teamUsed: 160 },
        { ok: true, teamUsed: 80 },
        { ok: true, teamUsed: 160 },
        { ok: true, teamUsed: 160 },
      ]);
      const plain = await teamWithKey(store, { dailyCredits: 200 });
      const three = await store.applyLedger([1, 2, 3].map(() => ({ type: 'charge' as const, subject: subject(plain.team, plain.key), nowMs })));
      expect(three).toEqual([
        { ok: true, teamUsed: 80 },
        { ok: true, teamUsed: 160 },
        { ok: false, reason: 'daily_credits_exhausted', scope: 'team', limit: 200, used: 160, teamUsed: 160 },
      ]);
      expect(await peek(store, plain.team.id)).toBe(160);
      expect((await store.usage({ teamId: plain.team.id, fromDay: TODAY, toDay: TODAY }))[0]).toMatchObject({ credits: 160, requests: 2 });

      // A run of identical charges that meets the throughput limit part-way (the Redis driver
      // answers such a run with one script call): each charge gets its own, ordered outcome.
      const limited = await teamWithKey(store, { dailyCredits: 10_000 });
      await store.updateTeam(limited.team.id, { creditsPerSecond: 200 });
      const rateLimited = { ...subject(limited.team, limited.key), teamCreditsPerSecond: 200 };
      const burst = await store.applyLedger([1, 2, 3, 4].map(() => ({ type: 'charge' as const, subject: rateLimited, nowMs })));
      expect(burst.slice(0, 2)).toEqual([
        { ok: true, teamUsed: 80 },
        { ok: true, teamUsed: 160 },
      ]);
      for (const refused of burst.slice(2)) expect(refused).toEqual({ ok: false, reason: 'rate_limited', retryAfterMs: 200, teamUsed: 160 });
    });

    it('reports usage by team and by key over a day range, one row per day, key, network and method', async () => {
      const { store } = await freshBacking(driver);
      const { team, key: k1 } = await teamWithKey(store, { dailyCredits: 1_000_000 });
      const k2 = await store.createKey({ teamId: team.id, secretHash: hash() });
      const otherTeam = await teamWithKey(store, { dailyCredits: 1_000_000 });
      const [first, second] = [k1, k2].sort(byId) as [ApiKey, ApiKey];
      const s = (key: ApiKey, day: string, network: string, method: string, cost: number) => ({
        type: 'charge' as const,
        subject: subject(team, key, { day, network, method, cost }),
        nowMs: Date.now(),
      });
      await store.applyLedger([
        s(first, TWO_DAYS_AGO, 'eth', 'eth_getBlockByHash', 80),
        s(first, TWO_DAYS_AGO, 'eth', 'eth_getBlockByHash', 80),
        // Network ids of different lengths, and a prefix of another: rows order by network, then method.
        s(first, YESTERDAY, 'eth-sepolia', 'eth_chainId', 5),
        s(first, YESTERDAY, 'eth', 'eth_getBlockByHash', 80),
        s(second, YESTERDAY, 'eth', 'eth_chainId', 5),
        s(second, TODAY, 'solana', 'getAssetsByGroup', 160),
        { type: 'charge', subject: subject(otherTeam.team, otherTeam.key, { day: YESTERDAY }), nowMs: Date.now() },
      ]);
      // A reservation in flight is not usage.
      await store.applyLedger([{ type: 'reserve', reservationId: 'r-usage', subject: subject(team, first, { day: YESTERDAY }), nowMs: Date.now() }]);

      const row = (key: ApiKey, day: string, network: string, method: string, credits: number, requests: number) => ({
        day,
        teamId: team.id,
        keyId: key.id,
        network,
        method,
        credits,
        requests,
      });
      expect(await store.usage({ teamId: team.id, fromDay: TWO_DAYS_AGO, toDay: YESTERDAY })).toEqual([
        row(first, TWO_DAYS_AGO, 'eth', 'eth_getBlockByHash', 160, 2),
        row(first, YESTERDAY, 'eth', 'eth_getBlockByHash', 80, 1),
        row(first, YESTERDAY, 'eth-sepolia', 'eth_chainId', 5, 1),
        row(second, YESTERDAY, 'eth', 'eth_chainId', 5, 1),
      ]);
      expect(await store.usage({ keyId: second.id, fromDay: YESTERDAY, toDay: TODAY })).toEqual([
        row(second, YESTERDAY, 'eth', 'eth_chainId', 5, 1),
        row(second, TODAY, 'solana', 'getAssetsByGroup', 160, 1),
      ]);
      expect(await store.usage({ keyId: first.id, fromDay: TODAY, toDay: TODAY })).toEqual([]);
      expect(await store.usage({ teamId: team.id, keyId: second.id, fromDay: TODAY, toDay: TODAY })).toEqual([row(second, TODAY, 'solana', 'getAssetsByGroup', 160, 1)]);
      // Without a filter: every team.
      const all = await store.usage({ fromDay: YESTERDAY, toDay: YESTERDAY });
      expect(all.filter((r) => r.teamId === otherTeam.team.id)).toEqual([
        { day: YESTERDAY, teamId: otherTeam.team.id, keyId: otherTeam.key.id, network: 'eth', method: 'eth_getBlockByHash', credits: 80, requests: 1 },
      ]);
      expect(all.filter((r) => r.teamId === team.id)).toHaveLength(3);
    });

    it('refunds reservations older than the bound, and those of a process that died; live ones stay', async () => {
      const { store, another, config } = await freshBacking(driver);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000 });
      const nowMs = Date.now();
      await store.applyLedger([
        { type: 'reserve', reservationId: 'old', subject: subject(team, key), nowMs: nowMs - 60_000 },
        { type: 'reserve', reservationId: 'live', subject: subject(team, key), nowMs },
      ]);
      expect(await peek(store, team.id)).toBe(160);
      expect(await store.recoverReservations(30_000)).toBe(1);
      expect(await peek(store, team.id)).toBe(80);
      expect(await store.recoverReservations(30_000)).toBe(0);
      // The live reservation still settles normally.
      expect(await store.applyLedger([{ type: 'settle', reservationId: 'live' }])).toEqual([{ ok: true, teamUsed: 80 }]);
      // The old one was refunded: settling it now charges nothing, and says so.
      expect(await store.applyLedger([{ type: 'settle', reservationId: 'old' }])).toEqual([{ ok: false, reason: 'reservation_gone' }]);
      expect(await peek(store, team.id)).toBe(80);
      expect((await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY }))[0]!.credits).toBe(80);

      // A process that died mid-request leaves a fresh reservation: the next store opened refunds it.
      const op = { type: 'reserve', reservationId: 'orphan', subject: subject(team, key), nowMs: Date.now() };
      const child = spawnSync(process.execPath, ['--import', 'tsx', 'test/helpers/reserve-and-exit.ts', JSON.stringify({ storeConfig: config, op })], {
        encoding: 'utf8',
      });
      expect(child.status, child.stderr).toBe(0);
      expect(JSON.parse(child.stdout)).toEqual({ ok: true, teamUsed: 160 });
      expect(await peek(store, team.id)).toBe(160);
      // Another store of this (living) process is not taken for dead: it keeps its reservation.
      await (await another()).applyLedger([{ type: 'reserve', reservationId: 'sibling', subject: subject(team, key), nowMs: Date.now() }]);
      const successor = await another();
      expect(await successor.recoverReservations(10 * 60_000)).toBe(1);
      expect(await peek(store, team.id)).toBe(160);
      expect(await store.applyLedger([{ type: 'refund', reservationId: 'sibling' }])).toEqual([{ ok: true, teamUsed: 80 }]);
    });

    it('200 concurrent charges of 80 against 8,000 credits, over several store handles: exactly 100 succeed', async () => {
      const { store, another } = await freshBacking(driver);
      const handles = [store, await another(), await another(), await another()];
      const { team, key } = await teamWithKey(store, { dailyCredits: 8_000 });
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, index) =>
          handles[index % handles.length]!.applyLedger([{ type: 'charge', subject: subject(team, key), nowMs: Date.now() }]).then(([result]) => result!),
        ),
      );
      const ok = results.filter((result) => result.ok);
      expect(ok).toHaveLength(100);
      expect(results.filter((result) => !result.ok && result.reason === 'daily_credits_exhausted' && result.scope === 'team')).toHaveLength(100);
      // Every admitted charge saw a distinct balance: 80, 160, …, 8,000.
      expect(ok.map((result) => result.teamUsed).sort((a, b) => a - b)).toEqual(Array.from({ length: 100 }, (_, index) => (index + 1) * 80));
      expect(await peek(store, team.id)).toBe(8_000);
      expect(await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY })).toEqual([
        { day: TODAY, teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_getBlockByHash', credits: 8_000, requests: 100 },
      ]);
    });

    it('200 concurrent reservations of 80 against 8,000, then settle or refund: exactly 100 held, refunds free the room', async () => {
      const { store, another } = await freshBacking(driver);
      const handles = [store, await another()];
      const { team, key } = await teamWithKey(store, { dailyCredits: 8_000 });
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, index) =>
          handles[index % 2]!.applyLedger([{ type: 'reserve', reservationId: `c-${index}`, subject: subject(team, key), nowMs: Date.now() }]).then(([result]) => ({ index, ok: result!.ok })),
        ),
      );
      const held = results.filter((result) => result.ok).map((result) => result.index);
      expect(held).toHaveLength(100);
      // Settle half, refund half, concurrently.
      await Promise.all(held.map((index, n) => handles[n % 2]!.applyLedger([{ type: n % 2 === 0 ? 'settle' : 'refund', reservationId: `c-${index}` }])));
      expect(await peek(store, team.id)).toBe(4_000);
      expect(await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY })).toEqual([
        { day: TODAY, teamId: team.id, keyId: key.id, network: 'eth', method: 'eth_getBlockByHash', credits: 4_000, requests: 50 },
      ]);
    });
  });

  describe('team self-service (team tokens, alert settings, event claims, deliveries, hourly usage)', () => {
    it('creates team tokens, finds them by hash (revoked too), lists them per team, revokes once', async () => {
      const { store } = await freshBacking(driver);
      const a = await store.createTeam({ name: uniqueName('a'), dailyCredits: 1 });
      const b = await store.createTeam({ name: uniqueName('b'), dailyCredits: 1 });
      const hashA = hash();
      const tokenA = await store.createTeamToken({ teamId: a.id, tokenHash: hashA, label: 'ci' });
      const tokenB = await store.createTeamToken({ teamId: b.id, tokenHash: hash() });
      expect(tokenA).toMatchObject({ teamId: a.id, label: 'ci', revokedAt: null });
      expect(tokenB.label).toBeNull();
      expect(await store.findTeamTokenByHash(hashA)).toEqual(tokenA);
      expect(await store.findTeamTokenByHash(hash())).toBeNull();
      expect(await store.listTeamTokens({ teamId: a.id })).toEqual([tokenA]);
      expect((await store.listTeamTokens()).map((token) => token.id).sort()).toEqual([tokenA.id, tokenB.id].sort());
      expect(await store.revokeTeamToken(tokenA.id, 1_000)).toBe(true);
      expect(await store.revokeTeamToken(tokenA.id, 2_000)).toBe(true);
      expect(await store.revokeTeamToken('tok_missing', 2_000)).toBe(false);
      expect((await store.findTeamTokenByHash(hashA))!.revokedAt).toBe(1_000);
      expect((await store.listTeamTokens({ teamId: b.id }))[0]!.revokedAt).toBeNull();
    });

    it('keeps alert settings per team, replaced as a whole; null for a team without any', async () => {
      const { store } = await freshBacking(driver);
      const team = await store.createTeam({ name: uniqueName('t'), dailyCredits: 1 });
      expect(await store.alertSettings(team.id)).toBeNull();
      await store.setAlertSettings(team.id, { thresholds: [50, 100], webhookUrl: 'http://127.0.0.1:9/hook', signingSecret: 'whsec_x' });
      expect(await store.alertSettings(team.id)).toEqual({ thresholds: [50, 100], webhookUrl: 'http://127.0.0.1:9/hook', signingSecret: 'whsec_x' });
      await store.setAlertSettings(team.id, { thresholds: null, webhookUrl: null, signingSecret: null });
      expect(await store.alertSettings(team.id)).toEqual({ thresholds: null, webhookUrl: null, signingSecret: null });
    });

    it('claims an event once across store handles (other processes / replicas), even when claimed concurrently', async () => {
      const backing = await freshBacking(driver);
      const stores = [backing.store, await backing.another(), await backing.another()];
      const results = await Promise.all(stores.flatMap((store) => [store.claimEvent('quota.threshold:t:d:75', 60_000), store.claimEvent('quota.threshold:t:d:75', 60_000)]));
      expect(results.filter(Boolean)).toHaveLength(1);
      expect(await stores[1]!.claimEvent('quota.threshold:t:d:90', 60_000)).toBe(true);
    });

    it('records webhook delivery attempts and lists them newest first, per team or all', async () => {
      const { store } = await freshBacking(driver);
      const attempt = (teamId: string, n: number) => ({ eventId: 'evt_1', type: 'quota.threshold', teamId, attempt: n, at: 1_000 + n, status: n < 3 ? 500 : 200, outcome: n < 3 ? ('failed' as const) : ('delivered' as const), durationMs: 3 });
      for (const n of [1, 2, 3]) await store.recordDelivery(attempt('team_a', n));
      await store.recordDelivery(attempt('team_b', 1));
      expect(await store.listDeliveries({ teamId: 'team_a', limit: 10 })).toEqual([attempt('team_a', 3), attempt('team_a', 2), attempt('team_a', 1)]);
      expect(await store.listDeliveries({ limit: 2 })).toEqual([attempt('team_b', 1), attempt('team_a', 3)]);
    });

    it('counts settled usage by key and UTC hour of the settle, per team and day', async () => {
      const backing = await freshBacking(driver);
      let nowMs = Date.parse(`${TODAY}T09:15:00Z`);
      const store = await openStore(backing.config, { now: () => nowMs });
      opened.push(store);
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000_000 });
      const other = await teamWithKey(store, { dailyCredits: 1_000_000 });
      await charge(store, subject(team, key), nowMs);
      await charge(store, subject(team, key, { method: 'eth_chainId', cost: 5 }), nowMs);
      await charge(store, subject(other.team, other.key), nowMs);
      // Reserved at 09:59, settled at 11:00: counted in the hour it was answered.
      await store.applyLedger([{ type: 'reserve', reservationId: 'r-hour', subject: subject(team, key), nowMs }]);
      nowMs = Date.parse(`${TODAY}T11:00:00Z`);
      expect((await store.applyLedger([{ type: 'settle', reservationId: 'r-hour' }]))[0]!.ok).toBe(true);
      // Refunded: not counted.
      await store.applyLedger([{ type: 'reserve', reservationId: 'r-refund', subject: subject(team, key), nowMs }]);
      await store.applyLedger([{ type: 'refund', reservationId: 'r-refund' }]);
      expect(await store.hourlyUsage({ teamId: team.id, day: TODAY })).toEqual([
        { day: TODAY, hour: 9, teamId: team.id, keyId: key.id, credits: 85, requests: 2 },
        { day: TODAY, hour: 11, teamId: team.id, keyId: key.id, credits: 80, requests: 1 },
      ]);
      expect(await store.hourlyUsage({ teamId: team.id, day: YESTERDAY })).toEqual([]);
      // The hours add up to the day's usage.
      const day = await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY });
      expect(day.reduce((sum, row) => sum + row.credits, 0)).toBe(165);
    });
  });

  describe('provider spend', () => {
    it('adds spend to the usage rows of its day, team, key, network and method across handles; spend without charges is a row of its own; filters by key', async () => {
      const { store, another } = await freshBacking(driver);
      const replica = await another();
      const { team, key } = await teamWithKey(store, { dailyCredits: 1_000_000 });
      const other = await store.createKey({ teamId: team.id, secretHash: hash() });
      await store.applyLedger([{ type: 'charge', subject: subject(team, key, { day: TODAY, network: 'eth', method: 'eth_call', cost: 80 }), nowMs: Date.now() }]);
      const spend = (keyId: string, method: string, units: number, usd: number, savedUnits: number) => ({ day: TODAY, teamId: team.id, keyId, network: 'eth', method, units, usd, savedUnits });
      await store.addProviderSpend([spend(key.id, 'eth_call', 26, 0.000013, 0)]);
      await replica.addProviderSpend([spend(key.id, 'eth_call', 52, 0.000026, 26), spend(other.id, 'eth_getLogs', 75, 0, 0)]);
      const rows = await store.usage({ teamId: team.id, fromDay: TODAY, toDay: TODAY });
      const callRow = rows.find((row) => row.keyId === key.id && row.method === 'eth_call')!;
      expect(callRow).toMatchObject({ credits: 80, requests: 1, upstreamUnits: 78, savedUnits: 26 });
      expect(callRow.upstreamUsd).toBeCloseTo(0.000039, 12);
      // Calls that failed everywhere are not charged, but their attempts were billed.
      expect(rows.find((row) => row.keyId === other.id)).toEqual({ day: TODAY, teamId: team.id, keyId: other.id, network: 'eth', method: 'eth_getLogs', credits: 0, requests: 0, upstreamUnits: 75, upstreamUsd: 0, savedUnits: 0 });
      expect(rows.map((row) => row.keyId)).toEqual([key.id, other.id].sort());
      expect((await store.usage({ keyId: other.id, fromDay: TODAY, toDay: TODAY })).map((row) => row.method)).toEqual(['eth_getLogs']);
    });
  });

  describe('request explorer log', () => {
    const record = (teamId: string, at: number, extra: Partial<RequestRecord> = {}): RequestRecord => ({
      at,
      requestId: `req-${teamId}-${at}`,
      teamId,
      keyId: 'key_a',
      network: 'eth',
      transport: 'http',
      method: 'eth_chainId',
      status: 200,
      ok: true,
      credits: 0,
      latencyMs: 0.5,
      cache: null,
      upstream: null,
      upstreamCalls: null,
      errorCode: null,
      errorMessage: null,
      ...extra,
    });

    it("keeps each team's newest 1,000 across batches and handles, newest first, other teams untouched", async () => {
      const { store, another } = await freshBacking(driver);
      const replica = await another();
      // Two replicas append interleaved batches, the later one holding older requests too.
      const times = Array.from({ length: 1_100 }, (_, index) => 1_000_000 + index);
      await store.appendRequests(times.filter((at) => at % 2 === 0).slice(300).map((at) => record('team-a', at)));
      await replica.appendRequests(times.filter((at) => at % 2 === 1).map((at) => record('team-a', at)));
      await replica.appendRequests([record('team-b', 5), record('team-b', 6, { method: 'eth_call' })]);
      await store.appendRequests(times.filter((at) => at % 2 === 0).slice(0, 300).map((at) => record('team-a', at)));
      const newest = await replica.recentRequests({ teamId: 'team-a', limit: 1_000 });
      expect(newest.map((entry) => entry.at)).toEqual(times.slice(100).reverse());
      expect(newest[0]).toEqual(record('team-a', 1_001_099));
      expect((await store.recentRequests({ teamId: 'team-a', limit: 3 })).map((entry) => entry.at)).toEqual([1_001_099, 1_001_098, 1_001_097]);
      expect((await store.recentRequests({ teamId: 'team-b', limit: 10 })).map((entry) => entry.at)).toEqual([6, 5]);
      expect(await store.recentRequests({ teamId: 'team-c', limit: 10 })).toEqual([]);
    });

    it('filters by key, method (a batch matches any of its methods) and status (ok, error, an HTTP status)', async () => {
      const { store } = await freshBacking(driver);
      await store.appendRequests([
        record('t', 1),
        record('t', 2, { keyId: 'key_b', method: 'eth_call', ok: false, errorCode: 3, errorMessage: 'execution reverted' }),
        record('t', 3, { method: 'batch', methods: ['eth_blockNumber', 'eth_call'] }),
        record('t', 4, { status: 429, ok: false, errorCode: -32005, errorMessage: 'daily credit balance exhausted' }),
      ]);
      const ats = async (query: Omit<RequestQuery, 'teamId' | 'limit'>) => (await store.recentRequests({ teamId: 't', limit: 10, ...query })).map((entry) => entry.at);
      expect(await ats({})).toEqual([4, 3, 2, 1]);
      expect(await ats({ keyId: 'key_b' })).toEqual([2]);
      expect(await ats({ method: 'eth_call' })).toEqual([3, 2]);
      expect(await ats({ status: 'error' })).toEqual([4, 2]);
      expect(await ats({ status: 'ok' })).toEqual([3, 1]);
      expect(await ats({ status: 429 })).toEqual([4]);
      expect(await ats({ keyId: 'key_a', status: 'ok', method: 'eth_chainId' })).toEqual([1]);
      expect((await store.recentRequests({ teamId: 't', limit: 2 })).map((entry) => entry.at)).toEqual([4, 3]);
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Snapshots across drivers (what `tollgate migrate` relies on)

describe.each<[DriverName, DriverName]>([
  ['sqlite', 'redis'],
  ['redis', 'sqlite'],
  ['sqlite', 'redis-cluster'],
  ['redis', 'redis-cluster'],
  ['redis-cluster', 'sqlite'],
])('snapshot: export from %s, import into %s', (fromDriver, toDriver) => {
  it('keeps ids, secrets, rotation bounds, revocation, caps, and the day’s usage and totals', async () => {
    const { store: source } = await freshBacking(fromDriver);
    const { store: target } = await freshBacking(toDriver);

    const teamA = await source.createTeam({ name: uniqueName('alpha'), dailyCredits: 10_000, creditsPerSecond: 500 });
    const teamB = await source.createTeam({ name: uniqueName('beta'), dailyCredits: 1_000 });
    const capped = { secretHash: hash() };
    const keyCapped = await source.createKey({
      teamId: teamA.id,
      secretHash: capped.secretHash,
      label: 'capped',
      dailyCap: 200,
      allowedNetworks: ['eth'],
      expiresAt: Date.now() + 3_600_000,
    });
    const revokedHash = hash();
    const keyRevoked = await source.createKey({ teamId: teamA.id, secretHash: revokedHash });
    await source.revokeKey(keyRevoked.id, Date.now() - 1_000);
    const rotatedOld = hash();
    const rotatedNew = hash();
    const keyRotated = await source.createKey({ teamId: teamB.id, secretHash: rotatedOld, label: 'rotated' });
    const graceUntil = Date.now() + 60_000;
    await source.rotateKey(keyRotated.id, rotatedNew, graceUntil);
    // Key settings and the key secret's hash travel too.
    const browserSecret = hash();
    const browserKeySecret = hash();
    const keyBrowser = (await source.updateKey(
      (await source.createKey({ teamId: teamB.id, secretHash: browserSecret })).id,
      { settings: { ...EMPTY_SETTINGS, allowedOrigins: ['https://app.example.com'], requireSecret: true }, keySecretHash: browserKeySecret },
    ))!;

    await source.applyLedger([
      { type: 'charge', subject: subject(teamA, keyCapped), nowMs: Date.now() },
      { type: 'charge', subject: subject(teamA, keyCapped), nowMs: Date.now() },
      { type: 'charge', subject: subject(teamB, keyRotated, { method: 'eth_chainId', cost: 5 }), nowMs: Date.now() },
      // Yesterday's usage is not part of today's snapshot.
      { type: 'charge', subject: subject(teamB, keyRotated, { day: YESTERDAY }), nowMs: Date.now() },
      // Neither is a reservation in flight.
      { type: 'reserve', reservationId: 'in-flight', subject: subject(teamB, keyRotated), nowMs: Date.now() },
    ]);
    expect(await peek(source, teamB.id)).toBe(85);

    const snapshot = await source.exportSnapshot({ fromDay: TODAY, toDay: TODAY });
    expect([snapshot.fromDay, snapshot.toDay]).toEqual([TODAY, TODAY]);
    expect(snapshot.teams).toHaveLength(2);
    expect(snapshot.keys).toHaveLength(4);
    expect(snapshot.usage.reduce((sum, row) => sum + row.credits, 0)).toBe(165);
    await target.importSnapshot(snapshot);

    // Teams and keys keep their ids and every field.
    expect((await target.listTeams()).sort(byId)).toEqual([teamA, teamB].sort(byId));
    expect(await target.findTeam(teamA.name)).toEqual(teamA);
    expect((await target.listKeys()).sort(byId)).toEqual((await source.listKeys()).sort(byId));
    expect((await target.listKeys({ teamId: teamB.id })).map((key) => key.id).sort()).toEqual([keyRotated.id, keyBrowser.id].sort());
    expect(await target.findKeyBySecretHash(browserSecret)).toEqual({ key: keyBrowser, team: teamB, secretValidUntil: null, keySecretHash: browserKeySecret });

    // Secrets: an issued key is still found by its secret's hash, with its rotation bound and revocation.
    expect(await target.findKeyBySecretHash(capped.secretHash)).toEqual({ key: keyCapped, team: teamA, secretValidUntil: null, keySecretHash: null });
    expect((await target.findKeyBySecretHash(revokedHash))!.key.revokedAt).toBe((await source.findKey(keyRevoked.id))!.revokedAt);
    expect((await target.findKeyBySecretHash(revokedHash))!.key.revokedAt).not.toBeNull();
    expect(await target.findKeyBySecretHash(rotatedOld)).toEqual({ key: keyRotated, team: teamB, secretValidUntil: graceUntil, keySecretHash: null });
    expect(await target.findKeyBySecretHash(rotatedNew)).toEqual({ key: keyRotated, team: teamB, secretValidUntil: null, keySecretHash: null });

    // Today's usage rows and day totals (team and key) came along; yesterday and reservations did not.
    expect(await target.usage({ fromDay: TODAY, toDay: TODAY })).toEqual(await source.usage({ fromDay: TODAY, toDay: TODAY }));
    expect(await target.usage({ fromDay: YESTERDAY, toDay: YESTERDAY })).toEqual([]);
    expect(await peek(target, teamA.id)).toBe(160);
    expect(await peek(target, teamB.id)).toBe(5);
    expect(await charge(target, subject(teamA, keyCapped))).toEqual({
      ok: false,
      reason: 'daily_credits_exhausted',
      scope: 'key',
      limit: 200,
      used: 160,
      teamUsed: 160,
    });
    expect(await charge(target, subject(teamA, keyCapped, { cost: 40 }))).toEqual({ ok: true, teamUsed: 200 });

    // The imported store exports what it was given (plus the charge just made).
    const again = canonical(await target.exportSnapshot({ fromDay: TODAY, toDay: TODAY }));
    const expected = canonical(snapshot);
    expect(again.teams).toEqual(expected.teams);
    expect(again.keys).toEqual(expected.keys);
    expect(again.usage.reduce((sum, row) => sum + row.credits, 0)).toBe(205);
  });

  it('carries team tokens, alert settings, shared secrets, and the daily and hourly usage of every day in the range', async () => {
    const { store: source } = await freshBacking(fromDriver);
    const { store: target } = await freshBacking(toDriver);
    const { team, key } = await teamWithKey(source, { dailyCredits: 10_000 });
    const other = await teamWithKey(source, { dailyCredits: 10_000 });
    const tokenHash = hash();
    const token = await source.createTeamToken({ teamId: team.id, tokenHash, label: 'ci' });
    const revokedHash = hash();
    const revoked = await source.createTeamToken({ teamId: other.team.id, tokenHash: revokedHash });
    await source.revokeTeamToken(revoked.id, 1_234);
    await source.setAlertSettings(team.id, { thresholds: [50, 90], webhookUrl: 'http://127.0.0.1:9/hook', signingSecret: 'whsec_contract' });
    const filterKey = await source.sharedSecret('filter-ids', randomBytes(32).toString('hex'));
    await source.applyLedger([
      { type: 'charge', subject: subject(team, key), nowMs: Date.now() },
      { type: 'charge', subject: subject(team, key, { day: YESTERDAY }), nowMs: Date.now() },
      { type: 'charge', subject: subject(other.team, other.key, { day: TWO_DAYS_AGO, cost: 5 }), nowMs: Date.now() },
    ]);
    // The target already has a key of its own under the same name: the imported one replaces it.
    await target.sharedSecret('filter-ids', 'the target’s own');

    const snapshot = await source.exportSnapshot({ fromDay: TWO_DAYS_AGO, toDay: TODAY });
    expect(snapshot.teamTokens.map((entry) => entry.tokenHash).sort()).toEqual([tokenHash, revokedHash].sort());
    expect(snapshot.sharedSecrets).toEqual([{ name: 'filter-ids', value: filterKey }]);
    await target.importSnapshot(snapshot);

    expect(await target.findTeamTokenByHash(tokenHash)).toEqual(token);
    expect(await target.findTeamTokenByHash(revokedHash)).toEqual({ ...revoked, revokedAt: 1_234 });
    expect(await target.listTeamTokens({ teamId: team.id })).toEqual([token]);
    expect(await target.alertSettings(team.id)).toEqual({ thresholds: [50, 90], webhookUrl: 'http://127.0.0.1:9/hook', signingSecret: 'whsec_contract' });
    expect(await target.alertSettings(other.team.id)).toBeNull();
    expect(await target.sharedSecret('filter-ids', 'a new candidate')).toBe(filterKey);
    for (const day of [TWO_DAYS_AGO, YESTERDAY, TODAY]) {
      expect(await target.usage({ fromDay: day, toDay: day })).toEqual(await source.usage({ fromDay: day, toDay: day }));
      for (const { team: each } of [{ team }, other]) {
        expect(await target.hourlyUsage({ teamId: each.id, day })).toEqual(await source.hourlyUsage({ teamId: each.id, day }));
        expect(await peek(target, each.id, day)).toBe(await peek(source, each.id, day));
      }
    }
    expect((await target.hourlyUsage({ teamId: team.id, day: TODAY })).reduce((sum, row) => sum + row.credits, 0)).toBe(80);
    expect(await peek(target, other.team.id, TWO_DAYS_AGO)).toBe(5);
  });

  it('refuses a snapshot whose team name exists in the target, and leaves the target as it was', async () => {
    // The source's clock, moved by the test: it dates what the source creates.
    let clock = Date.now();
    const { store: source } = await freshBacking(fromDriver, { now: () => clock });
    const { store: target } = await freshBacking(toDriver);
    const clashName = uniqueName('clash');
    const first = await source.createTeam({ name: uniqueName('first'), dailyCredits: 100 });
    // Created later, so it comes after `first` in the snapshot: the clash is found mid-import.
    clock += 1;
    await source.createTeam({ name: clashName, dailyCredits: 100 });
    const existing = await target.createTeam({ name: clashName, dailyCredits: 5 });

    await expect(target.importSnapshot(await source.exportSnapshot({ fromDay: TODAY, toDay: TODAY }))).rejects.toBeInstanceOf(StoreConflictError);
    expect(await target.listTeams()).toEqual([existing]);
    expect(await target.findTeam(first.name)).toBeNull();
    // Nothing half-imported blocks a retry once the clash is resolved (here: a fresh team of that name works).
    expect((await target.createTeam({ name: first.name, dailyCredits: 1 })).name).toBe(first.name);
  });
});
