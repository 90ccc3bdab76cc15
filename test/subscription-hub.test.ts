// The subscription hub against a real upstream socket (anvil behind a WebSocket proxy that can
// hold an answer back), driven directly, so a test knows exactly when an entry is added.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAnvil, type AnvilNode } from '../src/devnet/anvil.js';
import { createLogger } from '../src/logging/logger.js';
import { createSubscriptionHub } from '../src/websocket/subscription-hub.js';
import type { SubscriptionKind } from '../src/websocket/subscription-types.js';
import { connectUpstreamSocket } from '../src/websocket/upstream-socket.js';
import { until } from './helpers/until.js';
import { startWsProxy, type WsProxy } from './helpers/ws-proxy.js';

let anvil: AnvilNode;
let proxy: WsProxy | undefined;

beforeAll(async () => {
  anvil = await startAnvil();
}, 60_000);
afterAll(async () => {
  await proxy?.kill();
  await anvil?.stop();
});

describe('subscription hub', () => {
  it('subscribes an entry added while a new socket is subscribing the others once, not once for the socket and once for itself', async () => {
    // The upstream's answer to the first newHeads subscription is held until the test lets it go.
    let headsAsked = false;
    let releaseHeads = (): void => undefined;
    const headsReleased = new Promise<void>((resolve) => (releaseHeads = resolve));
    proxy = await startWsProxy(anvil.url.replace(/^http/, 'ws'), {
      answer: async (request) => {
        if (request.method === 'eth_subscribe' && request.params[0] === 'newHeads' && !headsAsked) {
          headsAsked = true;
          await headsReleased;
        }
        return undefined;
      },
    });
    const upstreamSubscriptions: Record<SubscriptionKind, number> = { newHeads: 0, logs: 0, newPendingTransactions: 0 };
    const wsUrl = proxy.url;
    const hub = createSubscriptionHub({
      network: () => ({
        candidates: () => [{ id: 'anvil', wsUrl, probedHead: () => undefined }],
        stallTimeoutMs: 60_000,
        reconnectDelayMs: 1_000,
        requestTimeoutMs: 10_000,
        verification: 'off',
      }),
      connect: (_networkId, candidate, onClose) =>
        connectUpstreamSocket({ upstreamId: candidate.id, url: candidate.wsUrl, headers: {}, connectTimeoutMs: 5_000, maxMessageBytes: 16 * 1024 * 1024, onClose }),
      getLogs: async () => [],
      logger: createLogger({ level: 'silent' }),
      observe: { upstreamSubscriptions: (_network, kind, delta) => (upstreamSubscriptions[kind] += delta) },
    });
    try {
      const heads = hub.subscribe('eth', 'newHeads', ['newHeads'], () => undefined);
      // The socket is connected and its attach is subscribing the heads entry: add a logs entry now.
      await until(() => headsAsked, 'the newHeads subscription reaching the upstream');
      const logs = hub.subscribe('eth', 'logs', ['logs', { address: '0x00000000000000000000000000000000000000aa' }], () => undefined);
      releaseHeads();
      await Promise.all([heads.ready, logs.ready]);
      // Another entry's task is queued after the first logs entry's own: once it is subscribed,
      // that one has run.
      const other = hub.subscribe('eth', 'logs', ['logs', { address: '0x00000000000000000000000000000000000000bb' }], () => undefined);
      await other.ready;

      expect(proxy.subscribeCalls).toStrictEqual(['newHeads', 'logs', 'logs']);
      expect(upstreamSubscriptions).toStrictEqual({ newHeads: 1, logs: 2, newPendingTransactions: 0 });
      expect(hub.upstreamSubscriptionCount()).toBe(3);
    } finally {
      hub.close();
    }
  }, 60_000);
});
