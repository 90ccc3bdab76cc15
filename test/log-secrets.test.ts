// No secret in any log line of a whole run (docs/security.md), including the secrets that arrive
// after start-up: upstream credentials of a config reload, keys issued and rotated through the
// admin API while the gateway runs. Every line is read at info level, errors included. The same
// run's traces (as a real OTLP receiver got them), request explorer and quota forecast hold no
// key, secret, token or param either. And an error's log line keeps what an operator needs: the
// stack and the `cause` chain.

import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GatewayError } from '../src/errors.js';
import { issueTeamToken } from '../src/portal/team-token.js';
import { startOtlpReceiver, type OtlpReceiver } from './helpers/otlp-receiver.js';
import { until } from './helpers/until.js';
import { createLogger } from '../src/logging/logger.js';
import { rpc, startTestGateway, TEST_ADMIN_TOKEN, type TestGateway } from './helpers/gateway.js';
import { startScriptedUpstream, type ScriptedUpstream } from './helpers/scripted-upstream.js';

const HASH = `0x${'5e'.repeat(32)}`;
const BEFORE = { password: 'pw-before-7c1e9a3b5d', header: 'hdr-before-2b4d6f8a0c1e3a5c' };
const AFTER = { password: 'pw-after-9e8d7c6b5a', header: 'hdr-after-1a3c5e7b9d2f4a6c' };
/** The trace collector's own credential (sent to the collector, never inside a span). */
const COLLECTOR_TOKEN = 'collector-token-4f6a8c0e2b4d';

function leakyUpstreamError(secrets: { password: string; header: string }): { kind: 'status'; status: number; body: string } {
  // Some providers quote the credentials they refused in their error page.
  return { kind: 'status', status: 500, body: `refused user:${secrets.password} token ${secrets.header}` };
}

function network(upstream: ScriptedUpstream, secrets: { password: string; header: string }): Record<string, unknown> & { id: string } {
  const url = new URL(upstream.url);
  return {
    id: 'evm',
    kind: 'evm',
    chainId: 1,
    verification: 'off',
    upstreams: [{ id: 'u', url: `http://user:${secrets.password}@${url.host}/`, headers: { 'x-provider-token': secrets.header } }],
  };
}

describe('secrets in log lines over a whole run', () => {
  let tg: TestGateway;
  let before: ScriptedUpstream;
  let after: ScriptedUpstream;
  let receiver: OtlpReceiver;
  let teamToken: string;
  let reloaded = false;
  let rejectReload = false;

  beforeAll(async () => {
    before = await startScriptedUpstream(leakyUpstreamError(BEFORE));
    after = await startScriptedUpstream(leakyUpstreamError(AFTER));
    receiver = await startOtlpReceiver();
    tg = await startTestGateway({
      config: {
        tracing: { otlpUrl: receiver.url, sampleRatio: 1, batchDelayMs: 20, propagateToUpstreams: true, headers: { 'x-collector-token': COLLECTOR_TOKEN } },
        explorer: { flushIntervalMs: 20 },
        portal: { enabled: true, host: '127.0.0.1', port: 0 },
      },
      networks: [network(before, BEFORE)],
      reloadNetworks: () =>
        rejectReload
          ? [{ ...network(after, AFTER), upstreams: [{ id: 'u', url: `ftp://user:${AFTER.password}@127.0.0.1/`, timeoutMs: -1 }] }]
          : [network(reloaded ? after : before, reloaded ? AFTER : BEFORE)],
    });
    teamToken = (await issueTeamToken(tg.store, tg.team.id, 'secrets-test')).secret;
  });

  afterAll(async () => {
    await tg?.close();
    await Promise.all([before?.close(), after?.close(), receiver?.close()]);
  });

  const admin = async (method: string, path: string, body?: unknown): Promise<Record<string, unknown>> => {
    const response = await fetch(`${tg.gateway.adminOrigin}${path}`, {
      method,
      headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    expect(response.status, `${method} ${path}`).toBeLessThan(300);
    return (await response.json()) as Record<string, unknown>;
  };
  const call = (key: string) => rpc(tg.url('evm', key), { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [HASH, false] });

  it('finds none of the secrets known at start, added by a reload, or issued while running', async () => {
    // Start-up secrets: the upstream quotes its credentials in a 500.
    expect((await call(tg.apiKey)).status).toBe(502);

    // A key issued while running, used, then rotated (both secrets travel through the admin API).
    const issued = (await admin('POST', `/v1/teams/${tg.team.id}/keys`, { label: 'issued-later' })) as { key: { id: string }; secret: string };
    expect((await call(issued.secret)).status).toBe(502);
    const rotated = (await admin('POST', `/v1/keys/${issued.key.id}/rotate`, {})) as { secret: string };
    expect(rotated.secret).not.toBe(issued.secret);
    expect((await call(rotated.secret)).status).toBe(502);
    // The rotated-out secret is refused now; its 401 must not log it either.
    expect((await call(issued.secret)).status).toBe(401);

    // A reload the schema rejects is logged as an error; its upstream URL carries a new password.
    rejectReload = true;
    const rejected = await fetch(`${tg.gateway.adminOrigin}/v1/reload`, { method: 'POST', headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } });
    expect(rejected.status).toBe(400);
    rejectReload = false;

    // A reload brings an upstream with new credentials, which its 500 quotes.
    reloaded = true;
    await admin('POST', '/v1/reload');
    expect((await call(tg.apiKey)).status).toBe(502);
    expect(after.calls.length).toBeGreaterThan(0);

    const secrets = [
      tg.apiKey,
      issued.secret,
      rotated.secret,
      ...[tg.apiKey, issued.secret, rotated.secret].map((key) => key.slice(3)),
      BEFORE.password,
      BEFORE.header,
      AFTER.password,
      AFTER.header,
      TEST_ADMIN_TOKEN,
    ];
    const lines = tg.logLines;
    // The run logged what it did: request lines, the reload, errors with the upstreams' words.
    expect(lines.filter((line) => line.includes('"msg":"request"')).length).toBeGreaterThanOrEqual(5);
    expect(lines.some((line) => line.includes('config reloaded'))).toBe(true);
    expect(lines.some((line) => line.includes('"level":"error"') && line.includes('config reload rejected'))).toBe(true);
    for (const line of lines) for (const secret of secrets) expect(line, `a log line holds ${secret.slice(0, 6)}…`).not.toContain(secret);

    // The same run seen by the explorer, the traces and the forecast: what happened, nothing sent.
    const sent = [...secrets, teamToken, COLLECTOR_TOKEN, HASH, HASH.slice(2)];
    const teamApi = async (path: string) => {
      const response = await fetch(`${tg.gateway.portalOrigin}${path}`, { headers: { authorization: `Bearer ${teamToken}` } });
      expect(response.status, path).toBe(200);
      return response.text();
    };
    // Four requests of the team (the refused secret's 401 belongs to no team).
    await until(async () => JSON.parse(await teamApi('/v1/requests?limit=1000')).requests.length === 4, 'the run in the request explorer');
    const explorer = await teamApi('/v1/requests?limit=1000');
    // The upstreams' refusals are there, as the errors the clients got.
    expect(explorer).toContain('"errorCode":-32603');
    const overview = await teamApi('/v1/team');
    expect(JSON.parse(overview).forecast).toBeDefined();
    await until(() => receiver.spans.filter((span) => span.attributes['tollgate.outcome'] === 'http_500').length >= 3, 'the failed attempts in the traces');
    const traces = receiver.bodies.join('\n');
    expect(traces).toContain('http_500');
    for (const [what, text] of [
      ['the request explorer', explorer],
      ['the quota forecast', overview],
      ['the traces', traces],
    ] as const) {
      for (const secret of sent) expect(text, `${what} holds ${secret.slice(0, 6)}…`).not.toContain(secret);
    }
  });
});

describe('error log lines', () => {
  it('carry the stack and the cause chain, scrubbed of known secrets', () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        lines.push(chunk.toString('utf8'));
        callback();
      },
    });
    const logger = createLogger({ destination, secrets: ['upstream-secret-123456'] });
    const root = new Error('connect ECONNREFUSED via http://user:upstream-secret-123456@10.0.0.1/');
    const middle = new TypeError('fetch failed', { cause: root });
    logger.error({ err: new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, middle) }, 'call failed unexpectedly');
    const line = JSON.parse(lines.join('')) as { err: { type: string; message: string; stack: string } };
    expect(line.err.type).toBe('GatewayError');
    // pino's serializer folds the cause chain into the message and the stack ("caused by:").
    expect(line.err.message).toBe('Internal error: fetch failed: connect ECONNREFUSED via http://[redacted]@10.0.0.1/');
    expect(line.err.stack).toMatch(/^GatewayError: Internal error\n\s+at /);
    expect(line.err.stack).toMatch(/\ncaused by: TypeError: fetch failed\n\s+at /);
    expect(line.err.stack).toMatch(/\ncaused by: Error: connect ECONNREFUSED via http:\/\/\[redacted\]@10\.0\.0\.1\/\n\s+at /);
    expect(lines.join('')).not.toContain('upstream-secret-123456');
  });
});
