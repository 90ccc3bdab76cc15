// Regression (issue 16): a call whose reservation the stale-reservation sweep refunded while it
// ran used to report X-Credits-Cost for credits that were never charged (the settle came back as
// `{ok: true, teamUsed: 0}`). Its settle is now `reservation_gone`: the answer is delivered,
// and its headers and log line say it cost nothing, as the ledger does.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const DAILY = 10_000;
let tg: TestGateway;
let upstream: ScriptedUpstream;

beforeAll(async () => {
  upstream = await startScriptedUpstream(async (call) => {
    // The sweep runs while the call is upstream: every reservation counts as stale.
    if ((call.body as { method?: string }).method === 'eth_getBalance') await tg.store.recoverReservations(-60_000);
    return { kind: 'result', result: '0x10' };
  });
  tg = await startTestGateway({
    networks: [{ id: 'eth', kind: 'evm', chainId: 1, verification: 'off', upstreams: [{ id: 'u1', url: upstream.url }], methods: { eth_getBalance: 80, eth_getCode: 80 } }],
    dailyCredits: DAILY,
  });
});

afterAll(async () => {
  await tg?.close();
  await upstream?.close();
});

const call = (method: string, id = 1) => ({ jsonrpc: '2.0', id, method, params: ['0x0000000000000000000000000000000000000000', 'latest'] });

describe('a reservation swept while its call ran', () => {
  it('the answer is delivered, and neither its headers nor its log line claim credits that were not charged', async () => {
    const res = await rpc(tg.url('eth'), call('eth_getBalance'));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ result: '0x10' });
    expect(res.headers.get('x-credits-cost')).toBe('0');
    expect(res.headers.get('x-credits-remaining')).toBe(String(DAILY));

    const day = new Date().toISOString().slice(0, 10);
    expect((await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day }]))[0].teamUsed).toBe(0);
    expect(await tg.store.usage({ teamId: tg.team.id, fromDay: day, toDay: day })).toEqual([]);
    const line = tg.logLines.map((text) => JSON.parse(text) as { methods?: string[]; credits?: unknown }).find((entry) => entry.methods?.includes('eth_getBalance'));
    expect(line).toMatchObject({ status: 200, credits: 0 });
  });

  it('in a batch, only the items actually charged count', async () => {
    const res = await rpc(tg.url('eth'), [call('eth_getBalance', 1), call('eth_getCode', 2)]);
    expect(res.body.map((reply: { result?: unknown }) => reply.result)).toEqual(['0x10', '0x10']);
    // eth_getBalance's reservation was swept (and eth_getCode's with it, if the sweep ran after it
    // was made): the header is what the ledger charged, whatever the timing.
    const day = new Date().toISOString().slice(0, 10);
    const [{ teamUsed }] = await tg.store.applyLedger([{ type: 'peek', teamId: tg.team.id, day }]);
    expect(Number(res.headers.get('x-credits-cost'))).toBe(teamUsed);
    expect(Number(res.headers.get('x-credits-remaining'))).toBe(DAILY - teamUsed);
  });
});
