import type { IncomingMessage } from 'node:http';

/**
 * Reading an incoming request's body. It is on the cache-hit path, where the gateway is measured
 * against a bare Node server (docs/benchmarks.md), so it avoids per-request closures and
 * Node's stream iterator.
 */

export class BodyTooLargeError extends Error {}

/** The client closed the connection before its whole body arrived: there is no one to answer. */
export class RequestClosedError extends Error {
  constructor() {
    super('request closed before its body was read');
  }
}

/** What one body read keeps between the stream's events. */
interface BodyRead {
  chunks: Buffer[];
  size: number;
  maxBytes: number;
  ended: boolean;
  resolve: (body: Buffer) => void;
  reject: (error: Error) => void;
}

const BODY_READ = Symbol('tollgate.bodyRead');
type ReadingRequest = IncomingMessage & { [BODY_READ]?: BodyRead };

// The stream's listeners are shared functions that find their read on the request (`this`): a
// closure per listener per request, and V8's first-call set-up of each, showed in instruction
// counts.
function onBodyData(this: ReadingRequest, chunk: Buffer): void {
  const read = this[BODY_READ]!;
  read.size += chunk.length;
  if (read.size > read.maxBytes) {
    stopReading(this);
    this.resume(); // discard the rest; the 413 reply closes the connection
    read.reject(new BodyTooLargeError());
    return;
  }
  read.chunks.push(chunk);
}

function onBodyEnd(this: ReadingRequest): void {
  const read = this[BODY_READ]!;
  read.ended = true;
  read.resolve(read.chunks.length === 1 ? read.chunks[0]! : Buffer.concat(read.chunks, read.size));
}

// A client that goes away mid-body destroys the request, which then emits 'close' without 'end'.
// No 'error' listener: Node's IncomingMessage emits its abort error only when one is attached,
// and 'close' follows either way (one listener fewer per request on the cache-hit path).
// 'close' also comes after 'end' on success: it must not build an Error (a stack trace) then.
function onBodyClose(this: ReadingRequest): void {
  const read = this[BODY_READ]!;
  if (read.ended) return;
  stopReading(this);
  read.reject(new RequestClosedError());
}

function stopReading(req: ReadingRequest): void {
  req.off('data', onBodyData);
  req.off('end', onBodyEnd);
  req.off('close', onBodyClose);
}

/**
 * Reads the whole body, refusing one larger than `maxBytes` (by its declared `Content-Length`,
 * passed in by the caller that already holds the headers, before reading anything). Plain listeners rather than `for await`: the stream's async iterator costs
 * a few microseconds per request. On success the listeners stay on the finished stream, which is
 * discarded with the request.
 */
export function readBody(req: IncomingMessage, maxBytes: number, contentLength: string | undefined): Promise<Buffer> {
  const declared = Number(contentLength);
  if (Number.isFinite(declared) && declared > maxBytes) return Promise.reject(new BodyTooLargeError());
  // The client may have gone while the key was being looked up: no event would come any more.
  if (req.destroyed) return Promise.reject(new RequestClosedError());
  return new Promise((resolve, reject) => {
    (req as ReadingRequest)[BODY_READ] = { chunks: [], size: 0, maxBytes, ended: false, resolve, reject };
    req.on('data', onBodyData);
    req.on('end', onBodyEnd);
    req.on('close', onBodyClose);
  });
}

/**
 * Gives up a body read still waiting for bytes, as if the client had left: the request was
 * answered without its body (a client error on its connection), and Node, having detached it,
 * will not close it.
 */
export function abandonBodyRead(req: IncomingMessage): void {
  const read = (req as ReadingRequest)[BODY_READ];
  if (read === undefined || read.ended) return;
  read.ended = true;
  stopReading(req as ReadingRequest);
  read.reject(new RequestClosedError());
}
