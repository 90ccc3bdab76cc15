// A WebSocket proxy in front of an upstream's ws endpoint (anvil serves ws on its HTTP port),
// for tests that count what the gateway asks of an upstream and kill an upstream mid-stream.

import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from '../../src/websocket/ws-library.js';

export interface WsProxy {
  /** `ws://127.0.0.1:port` */
  url: string;
  /** `eth_subscribe` calls that went through, by subscription type. */
  subscribeCalls: string[];
  /** The method of every request the gateway sent, in order (those the proxy answered itself too). */
  requests: string[];
  /** Connections open through the proxy now. */
  open(): number;
  /** From now on nothing the upstream sends is passed on (the connections stay open): an upstream that fell silent. */
  freeze(): void;
  /** While true, new connections are refused at the upgrade (HTTP 401). */
  refuse(refusing: boolean): void;
  /** Closes every connection at once (a reset, not a close handshake) and refuses new ones. */
  kill(): Promise<void>;
}

/** A request as the proxy reads it. */
export interface WsRequest {
  id: unknown;
  method: string;
  params: unknown[];
}

export interface WsProxyOptions {
  /** Refuse new connections from the start (see {@link WsProxy.refuse}). */
  refusing?: boolean;
  /**
   * Answers a request in place of the upstream (a provider's own limits): the whole JSON-RPC
   * answer, or undefined to pass the request on. Requests of one connection keep their order.
   */
  answer?: (request: WsRequest) => unknown | Promise<unknown>;
}

export async function startWsProxy(target: string, options: WsProxyOptions = {}): Promise<WsProxy> {
  let refusing = options.refusing ?? false;
  let frozen = false;
  const server = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false, verifyClient: () => !refusing });
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  const subscribeCalls: string[] = [];
  const requests: string[] = [];
  const pairs = new Set<{ client: WebSocket; upstream: WebSocket }>();
  server.on('connection', (client) => {
    const upstream = new WebSocket(target, { perMessageDeflate: false });
    const pair = { client, upstream };
    pairs.add(pair);
    const early: string[] = [];
    const passOn = (text: string) => {
      if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
      else early.push(text);
    };
    /** Messages handled one after the other, so an answer the proxy computes does not reorder them. */
    let handled = Promise.resolve();
    client.on('message', (data: Buffer) => {
      const text = data.toString('utf8');
      let message: { id?: unknown; method?: string; params?: unknown[] } | undefined;
      try {
        message = JSON.parse(text) as { id?: unknown; method?: string; params?: unknown[] };
        if (typeof message.method === 'string') requests.push(message.method);
        if (message.method === 'eth_subscribe') subscribeCalls.push(String(message.params?.[0]));
      } catch {
        // passed on as it is
      }
      const request = message;
      handled = handled
        .then(async () => {
          if (options.answer !== undefined && typeof request?.method === 'string') {
            const answer = await options.answer({ id: request.id, method: request.method, params: Array.isArray(request.params) ? request.params : [] });
            if (answer !== undefined) {
              if (client.readyState === WebSocket.OPEN && !frozen) client.send(JSON.stringify(answer));
              return;
            }
          }
          passOn(text);
        })
        // A hook that throws leaves the request unanswered, as a broken provider would; later ones still go.
        .catch(() => undefined);
    });
    upstream.on('open', () => early.splice(0).forEach((text) => upstream.send(text)));
    upstream.on('message', (data: Buffer) => {
      if (client.readyState === WebSocket.OPEN && !frozen) client.send(data.toString('utf8'));
    });
    const end = () => {
      pairs.delete(pair);
      client.terminate();
      upstream.terminate();
    };
    client.on('close', end);
    upstream.on('close', end);
    client.on('error', end);
    upstream.on('error', end);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}`,
    subscribeCalls,
    requests,
    open: () => pairs.size,
    freeze() {
      frozen = true;
    },
    refuse(value) {
      refusing = value;
    },
    async kill() {
      for (const { client, upstream } of pairs) {
        client.terminate();
        upstream.terminate();
      }
      pairs.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
