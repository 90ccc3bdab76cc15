// `tollgate serve --workers N` (server.workers) as a real process group on one SQLite file, in
// front of a real anvil: the ledger stays exact with several writer processes, a worker killed
// with SIGKILL mid-load loses no charge of an answer sent and is back (its restart awaited from
// the primary's log), and one /metrics adds up what every worker answered.

import { Agent, request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { useSeededAnvil } from './helpers/anvil.js';
import { ensureBuilt } from './helpers/build.js';
import { killSpawned } from './helpers/spawn-gateway.js';
import { until } from './helpers/until.js';
import { readGroupLedger, sampleSum, setUpGroup, startGroup, type GroupSetup } from './helpers/worker-group.js';

const BLOCK_COST = 80;
const CHAIN_ID_COST = 5;
const CONNECTIONS = 200;

const anvil = useSeededAnvil({}, { blocks: 30, txPerBlock: 1 });
const setups: GroupSetup[] = [];

beforeAll(async () => {
  await ensureBuilt();
}, 180_000);
afterEach(async () => {
  await killSpawned();
});
afterAll(() => {
  for (const setup of setups) setup.cleanUp();
});

const rpcCall = (method: string, params: unknown[], id: unknown) => JSON.stringify({ jsonrpc: '2.0', id, method, params });

async function groupOn(workers: number, dailyCredits: number): Promise<GroupSetup> {
  const setup = await setUpGroup({ workers, dailyCredits });
  setups.push(setup);
  setup.writeConfig([{ id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], upstreams: [{ id: 'anvil', url: anvil.node.url, connections: 64 }] }]);
  return setup;
}

describe.each([2, 4])('%i workers on one SQLite file', (workers) => {
  it('80,000 credits buy exactly 1,000 answers of 80 credits under 200 concurrent connections', async () => {
    const setup = await groupOn(workers, 80_000);
    const group = await startGroup(setup);
    const url = `${group.rpcOrigin}/eth/v3/${setup.secret}`;
    const client = new Agent({ connections: CONNECTIONS });
    const hashes = anvil.seed.blockHashes;
    let next = 0;
    let answered = 0;
    let refused = 0;
    const other: string[] = [];
    // Each connection asks until the gateway says the credits are gone.
    async function connection(): Promise<void> {
      for (;;) {
        const index = next++;
        const response = await request(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: rpcCall('eth_getBlockByHash', [hashes[index % hashes.length], index % 2 === 1], index),
          dispatcher: client,
        });
        const body = (await response.body.json()) as { result?: { hash?: string }; error?: { code: number } };
        if (response.statusCode === 200 && body.result?.hash === hashes[index % hashes.length]) {
          expect(response.headers['x-credits-cost']).toBe(String(BLOCK_COST));
          answered += 1;
        } else if (response.statusCode === 402) {
          expect(response.headers['x-credits-cost']).toBe('0');
          refused += 1;
          return;
        } else {
          other.push(`${response.statusCode} ${JSON.stringify(body)}`);
          return;
        }
      }
    }
    try {
      await Promise.all(Array.from({ length: CONNECTIONS }, () => connection()));
      expect(other).toStrictEqual([]);
      expect(answered).toBe(1_000);
      expect(refused).toBe(CONNECTIONS);
      expect(readGroupLedger(setup.db)).toStrictEqual({ usageCredits: 80_000, usageRequests: 1_000, teamUsed: 80_000, reservations: 0, reservedCredits: 0 });
      // Every worker wrote to the file: the connections were spread over all of them.
      const byWorker = group.requestsByWorker();
      console.log(`${workers} workers, 200 connections: ${answered} answers, ${refused} refusals; requests by worker ${JSON.stringify([...byWorker].sort())}`);
      expect([...byWorker.keys()].sort()).toStrictEqual(Array.from({ length: workers }, (_, index) => index + 1));
      for (const count of byWorker.values()) expect(count).toBeGreaterThan(0);
      const stopped = await group.stop('SIGTERM');
      expect(stopped.code).toBe(0);
    } finally {
      await client.destroy();
    }
  }, 120_000);

  it('a worker killed with SIGKILL mid-load loses no charge of an answer sent, its reservations go back, and it is back serving', async () => {
    const PLANNED = 2_000;
    const KILL_AFTER = 600;
    const setup = await groupOn(workers, 1_000_000_000);
    const group = await startGroup(setup);
    const url = `${group.rpcOrigin}/eth/v3/${setup.secret}`;
    // A connection the primary was handing to the victim as it died is never answered (Node's
    // round-robin loses it; docs/workers.md): like any client, this one gives up on it after a
    // while, and it counts as cut by the kill. Before the kill, no request may fail.
    const client = new Agent({ connections: CONNECTIONS, headersTimeout: 20_000, bodyTimeout: 20_000 });
    const victim = group.pids[0]!;
    const hashes = anvil.seed.blockHashes;
    let next = 0;
    let responses = 0;
    let killed = false;
    let receivedCredits = 0;
    let receivedAnswers = 0;
    /** What each request that got no answer would have cost (cut by the kill). */
    const unansweredCosts: number[] = [];
    const failuresBeforeKill: unknown[] = [];

    async function connection(): Promise<void> {
      while (next < PLANNED) {
        const index = next++;
        const isBlock = index % 5 !== 0;
        const cost = isBlock ? BLOCK_COST : CHAIN_ID_COST;
        const body = isBlock ? rpcCall('eth_getBlockByHash', [hashes[index % hashes.length], index % 2 === 1], index) : rpcCall('eth_chainId', [], index);
        let parsed: { result?: unknown };
        let status: number;
        let charged: unknown;
        try {
          const response = await request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body, dispatcher: client });
          status = response.statusCode;
          charged = response.headers['x-credits-cost'];
          parsed = (await response.body.json()) as { result?: unknown };
        } catch (error) {
          // Only the killed worker's connections may fail; the client goes on (a new connection
          // goes to a live worker).
          if (!killed) failuresBeforeKill.push(error);
          unansweredCosts.push(cost);
          continue;
        }
        responses += 1;
        expect(status).toBe(200);
        expect(parsed.result).toBeDefined();
        expect(charged).toBe(String(cost));
        receivedCredits += cost;
        receivedAnswers += 1;
        if (responses >= KILL_AFTER && !killed) {
          killed = true;
          process.kill(victim, 'SIGKILL');
        }
      }
    }

    try {
      await Promise.all(Array.from({ length: CONNECTIONS }, () => connection()));
      expect(killed).toBe(true);
      expect(failuresBeforeKill).toStrictEqual([]);
      const restarted = await group.waitForLine((line) => line.msg === 'worker restarted and listening' && line.slot === 1, 'the killed worker back');
      const died = group.lines.find((line) => line.msg === 'worker ended unasked; restarting it')!;
      expect(died).toMatchObject({ slot: 1, pid: victim, reason: 'SIGKILL' });
      expect(restarted.pid).not.toBe(victim);
      console.log(`${workers} workers: worker 1 (pid ${victim}) killed after ${KILL_AFTER} answers, back as pid ${restarted.pid} after ${Date.parse(String(restarted.time)) - Date.parse(String(died.time))} ms`);

      // Nothing is held any more (the primary refunded the dead worker's reservations, its
      // successor checked again at start), and the day totals agree with the usage rows.
      const after = readGroupLedger(setup.db);
      const overCount = after.usageCredits - receivedCredits;
      const bound = unansweredCosts.reduce((sum, cost) => sum + cost, 0);
      console.log(
        `${workers} workers: ${receivedAnswers} answers received (${receivedCredits} credits); ${unansweredCosts.length} cut by the kill; ` +
          `ledger ${after.usageCredits} credits / ${after.usageRequests} requests; over-count ${overCount} ≤ ${bound}`,
      );
      expect(after.reservations).toBe(0);
      expect(after.teamUsed).toBe(after.usageCredits);
      // No charge lost: every answer a client received is in the ledger.
      expect(after.usageCredits).toBeGreaterThanOrEqual(receivedCredits);
      expect(after.usageRequests).toBeGreaterThanOrEqual(receivedAnswers);
      // More only for calls cut by the kill whose charge had committed (charged before written).
      expect(overCount).toBeLessThanOrEqual(bound);

      // The group counts the restart and serves with every worker again, the new one included.
      const metrics = await group.metricsText();
      expect(sampleSum(metrics, 'tollgate_worker_restarts_total', { reason: 'SIGKILL' })).toBe(1);
      expect(sampleSum(metrics, 'tollgate_workers')).toBe(workers);
      const ready = (await (await group.admin('/readyz')).json()) as { status: string; workers: Record<string, boolean> };
      expect(ready.status).toBe('ready');
      expect(Object.keys(ready.workers)).toHaveLength(workers);
      const servedByNewBefore = group.requestsByWorker().get(1) ?? 0;
      const fresh = new Agent({ connections: workers * 2 });
      try {
        await Promise.all(
          Array.from({ length: workers * 4 }, async (_, index) => {
            const response = await request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: rpcCall('eth_chainId', [], index), dispatcher: fresh });
            expect(await response.body.json()).toStrictEqual({ jsonrpc: '2.0', id: index, result: '0x7a69' });
          }),
        );
      } finally {
        await fresh.destroy();
      }
      // The restarted worker (slot 1) served some of those new connections (its log lines follow the answers).
      await until(() => (group.requestsByWorker().get(1) ?? 0) > servedByNewBefore, 'a request served by the restarted worker');
      expect((await group.stop('SIGTERM')).code).toBe(0);
    } finally {
      await client.destroy();
    }
  }, 240_000);
});

describe('credits per second on one SQLite file', () => {
  it('the workers draw from one bucket per team: a burst over both is admitted once, not once per worker', async () => {
    const CALLS = 24;
    // eth_chainId costs 5: a bucket of 5 credits admits one call, then one more per second.
    const setup = await setUpGroup({ workers: 2, dailyCredits: 1_000_000, creditsPerSecond: CHAIN_ID_COST });
    setups.push(setup);
    setup.writeConfig([{ id: 'eth', kind: 'evm', chainId: 31337, baseUrls: ['*/eth'], upstreams: [{ id: 'anvil', url: anvil.node.url }] }]);
    const group = await startGroup(setup);
    const client = new Agent({ connections: CALLS });
    try {
      const started = performance.now();
      const statuses = await Promise.all(
        Array.from({ length: CALLS }, async (_, index) => {
          const response = await request(`${group.rpcOrigin}/eth/v3/${setup.secret}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: rpcCall('eth_chainId', [], index), dispatcher: client });
          await response.body.text();
          return response.statusCode;
        }),
      );
      const elapsedS = (performance.now() - started) / 1000;
      await until(() => [...group.requestsByWorker().values()].reduce((sum, count) => sum + count, 0) === CALLS, 'a log line per call');
      expect([...group.requestsByWorker().keys()].sort()).toStrictEqual([1, 2]);
      const admitted = statuses.filter((status) => status === 200).length;
      expect(admitted + statuses.filter((status) => status === 429).length).toBe(CALLS);
      // One full bucket plus what it refilled while the burst lasted; a bucket per worker would
      // admit one call per worker at once.
      console.log(`rate limit over 2 workers: ${admitted} of ${CALLS} admitted in ${elapsedS.toFixed(2)} s`);
      expect(admitted).toBeGreaterThanOrEqual(1);
      expect(admitted).toBeLessThanOrEqual(1 + Math.floor(elapsedS));
      expect(readGroupLedger(setup.db).usageCredits).toBe(admitted * CHAIN_ID_COST);
    } finally {
      await client.destroy();
    }
  }, 60_000);
});
