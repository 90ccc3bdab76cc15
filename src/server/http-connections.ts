import { STATUS_CODES, type IncomingMessage, type ServerOptions, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ERROR_REGISTRY, GatewayError, toHttpStatus, type GatewayErrorCode } from '../errors.js';
import { errorReply, NULL_ID, serialiseReply } from '../jsonrpc/envelope.js';
import type { GatewayConfig } from '../config/schema.js';
import { bounded, type Logger } from '../logging/logger.js';
import { MAX_LOGGED_REASON, type RequestContext } from './context.js';
import { setCorsHeaders } from './cors.js';
import { abandonBodyRead } from './request-reader.js';

/**
 * The RPC listener's connections, below the requests on them: Node's server options, a close that
 * loses no answer already written, and a JSON-RPC answer for bytes Node's HTTP parser refuses or a
 * client too slow to send its request. The request handler (rpc-handler.ts) only tells this module
 * which request is the latest on its connection ({@link trackRequest}).
 */

/**
 * Node's server options for the RPC listener. Node enforces its header and request timeouts by
 * checking connections every `connectionsCheckingInterval` (30 s by default, which let a slow
 * client hold a connection up to 30 s past either bound); checking every second (or a quarter
 * of the shorter bound, when bounds are that short) keeps the documented bounds within a second.
 */
export function rpcServerOptions(server: GatewayConfig['server']): ServerOptions {
  const shortest = Math.min(server.headersTimeoutMs, server.receiveTimeoutMs);
  return {
    keepAliveTimeout: server.keepAliveTimeoutMs,
    headersTimeout: server.headersTimeoutMs,
    requestTimeout: server.receiveTimeoutMs,
    connectionsCheckingInterval: Math.max(10, Math.min(1_000, Math.floor(shortest / 4))),
    // Node would answer an HTTP/1.1 request without Host with a bare 400 of its own; the handler
    // answers it with a JSON-RPC error instead (same status, same close).
    requireHostHeader: false,
  };
}

/** How long a closing connection keeps draining what its client still sends. */
const LINGER_MS = 2_000;
/** The same for a client cut off for being slow: its connection must close within a second of the bound. */
const TIMEOUT_LINGER_MS = 200;

/**
 * Closes a connection without losing what was written to it. Closing a TCP socket that still has
 * unread bytes from the client sends a reset, and a reset makes the client's side drop every
 * answer it has not read yet, earlier pipelined ones included (answers already charged). So: send
 * FIN after what was written, keep reading and dropping whatever the client still sends, and
 * destroy once it closes its side, or after {@link LINGER_MS} (a lingering close, as nginx does).
 */
function closeGracefully(socket: Socket, lingerMs = LINGER_MS): void {
  if (socket.destroyed || (socket as TrackedSocket)[CLOSING] === true) return;
  (socket as TrackedSocket)[CLOSING] = true;
  socket.end();
  socket.resume();
  const timer = setTimeout(() => socket.destroy(), lingerMs);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
}

/**
 * A whole HTTP/1.1 error response, written straight to a connection that has no response object
 * (a client error Node's parser raised, a refused WebSocket upgrade): the gateway error's status
 * and JSON-RPC body, `Connection: close`, and `headers` (the error's own, such as Retry-After,
 * and any given).
 */
export function rawErrorResponse(error: GatewayError, headers: Readonly<Record<string, string>> = {}): Buffer {
  const status = toHttpStatus(error);
  const body = serialiseReply(errorReply(NULL_ID, error));
  const lines = [`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Error'}`, 'content-type: application/json', `content-length: ${body.length}`, 'connection: close'];
  for (const [name, value] of Object.entries({ ...error.headers, ...headers })) lines.push(`${name}: ${value}`);
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body]);
}

function clientErrorCode(code: string | undefined): GatewayErrorCode {
  if (code === 'ERR_HTTP_REQUEST_TIMEOUT') return 'TG_ERR_REQUEST_TIMEOUT';
  if (code === 'HPE_HEADER_OVERFLOW') return 'TG_ERR_HEADERS_TOO_LARGE';
  return 'TG_ERR_BAD_HTTP';
}

/** The last request that started on a connection (kept until the next one), for a client error to wait for or answer through. */
const PENDING_REQUEST = Symbol('tollgate.pendingRequest');
/** Set once a connection's client error was answered. */
const CLIENT_ERROR_SEEN = Symbol('tollgate.clientErrorSeen');
/** Set once a connection is closing gracefully: what the client still sends is only drained. */
const CLOSING = Symbol('tollgate.closing');
/** How long this connection lingers when it closes, when not {@link LINGER_MS}. */
const LINGER = Symbol('tollgate.linger');
type TrackedSocket = Socket & { [PENDING_REQUEST]?: RequestContext; [CLIENT_ERROR_SEEN]?: boolean; [CLOSING]?: boolean; [LINGER]?: number };

/** Records the request that just started on its connection: a client error there is answered after (or through) it. */
export function trackRequest(socket: Socket, ctx: RequestContext): void {
  (socket as TrackedSocket)[PENDING_REQUEST] = ctx;
}

export interface ConnectionHandlers {
  /**
   * The server's `connection` listener: Node ends a connection after a response that closes it
   * (the client's `Connection: close`, HTTP/1.0, a 413, draining) with `destroySoon`, a reset if
   * the client's bytes are unread; on the RPC listener it closes gracefully instead.
   */
  connection(socket: Socket): void;
  /**
   * The server's `checkContinue` listener (`Expect: 100-continue`). Node's own would write the
   * interim `100 Continue` of a pipelined request into the middle of the response before it (its
   * head, then `100 Continue`, then its body); a request whose response cannot be written yet gets
   * no interim response (RFC 9110 allows omitting it: the client has sent its body already, or
   * sends it after its timeout).
   */
  checkContinue(req: IncomingMessage, res: ServerResponse): void;
  /**
   * The server's `clientError` listener: bytes Node's HTTP parser refuses, headers too large, and
   * slow clients cut off by `headersTimeoutMs` / `receiveTimeoutMs` get a JSON-RPC error
   * (400, 431, 408) and the connection is closed.
   */
  clientError(error: Error & { code?: string }, socket: Duplex): void;
}

/** The connection listeners of the RPC listener; `handle` is its request handler. */
export function createConnectionHandlers(deps: {
  handle: (req: IncomingMessage, res: ServerResponse) => void;
  logger: Logger;
  nextRequestId: () => string;
}): ConnectionHandlers {
  const { handle, logger, nextRequestId } = deps;

  const connection = (socket: Socket): void => {
    socket.destroySoon = () => closeGracefully(socket, (socket as TrackedSocket)[LINGER]);
  };

  const checkContinue = (req: IncomingMessage, res: ServerResponse): void => {
    if (res.socket !== null && !res.socket.destroyed) {
      res.writeContinue();
    } else {
      // No interim response for a pipelined request: its client sent its body with it. Node would
      // then close the connection after this response (a client waiting for `100 Continue` might
      // still send its body), dropping the answers pipelined after it; this one is not waiting.
      (res as ServerResponse & { _expect_continue?: boolean })._expect_continue = false;
    }
    handle(req, res);
  };

  /** Writes a client error's answer straight to the connection, closes it gracefully, logs it on a line of its own. */
  function answerClientError(socket: Socket, code: GatewayErrorCode, reason: string | undefined, lingerMs: number): void {
    // Already closing after a response that ended the connection: nothing more is written.
    if ((socket as TrackedSocket)[CLOSING] === true) return;
    if (socket.destroyed || !socket.writable) return void socket.destroy();
    const status = ERROR_REGISTRY[code].httpStatus;
    const requestId = nextRequestId();
    socket.write(rawErrorResponse(new GatewayError(code), { 'x-request-id': requestId }));
    // Like Node's own handler, the connection is done; unlike it, without a reset (see closeGracefully).
    closeGracefully(socket, lingerMs);
    if (logger.isLevelEnabled('info')) {
      logger.info({ requestId, status, error: code, reason: bounded(reason ?? 'unknown', MAX_LOGGED_REASON) }, 'request');
    }
  }

  /**
   * Answers the request still being received on a connection (the one refused bytes broke, or a
   * slow one) with a client error, through its own response: Node writes it after any answer
   * pipelined before it, then ends the connection (gracefully, see `connection`). Its handler,
   * waiting for a body that will not come, is told to stop and logs it with this status.
   */
  function answerThrough(ctx: RequestContext, response: ServerResponse, code: GatewayErrorCode, lingerMs: number): void {
    ctx.responding = true;
    ctx.httpStatus = ERROR_REGISTRY[code].httpStatus;
    ctx.errorCode = code;
    if (ctx.socket !== undefined) (ctx.socket as TrackedSocket)[LINGER] = lingerMs;
    if (ctx.corsOrigin !== undefined) setCorsHeaders(response, ctx.corsOrigin);
    const body = serialiseReply(errorReply(NULL_ID, new GatewayError(code)));
    response.writeHead(ctx.httpStatus, ['content-type', 'application/json', 'content-length', String(body.length), 'x-request-id', ctx.requestId, 'connection', 'close']);
    response.end(body);
    abandonBodyRead(response.req);
  }

  const clientError = (error: Error & { code?: string }, duplex: Duplex): void => {
    const socket = duplex as TrackedSocket;
    // Node's parser stays in error: more bytes on the connection report it again. Answer once.
    if (socket[CLIENT_ERROR_SEEN] === true || socket[CLOSING] === true) return;
    socket[CLIENT_ERROR_SEEN] = true;
    // A reset, a client that closed its side mid-request, a socket already closed: no one to answer.
    if (error.code === 'ECONNRESET' || error.code === 'HPE_INVALID_EOF_STATE' || !socket.writable || typeof socket.destroySoon !== 'function') {
      return void socket.destroy();
    }
    const code = clientErrorCode(error.code);
    // A slow client is cut off promptly (the bound is documented): a short linger only keeps its
    // answer from being lost to a reset.
    const lingerMs = code === 'TG_ERR_REQUEST_TIMEOUT' ? TIMEOUT_LINGER_MS : LINGER_MS;
    // The last request that started on this connection; its response is the last one in order.
    const latest = socket[PENDING_REQUEST];
    const response = latest?.response;
    if (latest === undefined || response === undefined || response.writableFinished || response.destroyed) {
      return answerClientError(socket, code, error.code, lingerMs);
    }
    if (!latest.responding && response.req.complete !== true) return answerThrough(latest, response, code, lingerMs);
    // Bytes Node refused after requests still being answered (pipelined garbage, anything after a
    // `Connection: close` request): those answers go out first, then this one, then the close.
    // Written now, it would go out ahead of them, where the client takes it for their answer.
    response.once('finish', () => answerClientError(socket, code, error.code, lingerMs));
    response.once('close', () => {
      if (!response.writableFinished) socket.destroy();
    });
  };

  return { connection, checkContinue, clientError };
}
