import { WebSocket } from './ws-library.js';

/**
 * One JSON-RPC connection to an upstream's WebSocket endpoint (`wsUrl`): requests with their
 * own ids, and `eth_subscription` notifications routed to the handler of their subscription.
 * It never reconnects by itself: when it closes, the subscription hub moves its subscriptions
 * to another upstream (and back-fills what the move could have missed).
 */

export interface UpstreamSocket {
  readonly upstreamId: string;
  /** One call; rejects on a JSON-RPC error, a timeout, or the socket closing. */
  request(method: string, params: unknown[], timeoutMs: number): Promise<unknown>;
  /** `eth_subscribe` with these params; `onEvent` gets each notification's parsed result. */
  subscribe(params: unknown[], timeoutMs: number, onEvent: (result: unknown) => void): Promise<string>;
  /** `eth_unsubscribe`, without waiting for the answer. */
  unsubscribe(subscriptionId: string): void;
  /** Closes the socket (its close listener runs). */
  close(): void;
}

export interface UpstreamSocketOptions {
  upstreamId: string;
  url: string;
  headers: Record<string, string>;
  connectTimeoutMs: number;
  /** Incoming messages larger than this close the socket (a block with its logs fits many times over). */
  maxMessageBytes: number;
  /** Called once when the socket is gone, whatever the reason (after a successful connect only). */
  onClose: (reason: string) => void;
}

type Waiter = {
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
  /**
   * Runs as the answer is read, before the next message: an `eth_subscribe` answer registers its
   * handler here, because a notification in the same TCP read is routed before any promise
   * continuation runs (it would otherwise find no handler and be lost).
   */
  onResult?: (result: unknown) => void;
};

export class UpstreamRequestError extends Error {
  override name = 'UpstreamRequestError';
}

export function connectUpstreamSocket(options: UpstreamSocketOptions): Promise<UpstreamSocket> {
  return new Promise((resolveConnect, rejectConnect) => {
    const socket = new WebSocket(options.url, {
      headers: options.headers,
      handshakeTimeout: options.connectTimeoutMs,
      maxPayload: options.maxMessageBytes,
      perMessageDeflate: false,
    });
    const waiters = new Map<number, Waiter>();
    const handlers = new Map<string, (result: unknown) => void>();
    let nextId = 1;
    let connected = false;
    let closed = false;

    const failAll = (reason: string) => {
      for (const waiter of waiters.values()) {
        clearTimeout(waiter.timer);
        waiter.reject(new UpstreamRequestError(`upstream socket closed: ${reason}`));
      }
      waiters.clear();
      handlers.clear();
    };
    const gone = (reason: string) => {
      if (closed) return;
      closed = true;
      failAll(reason);
      if (connected) options.onClose(reason);
      else rejectConnect(new UpstreamRequestError(`upstream socket failed: ${reason}`));
    };

    socket.on('error', (error: Error & { code?: string }) => {
      gone(error.code ?? 'error');
      socket.terminate();
    });
    socket.on('close', (code) => gone(`closed_${code}`));
    socket.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
      if (isBinary) return;
      let message: { id?: unknown; method?: unknown; params?: { subscription?: unknown; result?: unknown }; result?: unknown; error?: { message?: unknown } };
      try {
        message = JSON.parse(String(data)) as typeof message;
      } catch {
        return; // not JSON: nothing to route (a broken upstream shows as a stall)
      }
      if (message === null || typeof message !== 'object') return;
      if (message.method === 'eth_subscription' && message.params !== undefined) {
        const handler = handlers.get(String(message.params.subscription));
        handler?.(message.params.result);
        return;
      }
      if (typeof message.id !== 'number') return;
      const waiter = waiters.get(message.id);
      if (waiter === undefined) return;
      waiters.delete(message.id);
      clearTimeout(waiter.timer);
      if (message.error !== undefined && message.error !== null) return waiter.reject(new UpstreamRequestError(String(message.error.message ?? 'upstream error')));
      waiter.onResult?.(message.result);
      waiter.resolve(message.result);
    });

    const request = (method: string, params: unknown[], timeoutMs: number, onResult?: (result: unknown) => void): Promise<unknown> =>
      new Promise((resolve, reject) => {
        if (closed || socket.readyState !== WebSocket.OPEN) return reject(new UpstreamRequestError('upstream socket not open'));
        const id = nextId++;
        const timer = setTimeout(() => {
          waiters.delete(id);
          reject(new UpstreamRequestError(`${method} timed out`));
        }, timeoutMs);
        timer.unref();
        waiters.set(id, { resolve, reject, timer, onResult });
        socket.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
      });

    socket.once('open', () => {
      connected = true;
      resolveConnect({
        upstreamId: options.upstreamId,
        request: (method, params, timeoutMs) => request(method, params, timeoutMs),
        async subscribe(params, timeoutMs, onEvent) {
          const id = await request('eth_subscribe', params, timeoutMs, (result) => {
            if (typeof result === 'string') handlers.set(result, onEvent);
          });
          if (typeof id !== 'string') throw new UpstreamRequestError('eth_subscribe answered without a subscription id');
          return id;
        },
        unsubscribe(subscriptionId) {
          handlers.delete(subscriptionId);
          request('eth_unsubscribe', [subscriptionId], options.connectTimeoutMs).catch(() => undefined);
        },
        close() {
          socket.terminate();
        },
      });
    });
  });
}
