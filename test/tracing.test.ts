// OpenTelemetry traces end to end: a real gateway exports over OTLP/HTTP to a real receiver on
// loopback, in front of a real anvil reached through scripted proxies that fail or stall on cue.
// What the receiver decodes is what a collector would get: a span per request, a child span per
// upstream attempt, parented correctly, with the attributes operators filter on.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { useSeededAnvil } from './helpers/anvil.js';
import { rpc, startTestGateway, type TestGateway } from './helpers/gateway.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from './helpers/otlp-receiver.js';
import { startScriptedUpstream, type ScriptedBehaviour, type ScriptedUpstream } from './helpers/scripted-upstream.js';
import { until } from './helpers/until.js';

const anvil = useSeededAnvil({}, { blocks: 4 });

/** Two upstreams in front of anvil whose first call (whichever is asked) gets `first`; every other call is proxied. */
async function pairFailingFirst(first: ScriptedBehaviour, method: string): Promise<ScriptedUpstream[]> {
  let firstTaken = false;
  const behaviour = (call: { methods: string[] }): ScriptedBehaviour => {
    if (!firstTaken && call.methods.includes(method)) {
      firstTaken = true;
      return first;
    }
    return { kind: 'proxy', url: anvil.node.url };
  };
  return [await startScriptedUpstream(behaviour), await startScriptedUpstream(behaviour)];
}

const CLIENT_TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN_ID = '00f067aa0ba902b7';
const CLIENT_TRACEPARENT = `00-${CLIENT_TRACE_ID}-${CLIENT_SPAN_ID}-01`;

describe('OpenTelemetry traces', () => {
  let receiver: OtlpReceiver;
  let gateway: TestGateway;
  let trusting: TestGateway;
  const upstreams: ScriptedUpstream[] = [];
  let failover: ScriptedUpstream[];
  let hedged: ScriptedUpstream[];
  let plain: ScriptedUpstream;

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    plain = await startScriptedUpstream({ kind: 'proxy', url: anvil.node.url });
    failover = await pairFailingFirst({ kind: 'status', status: 500, body: 'upstream exploded' }, 'eth_getBalance');
    // The first attempt answers long after the hedge delay: the hedge to the other upstream wins.
    hedged = await pairFailingFirst({ kind: 'proxy', url: anvil.node.url, delayMs: 3_000 }, 'eth_getBalance');
    upstreams.push(plain, ...failover, ...hedged);
    const networks = [
      { id: 'plain', kind: 'evm', chainId: 31337, hedge: { enabled: false }, upstreams: [{ id: 'only', url: plain.url }] },
      {
        id: 'failover',
        kind: 'evm',
        chainId: 31337,
        hedge: { enabled: false },
        upstreams: failover.map((upstream, index) => ({ id: `f${index}`, url: upstream.url })),
      },
      {
        id: 'hedged',
        kind: 'evm',
        chainId: 31337,
        hedge: { enabled: true, delayMs: 20, maxHedges: 1 },
        upstreams: hedged.map((upstream, index) => ({ id: `h${index}`, url: upstream.url })),
      },
    ];
    const tracing = { otlpUrl: receiver.url, sampleRatio: 1, batchDelayMs: 20, propagateToUpstreams: true };
    gateway = await startTestGateway({ networks, config: { tracing } });
    trusting = await startTestGateway({ networks: networks.slice(0, 1), config: { tracing: { ...tracing, trustClientTraceparent: true } } });
  });

  afterAll(async () => {
    await gateway?.close();
    await trusting?.close();
    await Promise.all(upstreams.map((upstream) => upstream.close()));
    await receiver?.close();
  });

  /** The request span whose request id the response header named, once it has arrived. */
  async function requestSpan(requestId: string | null): Promise<ReceivedSpan> {
    expect(requestId).toBeTruthy();
    await until(() => receiver.spans.some((span) => span.attributes['tollgate.request_id'] === requestId), `the span of request ${requestId}`);
    return receiver.spans.find((span) => span.attributes['tollgate.request_id'] === requestId)!;
  }

  const childrenOf = (parent: ReceivedSpan): ReceivedSpan[] =>
    receiver.spans.filter((span) => span.traceId === parent.traceId && span.parentSpanId === parent.spanId).sort((a, b) => Number(a.attributes['tollgate.attempt']) - Number(b.attributes['tollgate.attempt']));

  it('a miss has one attempt span under the request span; the cache hit that follows has none', async () => {
    const hash = anvil.seed.blockHashes[1]!;
    const body = { jsonrpc: '2.0', id: 1, method: 'eth_getBlockByHash', params: [hash, false] };
    const miss = await rpc(gateway.url('plain'), body);
    expect(miss.headers.get('x-cache')).toBe('miss');
    const hit = await rpc(gateway.url('plain'), body);
    expect(hit.headers.get('x-cache')).toBe('hit');
    expect(hit.body.result.hash).toBe(hash);

    const missSpan = await requestSpan(miss.headers.get('x-request-id'));
    const hitSpan = await requestSpan(hit.headers.get('x-request-id'));
    for (const span of [missSpan, hitSpan]) {
      expect(span.parentSpanId).toBe('');
      expect(span.kind).toBe(2); // server
      expect(span.name).toBe('rpc eth_getBlockByHash');
      expect(span.resource['service.name']).toBe('tollgate');
      expect(span.attributes).toMatchObject({
        'tollgate.network': 'plain',
        'tollgate.methods': ['eth_getBlockByHash'],
        'rpc.method': 'eth_getBlockByHash',
        'tollgate.team_id': gateway.team.id,
        'tollgate.key_id': gateway.keyId,
        'http.response.status_code': 200,
        'tollgate.credits': 80,
      });
    }
    expect(missSpan.attributes['tollgate.cache']).toBe('miss');
    expect(hitSpan.attributes['tollgate.cache']).toBe('hit');
    expect(hitSpan.traceId).not.toBe(missSpan.traceId);

    // The hit's span is complete once exported: its children would have ended before it.
    expect(childrenOf(hitSpan)).toEqual([]);
    await until(() => childrenOf(missSpan).length === 1, 'the miss attempt span');
    const [attempt] = childrenOf(missSpan);
    expect(attempt!.kind).toBe(3); // client
    expect(attempt!.attributes).toMatchObject({ 'tollgate.upstream': 'only', 'tollgate.attempt': 1, 'tollgate.hedge': false, 'tollgate.outcome': 'result' });
  });

  it('a failover: attempt 1 fails with the upstream 500, attempt 2 answers and says why it was made', async () => {
    const address = '0x70997970c51812dc3a010c7d01b50e0d17dc79c8';
    const answered = await rpc(gateway.url('failover'), { jsonrpc: '2.0', id: 1, method: 'eth_getBalance', params: [address, 'latest'] });
    expect(answered.status).toBe(200);
    expect(answered.body.result).toMatch(/^0x[0-9a-f]+$/);
    const span = await requestSpan(answered.headers.get('x-request-id'));
    await until(() => childrenOf(span).length === 2, 'two attempt spans');
    const [first, second] = childrenOf(span);
    expect(first!.attributes).toMatchObject({ 'tollgate.attempt': 1, 'tollgate.hedge': false, 'tollgate.outcome': 'http_500' });
    expect(first!.statusCode).toBe(2);
    expect(second!.attributes).toMatchObject({ 'tollgate.attempt': 2, 'tollgate.hedge': false, 'tollgate.outcome': 'result', 'tollgate.retry_reason': 'http_500' });
    expect(second!.statusCode).not.toBe(2);
    // The two attempts went to the two upstreams, the one that failed first.
    expect(new Set([first!.attributes['tollgate.upstream'], second!.attributes['tollgate.upstream']])).toEqual(new Set(['f0', 'f1']));
    expect(span.attributes['tollgate.upstream']).toBe(second!.attributes['tollgate.upstream']);
    expect(first!.attributes).not.toHaveProperty('tollgate.retry_reason');
  });

  it('a hedge: the slow first attempt is cancelled, the hedge answers, both under one request span', async () => {
    const address = '0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc';
    const answered = await rpc(gateway.url('hedged'), { jsonrpc: '2.0', id: 1, method: 'eth_getBalance', params: [address, 'latest'] });
    expect(answered.status).toBe(200);
    const span = await requestSpan(answered.headers.get('x-request-id'));
    await until(() => childrenOf(span).length === 2, 'two attempt spans');
    const [slow, hedge] = childrenOf(span);
    expect(slow!.attributes).toMatchObject({ 'tollgate.attempt': 1, 'tollgate.hedge': false, 'tollgate.outcome': 'cancelled' });
    expect(hedge!.attributes).toMatchObject({ 'tollgate.attempt': 2, 'tollgate.hedge': true, 'tollgate.outcome': 'result' });
    expect(hedge!.attributes).not.toHaveProperty('tollgate.retry_reason');
    expect(slow!.attributes['tollgate.upstream']).not.toBe(hedge!.attributes['tollgate.upstream']);
  });

  it("each attempt's traceparent reaches its upstream when propagation is on", async () => {
    const address = '0x90f79bf6eb2c4f870365e785982e1f101e93b906';
    const answered = await rpc(gateway.url('plain'), { jsonrpc: '2.0', id: 1, method: 'eth_getBalance', params: [address, 'latest'] });
    const span = await requestSpan(answered.headers.get('x-request-id'));
    await until(() => childrenOf(span).length === 1, 'the attempt span');
    const [attempt] = childrenOf(span);
    const received = plain.calls.filter((call) => call.methods.includes('eth_getBalance'));
    expect(received.map((call) => call.headers.traceparent)).toContain(`00-${span.traceId}-${attempt!.spanId}-01`);
  });

  it("a client's traceparent is ignored unless clients are trusted, and continued when they are", async () => {
    const body = { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] };
    const untrusted = await rpc(gateway.url('plain'), body, { headers: { traceparent: CLIENT_TRACEPARENT } });
    const untrustedSpan = await requestSpan(untrusted.headers.get('x-request-id'));
    expect(untrustedSpan.traceId).not.toBe(CLIENT_TRACE_ID);
    expect(untrustedSpan.parentSpanId).toBe('');

    const trusted = await rpc(trusting.url('plain'), body, { headers: { traceparent: CLIENT_TRACEPARENT } });
    const trustedSpan = await requestSpan(trusted.headers.get('x-request-id'));
    expect(trustedSpan.traceId).toBe(CLIENT_TRACE_ID);
    expect(trustedSpan.parentSpanId).toBe(CLIENT_SPAN_ID);
    expect(trustedSpan.attributes['tollgate.team_id']).toBe(trusting.team.id);

    // A trusted client that did not sample its trace: nothing of it is recorded here either.
    const unsampled = await rpc(trusting.url('plain'), body, { headers: { traceparent: `00-${'ab'.repeat(16)}-${CLIENT_SPAN_ID}-00` } });
    expect(unsampled.status).toBe(200);
    const marker = await rpc(trusting.url('plain'), body);
    await requestSpan(marker.headers.get('x-request-id'));
    // Spans of one process are exported in the order they ended: the earlier request's would be here.
    expect(receiver.spans.some((span) => span.attributes['tollgate.request_id'] === unsampled.headers.get('x-request-id'))).toBe(false);
    expect(receiver.spans.some((span) => span.traceId === 'ab'.repeat(16))).toBe(false);
  });

  it('sampleRatio 0 exports nothing, and no tracing section means no exporter at all', async () => {
    const quiet = await startOtlpReceiver();
    const network = { id: 'plain', kind: 'evm', chainId: 31337, upstreams: [{ id: 'only', url: plain.url }] };
    const unsampled = await startTestGateway({ networks: [network], config: { tracing: { otlpUrl: quiet.url, sampleRatio: 0, batchDelayMs: 20 } } });
    const untraced = await startTestGateway({ networks: [network] });
    try {
      for (const tg of [unsampled, untraced]) {
        const answered = await rpc(tg.url('plain'), { jsonrpc: '2.0', id: 1, method: 'eth_blockNumber', params: [] });
        expect(answered.status).toBe(200);
      }
    } finally {
      // Closing exports whatever is buffered: after it, nothing more can arrive.
      await unsampled.close();
      await untraced.close();
    }
    expect(quiet.spans).toEqual([]);
    await quiet.close();
  });
});
