// A settle that Redis applied but whose reply never reached the gateway (the command timed out
// while the reply was on its way) must not leave a call charged whose client got a store error.
// The gateway sends the settle again: a reservation gone right after a settle was settled by it,
// so the answer goes out, charged once. A real Redis behind a TCP relay that holds Redis's replies
// from the moment the upstream is called until the gateway's next ledger command arrives.

import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { utcDay } from '../src/metering/meter.js';
import { openStore, type Store } from '../src/store/index.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { useRedis } from './helpers/redis.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';

const COST = 80;
const DAILY = 100_000;

/**
 * One client connection relayed to Redis. `hold()` keeps Redis's replies back from then on,
 * until `commandsToRelease` more ledger commands (script calls) have come from the client.
 */
interface ReplyHoldingRelay {
  url: string;
  hold(commandsToRelease: number): void;
  /** Script calls seen while replies were held. */
  heldCommands(): number;
  close(): Promise<void>;
}

async function startRelay(target: number): Promise<ReplyHoldingRelay> {
  let holding = false;
  let commandsToRelease = 0;
  let seen = 0;
  const held: Array<{ socket: Socket; chunk: Buffer }> = [];
  const sockets = new Set<Socket>();
  const release = () => {
    holding = false;
    for (const { socket, chunk } of held.splice(0)) socket.write(chunk);
  };
  const server: Server = createServer((client) => {
    const redis = createConnection({ host: '127.0.0.1', port: target });
    sockets.add(client).add(redis);
    client.on('data', (chunk: Buffer) => {
      redis.write(chunk);
      if (!holding) return;
      // A ledger commit is a script call (EVALSHA, or EVAL the first time).
      seen += chunk.toString('latin1').match(/\$(?:7\r\nevalsha|4\r\neval)\r\n/gi)?.length ?? 0;
      if (seen >= commandsToRelease) release();
    });
    redis.on('data', (chunk: Buffer) => {
      if (holding) held.push({ socket: client, chunk });
      else client.write(chunk);
    });
    const end = () => {
      client.destroy();
      redis.destroy();
    };
    client.on('close', end).on('error', end);
    redis.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hold(count) {
      holding = true;
      commandsToRelease = count;
      seen = 0;
    },
    heldCommands: () => seen,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

const redis = useRedis();
let relay: ReplyHoldingRelay;
let store: Store;
let upstream: ScriptedUpstream;
let tg: TestGateway;

beforeAll(async () => {
  relay = await startRelay(redis.port);
  // A short command timeout: the held settle times out rather than waiting for its reply.
  store = await openStore({ driver: 'redis', url: relay.url, keyPrefix: 'settle-lost:', usageRetentionDays: 35, commandTimeoutMs: 300, failOpen: false });
  upstream = await startScriptedUpstream((call) => {
    // The reserve is committed before the upstream is called: the next ledger command is the
    // settle. Its reply is held until the gateway sends another ledger command after it.
    if ((call.body as { method?: string }).method === 'eth_getBalance') relay.hold(2);
    return { kind: 'result', result: '0x10' };
  });
  tg = await startTestGateway({
    networks: [{ id: 'eth', kind: 'evm', chainId: 1, verification: 'off', upstreams: [{ id: 'u1', url: upstream.url }], methods: { eth_getBalance: COST } }],
    dailyCredits: DAILY,
    store,
  });
});

afterAll(async () => {
  await tg?.close();
  await store?.close();
  await upstream?.close();
  await relay?.close();
});

async function teamUsed(): Promise<number> {
  const [peek] = await store.applyLedger([{ type: 'peek', teamId: tg.team.id, day: utcDay(Date.now()) }]);
  return peek.teamUsed;
}

describe('a settle applied by Redis whose reply was lost', () => {
  it('is sent again: the client gets its answer, charged once, and the usage report counts it once', async () => {
    const res = await rpc(tg.url('eth'), { jsonrpc: '2.0', id: 7, method: 'eth_getBalance', params: ['0x0000000000000000000000000000000000000000', 'latest'] });
    // The settle and the next ledger command both reached Redis while replies were held.
    expect(relay.heldCommands()).toBeGreaterThanOrEqual(2);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: 7, result: '0x10' });
    expect(res.headers.get('x-credits-cost')).toBe(String(COST));
    expect(await teamUsed()).toBe(COST);
    const day = utcDay(Date.now());
    await until(async () => (await store.usage({ teamId: tg.team.id, fromDay: day, toDay: day })).length > 0, 'the usage row');
    const usage = await store.usage({ teamId: tg.team.id, fromDay: day, toDay: day });
    expect(usage.map((row) => [row.method, row.requests, row.credits])).toEqual([['eth_getBalance', 1, COST]]);
    const line = tg.logLines.map((text) => JSON.parse(text) as { methods?: string[]; credits?: unknown; status?: unknown }).find((entry) => entry.methods?.includes('eth_getBalance'));
    expect(line).toMatchObject({ status: 200, credits: COST });
  });

  it('in a batch, every item whose settle was lost is sent again and answered, each charged once', async () => {
    const before = await teamUsed();
    const balance = (id: number) => ({ jsonrpc: '2.0', id, method: 'eth_getBalance', params: [`0x${String(id).padStart(40, '0')}`, 'latest'] });
    // The batch's two settles go to Redis in one ledger command, and are sent again in the next.
    const res = await rpc(tg.url('eth'), [balance(1), balance(2)]);
    expect(relay.heldCommands()).toBeGreaterThanOrEqual(2);
    expect(res.status).toBe(200);
    expect(res.body).toEqual([
      { jsonrpc: '2.0', id: 1, result: '0x10' },
      { jsonrpc: '2.0', id: 2, result: '0x10' },
    ]);
    expect(res.headers.get('x-credits-cost')).toBe(String(2 * COST));
    expect((await teamUsed()) - before).toBe(2 * COST);
  });
});
