// docs/errors.md tells the truth about `data`: for every error code whose row documents a
// `data: {…}` object, the gateway is driven over the wire into that error and the fields of
// the `data` it emits are exactly the documented ones (nested arrays of objects too). An error
// that emits `data` without a documented shape, or a documented shape no scenario here
// produces, fails the test.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_REGISTRY, type GatewayErrorCode } from '../src/errors.js';
import { generateKeyPairSync } from 'node:crypto';
import { issueKey } from '../src/admin/key-issuer.js';
import { applySettingsPatch } from '../src/auth/key-settings.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { useScriptedUpstreams } from './helpers/scripted-upstream.js';
import { WebSocket } from '../src/websocket/ws-library.js';
import { until } from './helpers/until.js';

const DOC = readFileSync(join(process.cwd(), 'docs', 'errors.md'), 'utf8');

/** The `data: {…}` text of each documented code's row, braces included. */
function documentedData(): Map<GatewayErrorCode, string> {
  const found = new Map<GatewayErrorCode, string>();
  for (const line of DOC.split('\n')) {
    const code = /^\|\s*`(TG_ERR_[A-Z_]+)`/.exec(line)?.[1] as GatewayErrorCode | undefined;
    if (code === undefined) continue;
    const start = line.indexOf('`data: {');
    if (start < 0) continue;
    const end = line.indexOf('`', start + 1);
    found.set(code, line.slice(start + '`data: '.length, end));
  }
  return found;
}

/**
 * The field shape of a documented object, `{reason: "x", limit, attempts: [{upstream, reason}]}`
 * → `{reason: true, limit: true, attempts: [{upstream: true, reason: true}]}`.
 */
type Shape = { [field: string]: true | Shape | [Shape] };
function parseShape(text: string): Shape {
  let at = 0;
  const skipSpace = (): void => {
    while (/\s/.test(text[at] ?? '')) at += 1;
  };
  const object = (): Shape => {
    const shape: Shape = {};
    at += 1; // {
    for (;;) {
      skipSpace();
      if (text[at] === '}') return (at += 1), shape;
      const name = /^[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(at))![0];
      at += name.length;
      skipSpace();
      let value: true | Shape | [Shape] = true;
      if (text[at] === ':') {
        at += 1;
        skipSpace();
        if (text[at] === '{') value = object();
        else if (text[at] === '[') {
          at += 1;
          skipSpace();
          value = [object()];
          skipSpace();
          at += 1; // ]
        } else while (at < text.length && text[at] !== ',' && text[at] !== '}') at += 1; // a literal such as "rate_limited"
      }
      shape[name] = value;
      skipSpace();
      if (text[at] === ',') at += 1;
    }
  };
  return object();
}

/** The same shape read from an emitted value. */
function shapeOf(value: Record<string, unknown>): Shape {
  const shape: Shape = {};
  for (const [name, field] of Object.entries(value)) {
    if (Array.isArray(field) && field.length > 0 && typeof field[0] === 'object') shape[name] = [shapeOf(field[0] as Record<string, unknown>)];
    else if (field !== null && typeof field === 'object' && !Array.isArray(field)) shape[name] = shapeOf(field as Record<string, unknown>);
    else shape[name] = true;
  }
  return shape;
}

const HASH = `0x${'6f'.repeat(32)}`;
const call = (id: number) => ({ jsonrpc: '2.0', id, method: 'eth_getBlockByHash', params: [HASH, false] });
const scripted = useScriptedUpstreams();

describe('docs/errors.md data fields against what the gateway emits', () => {
  let tg: TestGateway;
  /** Emitted `error.data` per code, filled by the scenarios in beforeAll. */
  const emitted = new Map<GatewayErrorCode, Record<string, unknown>>();
  let frozenAt = Date.UTC(2026, 10, 23, 12);

  beforeAll(async () => {
    const failing = await scripted({ kind: 'status', status: 500 });
    const stalled = await scripted({ kind: 'stall' });
    const breaking = await scripted({ kind: 'status', status: 500 });
    tg = await startTestGateway({
      now: () => frozenAt,
      dailyCredits: 1_000,
      config: { auth: { keyCacheTtlMs: 0 }, server: { host: '127.0.0.1', port: 0, websocket: { maxConnections: 2, maxConnectionsPerKey: 1, maxSubscriptionsPerConnection: 1 } } },
      networks: [
        { id: 'failing', kind: 'evm', chainId: 1, verification: 'off', upstreams: [{ id: 'f', url: failing.url }] },
        { id: 'stalled', kind: 'evm', chainId: 1, verification: 'off', requestTimeoutMs: 200, hedge: { enabled: false }, upstreams: [{ id: 's', url: stalled.url, timeoutMs: 150 }] },
        {
          id: 'breaking',
          kind: 'evm',
          chainId: 1,
          verification: 'off',
          circuitBreaker: { failureThreshold: 1, cooldownMs: 3_600_000 },
          upstreams: [{ id: 'b', url: breaking.url }],
        },
        // One call a second: a second call within the same second cannot wait inside its deadline.
        { id: 'limited', kind: 'evm', chainId: 1, verification: 'off', requestTimeoutMs: 300, upstreams: [{ id: 'l', url: failing.url, rateLimit: { requestsPerSecond: 1 } }] },
        // Subscriptions are offered (a wsUrl), though nothing listens there: the limits come first.
        { id: 'subs', kind: 'evm', chainId: 1, verification: 'off', upstreams: [{ id: 'w', url: failing.url, wsUrl: 'ws://127.0.0.1:9' }] },
      ],
    });
    const record = async (url: string, id: number, headers?: Record<string, string>): Promise<void> => {
      const response = await rpc(url, call(id), { headers });
      const error = response.body?.error as { data?: Record<string, unknown> } | undefined;
      // The request's log line names its TG_ERR_* code.
      const requestId = response.headers.get('x-request-id');
      const line = tg.logLines.find((text) => text.includes(`"requestId":"${requestId}"`));
      const code = (Object.keys(ERROR_REGISTRY) as GatewayErrorCode[]).find((name) => line?.includes(`"error":"${name}"`));
      if (error?.data !== undefined && code !== undefined) emitted.set(code, error.data);
    };
    await record(tg.url('failing'), 1); // TG_ERR_UPSTREAMS_FAILED
    await record(tg.url('stalled'), 2); // TG_ERR_UPSTREAMS_TIMED_OUT
    await record(tg.url('breaking'), 3); // opens the circuit (UPSTREAMS_FAILED again)
    await record(tg.url('breaking'), 4); // TG_ERR_NO_HEALTHY_UPSTREAM
    await record(tg.url('limited'), 20); // spends the second's one permit (UPSTREAMS_FAILED again)
    await record(tg.url('limited'), 21); // TG_ERR_UPSTREAM_BUDGET
    // Credits: the team's quota is 1000 and nothing was charged; the key's own cap of 0 refuses first.
    const capped = await issueKey(tg.store, { teamId: tg.team.id, dailyCap: 0 });
    await record(tg.url('failing', capped.secret), 5); // TG_ERR_CREDITS_EXHAUSTED (scope key)
    // Key settings: a method allowlist without this method; a key that requires a JWT, sent a malformed one.
    const methodLimited = await issueKey(tg.store, { teamId: tg.team.id });
    await tg.store.updateKey(methodLimited.key.id, { settings: applySettingsPatch(null, { allowedMethods: ['eth_chainId'] }) });
    await record(tg.url('failing', methodLimited.secret), 8); // TG_ERR_KEY_SETTINGS
    const jwtKey = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ type: 'spki', format: 'pem' }) as string;
    const jwtOnly = await issueKey(tg.store, { teamId: tg.team.id });
    await tg.store.updateKey(jwtOnly.key.id, { settings: applySettingsPatch(null, { requireJwt: true, jwtKeys: [{ id: 'k1', pem: jwtKey }] }) });
    await record(tg.url('failing', jwtOnly.secret), 9, { authorization: 'Bearer not-a-jwt' }); // TG_ERR_INVALID_JWT
    // A bucket of 80 credits/s holds one call; the clock stands still, so the second is limited.
    await tg.store.updateTeam(tg.team.id, { creditsPerSecond: 80 });
    await record(tg.url('failing'), 6);
    await record(tg.url('failing'), 7); // TG_ERR_RATE_LIMITED
    await tg.store.updateTeam(tg.team.id, { creditsPerSecond: null });
    frozenAt += 1;

    // WebSocket bounds: the log line of a refused upgrade or of a message names the code.
    const wsUrl = (secret: string) => tg.url('subs', secret).replace('http://', 'ws://').replace('/subs/v3/', '/subs/ws/v3/');
    const codeInLogs = (from: number): GatewayErrorCode | undefined =>
      (Object.keys(ERROR_REGISTRY) as GatewayErrorCode[]).find((name) => name.startsWith('TG_ERR_WS_') && tg.logLines.slice(from).some((line) => line.includes(`"error":"${name}"`)));
    const upgrade = (url: string) =>
      new Promise<{ socket?: WebSocket; data?: Record<string, unknown> }>((resolve, reject) => {
        const socket = new WebSocket(url);
        socket.once('open', () => resolve({ socket }));
        socket.once('error', () => undefined);
        socket.once('unexpected-response', (_req, res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
          res.on('end', () => resolve({ data: (JSON.parse(text) as { error: { data: Record<string, unknown> } }).error.data }));
          res.on('error', reject);
        });
      });
    const recordWs = (from: number, data: Record<string, unknown> | undefined) => {
      const code = codeInLogs(from);
      if (data !== undefined && code !== undefined) emitted.set(code, data);
    };
    const first = await upgrade(wsUrl(tg.apiKey));
    let mark = tg.logLines.length;
    recordWs(mark, (await upgrade(wsUrl(tg.apiKey))).data); // TG_ERR_WS_KEY_CONNECTIONS
    const second = await upgrade(wsUrl((await issueKey(tg.store, { teamId: tg.team.id })).secret));
    mark = tg.logLines.length;
    recordWs(mark, (await upgrade(wsUrl((await issueKey(tg.store, { teamId: tg.team.id })).secret))).data); // TG_ERR_WS_SERVER_FULL
    const replies: Array<{ id: number; error?: { data: Record<string, unknown> } }> = [];
    first.socket!.on('message', (bytes: Buffer) => replies.push(JSON.parse(bytes.toString('utf8'))));
    first.socket!.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_subscribe', params: ['newHeads'] }));
    first.socket!.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'eth_subscribe', params: ['newPendingTransactions'] }));
    mark = tg.logLines.length;
    await until(() => replies.length >= 2, 'the replies to both subscriptions');
    await until(() => codeInLogs(mark) !== undefined, 'the log line of the refused subscription (it follows its reply)');
    recordWs(mark, replies.find((reply) => reply.id === 2)?.error?.data); // TG_ERR_WS_SUBSCRIPTION_LIMIT
    first.socket!.terminate();
    second.socket?.terminate();
  });

  afterAll(async () => {
    await tg?.close();
  });

  it('drove every data-carrying error', () => {
    expect([...emitted.keys()].sort()).toEqual(
      [
        'TG_ERR_CREDITS_EXHAUSTED',
        'TG_ERR_INVALID_JWT',
        'TG_ERR_KEY_SETTINGS',
        'TG_ERR_NO_HEALTHY_UPSTREAM',
        'TG_ERR_RATE_LIMITED',
        'TG_ERR_UPSTREAMS_FAILED',
        'TG_ERR_UPSTREAMS_TIMED_OUT',
        'TG_ERR_UPSTREAM_BUDGET',
        'TG_ERR_WS_KEY_CONNECTIONS',
        'TG_ERR_WS_SERVER_FULL',
        'TG_ERR_WS_SUBSCRIPTION_LIMIT',
      ].sort(),
    );
  });

  it('documents a data shape for exactly the codes that emit one', () => {
    expect([...documentedData().keys()].sort()).toEqual([...emitted.keys()].sort());
  });

  it.each([...documentedData()])('%s: the documented fields are the emitted ones', (code, text) => {
    const data = emitted.get(code);
    expect(data, `${code} was emitted with data`).toBeDefined();
    expect(shapeOf(data!)).toStrictEqual(parseShape(text));
  });
});

describe('TG_ERR_STORE_UNAVAILABLE from the embedded SQLite store', () => {
  let tg: TestGateway;
  let closeStoreOnCall = false;
  let upstream: Awaited<ReturnType<typeof scripted>>;

  beforeAll(async () => {
    upstream = await scripted(async (received) => {
      // The store goes away while the call is upstream: its answer cannot be charged at commit.
      if (closeStoreOnCall) await tg.store.close();
      return { kind: 'result', result: { hash: (received.body as { params: string[] }).params[0], number: '0x1', transactions: [] } };
    });
    tg = await startTestGateway({
      // Key lookups stay cached, so the failures below are the ledger's.
      config: { auth: { keyCacheTtlMs: 3_600_000 } },
      networks: [{ id: 'evm', kind: 'evm', chainId: 1, verification: 'off', upstreams: [{ id: 'u', url: upstream.url }] }],
    });
    expect((await rpc(tg.url('evm'), call(1))).status).toBe(200);
    closeStoreOnCall = true;
  });

  afterAll(async () => {
    await tg?.gateway.close();
  });

  it('answers 503 -32603 when a forwarded answer cannot be charged, and withholds the answer', async () => {
    const response = await rpc(tg.url('evm'), { ...call(2), params: [`0x${'70'.repeat(32)}`, false] });
    expect(response.status).toBe(503);
    expect(response.body).toStrictEqual({ jsonrpc: '2.0', id: 2, error: { code: -32603, message: ERROR_REGISTRY.TG_ERR_STORE_UNAVAILABLE.message } });
    const line = tg.logLines.find((text) => text.includes(`"requestId":"${response.headers.get('x-request-id')}"`));
    expect(line).toContain('"error":"TG_ERR_STORE_UNAVAILABLE"');
    expect(tg.logLines.some((text) => text.includes('the store is unreachable') && text.includes('"stack"'))).toBe(true);
  });

  it('answers 503 before forwarding when the reservation cannot be made', async () => {
    const forwarded = upstream.calls.length;
    const response = await rpc(tg.url('evm'), { ...call(3), params: [`0x${'71'.repeat(32)}`, false] });
    expect(response.status).toBe(503);
    expect(response.body.error.code).toBe(-32603);
    expect(upstream.calls.length).toBe(forwarded);
  });
});
