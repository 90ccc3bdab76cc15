// A real node:http JSON-RPC server on loopback whose answer to each request is scripted,
// for failover tests of the gateway (eRPC-style fake upstreams): wrong status codes,
// non-JSON bodies, stalls, connection resets, and a proxy to a real node that can lie.

import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { request } from 'undici';
import { afterEach } from 'vitest';

/** One HTTP request the upstream received, in arrival order. */
export interface ReceivedCall {
  /** The parsed JSON body, or `undefined` when the body was not valid JSON. */
  body: unknown;
  /** The body exactly as received. */
  raw: string;
  /** JSON-RPC method names in the body (one per batch item), for quick assertions. */
  methods: string[];
  /** Request path, e.g. `/` or `/v3/secret`. */
  path: string;
  headers: IncomingHttpHeaders;
}

/** A JSON-RPC request item as the upstream sees it (parsed, unvalidated). */
export type RpcItem = { jsonrpc?: unknown; id?: unknown; method?: unknown; params?: unknown } & Record<string, unknown>;

interface Delayed {
  /** Wait this long before answering (simulated latency). */
  delayMs?: number;
}

export type ScriptedBehaviour =
  /** Answer exactly this JSON; the function form receives the parsed request body. */
  | ({ kind: 'json'; body: unknown; status?: number } & Delayed)
  /** `{jsonrpc, id, result}` per request item (batches are mapped item by item). */
  | ({ kind: 'result'; result: unknown } & Delayed)
  /** `{jsonrpc, id, error: {code, message, data?}}` per request item, HTTP 200. */
  | ({ kind: 'rpc-error'; code: number; message: string; data?: unknown } & Delayed)
  /** A bare HTTP status (500, 429, …) with an optional text body. */
  | ({ kind: 'status'; status: number; body?: string; headers?: Record<string, string> } & Delayed)
  /** Any body with any content type, e.g. an HTML error page. */
  | ({ kind: 'raw'; body: string; contentType?: string; status?: number } & Delayed)
  /** Read the request and never answer (until `close()`). */
  | { kind: 'stall' }
  /** Read the request, then reset the connection without answering. */
  | { kind: 'reset' }
  /** Forward the raw body to `url`; `transform` may rewrite the parsed answer (a lying upstream). */
  | ({ kind: 'proxy'; url: string; transform?: (responseBody: unknown, requestBody: unknown) => unknown } & Delayed);

/** Decides per request; `index` is the 0-based position of this call in `calls`. */
export type BehaviourFn = (call: ReceivedCall, index: number) => ScriptedBehaviour | Promise<ScriptedBehaviour>;

export interface ScriptedUpstream {
  url: string;
  port: number;
  /** Every request received, in order (live array). */
  calls: ReceivedCall[];
  setBehaviour(behaviour: ScriptedBehaviour | BehaviourFn): void;
  /** Stops listening and destroys every open socket, stalled ones included. */
  close(): Promise<void>;
}

function methodsOf(body: unknown): string[] {
  const items = Array.isArray(body) ? body : [body];
  return items.flatMap((item) =>
    item !== null && typeof item === 'object' && typeof (item as RpcItem).method === 'string'
      ? [(item as RpcItem).method as string]
      : [],
  );
}

function idOf(item: unknown): unknown {
  return item !== null && typeof item === 'object' && 'id' in item ? (item as RpcItem).id : null;
}

/** Applies `one` to a single request or to each item of a batch. */
function perItem(body: unknown, one: (item: unknown) => unknown): unknown {
  return Array.isArray(body) ? body.map(one) : one(body);
}

function sendJson(res: ServerResponse, status: number, value: unknown): void {
  const text = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export async function startScriptedUpstream(initial: ScriptedBehaviour | BehaviourFn): Promise<ScriptedUpstream> {
  let behaviour = initial;
  const calls: ReceivedCall[] = [];
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let closed = false;

  /**
   * Holds an answer back for a behaviour's `delayMs`: a slow upstream is part of the scenario a
   * test scripts, not a wait for something to happen.
   */
  const delayAnswer = (ms: number): Promise<void> =>
    new Promise((resolve) => {
      const t = setTimeout(() => {
        timers.delete(t);
        resolve();
      }, ms);
      timers.add(t);
    });

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void handle(Buffer.concat(chunks).toString('utf8')).catch((err: unknown) => {
        // A broken script is a test bug: make it loud rather than a silent hang.
        if (!res.headersSent && !res.destroyed) {
          sendJson(res, 599, { scriptedUpstreamError: err instanceof Error ? err.message : String(err) });
        }
      });
    });

    async function handle(raw: string): Promise<void> {
      let body: unknown;
      try {
        body = JSON.parse(raw);
      } catch {
        body = undefined;
      }
      const call: ReceivedCall = { body, raw, methods: methodsOf(body), path: req.url ?? '/', headers: req.headers };
      const index = calls.push(call) - 1;
      const b = typeof behaviour === 'function' ? await behaviour(call, index) : behaviour;

      if (b.kind === 'stall') return; // socket stays open until the client gives up or close()
      if (b.kind === 'reset') {
        // RST rather than FIN, so the client sees ECONNRESET as with a crashed upstream.
        req.socket.resetAndDestroy();
        return;
      }
      if (b.delayMs) await delayAnswer(b.delayMs);
      if (closed || res.destroyed) return;

      switch (b.kind) {
        case 'json': {
          const value = typeof b.body === 'function' ? (b.body as (request: unknown) => unknown)(body) : b.body;
          sendJson(res, b.status ?? 200, value);
          return;
        }
        case 'result': {
          if (body === undefined) {
            sendJson(res, 200, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
            return;
          }
          sendJson(
            res,
            200,
            perItem(body, (item) => ({
              jsonrpc: '2.0',
              id: idOf(item),
              result: typeof b.result === 'function' ? (b.result as (request: unknown) => unknown)(item) : b.result,
            })),
          );
          return;
        }
        case 'rpc-error': {
          const error = b.data === undefined ? { code: b.code, message: b.message } : { code: b.code, message: b.message, data: b.data };
          sendJson(res, 200, perItem(body ?? null, (item) => ({ jsonrpc: '2.0', id: idOf(item), error })));
          return;
        }
        case 'status': {
          const text = b.body ?? `HTTP ${b.status}`;
          res.writeHead(b.status, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(text), ...b.headers });
          res.end(text);
          return;
        }
        case 'raw': {
          res.writeHead(b.status ?? 200, {
            'content-type': b.contentType ?? 'text/html',
            'content-length': Buffer.byteLength(b.body),
          });
          res.end(b.body);
          return;
        }
        case 'proxy': {
          const upstream = await request(b.url, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: raw,
          });
          const text = await upstream.body.text();
          if (!b.transform) {
            res.writeHead(upstream.statusCode, {
              'content-type': String(upstream.headers['content-type'] ?? 'application/json'),
              'content-length': Buffer.byteLength(text),
            });
            res.end(text);
            return;
          }
          sendJson(res, upstream.statusCode, b.transform(JSON.parse(text), body));
          return;
        }
      }
    }
  });

  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    port,
    calls,
    setBehaviour(b) {
      behaviour = b;
    },
    close() {
      if (closed) return Promise.resolve();
      closed = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      const done = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sockets) s.destroy();
      return done;
    },
  };
}

/**
 * Registers an afterEach hook that closes every scripted upstream a test started, and returns
 * the function that starts them.
 */
export function useScriptedUpstreams(): (behaviour: ScriptedBehaviour | BehaviourFn) => Promise<ScriptedUpstream> {
  const started: ScriptedUpstream[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((upstream) => upstream.close()));
  });
  return async (behaviour) => {
    const upstream = await startScriptedUpstream(behaviour);
    started.push(upstream);
    return upstream;
  };
}

/**
 * An http URL on loopback where nothing listens (connection refused): port 1 (tcpmux, which
 * nothing here serves). Not a port-0 listener closed again: its port goes back to the ephemeral
 * range, and a server another test file starts meanwhile can be given it (one such run answered
 * 404 where a refusal was expected). Checked on every call, so a machine where something does
 * listen there fails here, saying so, rather than in the test that used it.
 */
export async function refusedUrl(): Promise<string> {
  const port = 1;
  const refused = await new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code === 'ECONNREFUSED'));
  });
  if (!refused) throw new Error(`127.0.0.1:${port} does not refuse connections: the tests need a loopback port where nothing listens`);
  return `http://127.0.0.1:${port}`;
}
