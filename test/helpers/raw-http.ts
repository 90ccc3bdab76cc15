// Raw HTTP/1.1 over TCP, for tests that send what fetch and undici refuse to send: malformed
// requests, mismatched lengths, trickled bytes, connections reset or half-closed mid-call.

import { connect, type Socket } from 'node:net';

export interface RawResponse {
  status: number;
  headers: Map<string, string>;
  /** The body as text (decoded from chunked transfer coding when the response used it). */
  body: string;
}

export interface RawExchange {
  /** Every byte the server sent, as latin1 text (one char per byte). */
  raw: string;
  /** The responses found in `raw`, in order. */
  responses: RawResponse[];
  /** True when the server closed the connection (FIN or reset) before `timeoutMs`. */
  closedByServer: boolean;
  /** Milliseconds from the first byte sent to the close (or to the timeout). */
  elapsedMs: number;
}

export interface RawExchangeOptions {
  /** Give up (and destroy the socket) after this long; the exchange then reports what it got. */
  timeoutMs?: number;
  /** Called once everything was written, with the socket (reset it, half-close it, write more...). */
  afterSend?: (socket: Socket) => void;
  /** Stop waiting as soon as this many complete responses arrived (keep-alive connections). */
  responses?: number;
  /** Read nothing for this long after sending (a slow reader: the server's answers queue up). */
  readAfterMs?: number;
}

/** Parses as many complete HTTP/1.1 responses as `raw` holds. */
export function parseResponses(raw: string): RawResponse[] {
  const responses: RawResponse[] = [];
  let offset = 0;
  while (offset < raw.length) {
    const headEnd = raw.indexOf('\r\n\r\n', offset);
    if (headEnd < 0) break;
    const [statusLine = '', ...lines] = raw.slice(offset, headEnd).split('\r\n');
    const status = Number(statusLine.split(' ')[1]);
    const headers = new Map<string, string>();
    for (const line of lines) {
      const colon = line.indexOf(':');
      headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
    }
    let bodyStart = headEnd + 4;
    let body = '';
    if (headers.get('transfer-encoding')?.toLowerCase() === 'chunked') {
      for (;;) {
        const sizeEnd = raw.indexOf('\r\n', bodyStart);
        if (sizeEnd < 0) return responses;
        const size = Number.parseInt(raw.slice(bodyStart, sizeEnd), 16);
        if (Number.isNaN(size) || sizeEnd + 2 + size + 2 > raw.length) return responses;
        body += raw.slice(sizeEnd + 2, sizeEnd + 2 + size);
        bodyStart = sizeEnd + 2 + size + 2;
        if (size === 0) break;
      }
    } else {
      const length = Number(headers.get('content-length') ?? 0);
      if (bodyStart + length > raw.length) break;
      body = raw.slice(bodyStart, bodyStart + length);
      bodyStart += length;
    }
    responses.push({ status, headers, body: Buffer.from(body, 'latin1').toString('utf8') });
    offset = bodyStart;
  }
  return responses;
}

/** Connects, writes `parts` in order (strings as UTF-8, buffers as they are), and collects the answer. */
export function rawExchange(port: number, parts: ReadonlyArray<string | Buffer>, options: RawExchangeOptions = {}): Promise<RawExchange> {
  const timeoutMs = options.timeoutMs ?? 5_000;
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let started = 0;
    let settled = false;
    const socket = connect(port, '127.0.0.1');
    const finish = (closedByServer: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const raw = Buffer.concat(chunks).toString('latin1');
      resolve({ raw, responses: parseResponses(raw), closedByServer, elapsedMs: performance.now() - started });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.on('connect', () => {
      started = performance.now();
      if (options.readAfterMs !== undefined) {
        socket.pause();
        setTimeout(() => socket.resume(), options.readAfterMs);
      }
      for (const part of parts) socket.write(part);
      options.afterSend?.(socket);
    });
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (options.responses !== undefined && parseResponses(Buffer.concat(chunks).toString('latin1')).length >= options.responses) finish(false);
    });
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
  });
}

/** `POST path` with a JSON content type and a correct Content-Length, as one string. */
export function postRequest(path: string, body: string | Buffer, extraHeaders: string[] = []): Buffer {
  const bytes = typeof body === 'string' ? Buffer.from(body) : body;
  const head = [`POST ${path} HTTP/1.1`, 'Host: 127.0.0.1', 'Content-Type: application/json', `Content-Length: ${bytes.length}`, ...extraHeaders].join('\r\n');
  return Buffer.concat([Buffer.from(`${head}\r\n\r\n`), bytes]);
}

/**
 * Writes `parts` one at a time, `intervalMs` apart (a slowloris client), and reports when the
 * server closed the connection.
 */
export function trickle(port: number, head: string, parts: string[], intervalMs: number, timeoutMs: number): Promise<RawExchange> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let started = 0;
    let settled = false;
    let index = 0;
    const socket = connect(port, '127.0.0.1');
    let interval: NodeJS.Timeout | undefined;
    const finish = (closedByServer: boolean) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearInterval(interval);
      socket.destroy();
      const raw = Buffer.concat(chunks).toString('latin1');
      resolve({ raw, responses: parseResponses(raw), closedByServer, elapsedMs: performance.now() - started });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.on('connect', () => {
      started = performance.now();
      socket.write(head);
      interval = setInterval(() => {
        if (index < parts.length && socket.writable) socket.write(parts[index++]!);
      }, intervalMs);
    });
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
  });
}
