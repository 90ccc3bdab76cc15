import type { IncomingHttpHeaders, IncomingMessage, ServerOptions, ServerResponse } from 'node:http';
import { asksNoCache } from '../cache/cache-control.js';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { ERROR_REGISTRY, GatewayError, toHttpStatus, type GatewayErrorCode } from '../errors.js';
import { errorReply, NULL_ID, parseBody, replyBody, serialiseBatch, serialiseReply, type EnvelopeLimits } from '../jsonrpc/envelope.js';
import { checkNetworkAllowed, type AuthenticatedKey, type Authenticator } from '../auth/authenticator.js';
import { rejected, type ItemRules } from '../auth/key-policy.js';
import { compileIpRanges, compileOrigins } from '../auth/key-settings.js';
import { clientAddressOf } from '../auth/client-address.js';
import { preflightHeaders, pushCorsHeaders, setCorsHeaders } from './cors.js';
import type { GatewayConfig } from '../config/schema.js';
import { bounded, logScrubber, pathForLog, type Logger } from '../logging/logger.js';
import { CLIENT_CLOSED_REQUEST, clientGone, createRequestContext, MAX_LOGGED_REASON, requestLogFields, type RequestContext } from './context.js';
import { abandonBodyRead, BodyTooLargeError, readBody, RequestClosedError } from './request-reader.js';
import { CLIENT_LEFT, type CallDispatcher } from './call-dispatch.js';
import { whenWritten } from './answer-delivery.js';
import type { Meter } from '../metering/meter.js';
import { utcDay } from '../metering/meter.js';
import type { KeyWithTeam } from '../store/index.js';
import type { ResolveResult } from '../routing/network-resolver.js';
import type { NetworkRuntime, NetworkSet } from './network-runtime.js';
import type { RequestSpan } from '../tracing/tracing.js';

/**
 * The RPC listener's request handler. The stages of a request, in order:
 *   receive → resolve network → (CORS preflight: answered here) → authenticate → key settings
 *   (secret / JWT, origin, user agent, IP) → read + parse body → per item: key settings (method,
 *   address) → validate → (answer locally | forward with failover) → commit (charge, or refund if
 *   the client left) → respond → log. The per-item stages (call-dispatch.ts) are shared with the
 *   WebSocket endpoint.
 * A request rejected as a whole gets one JSON-RPC error object with its HTTP status, both listed
 * in docs/errors.md.
 */

export interface RpcHandlerDeps {
  server: GatewayConfig['server'];
  /** The network set a request works with, from arrival to finish (a reload swaps in a new one). */
  acquireNetworks: () => NetworkSet;
  /** True while draining: responses tell keep-alive clients to close their connection. */
  draining: () => boolean;
  authenticator: Authenticator;
  /** Turns a parsed body into replies: the request path shared with the WebSocket endpoint. */
  calls: CallDispatcher;
  meter: Meter;
  now: () => number;
  logger: Logger;
  /** Called once per request after its response is written, with the set it acquired. */
  onFinished: (ctx: RequestContext, networks: NetworkSet) => void;
  /** Starts a request's trace span when tracing is on (undefined when the request is not traced). */
  startTrace?: ((headers: IncomingHttpHeaders) => RequestSpan | undefined) | undefined;
}

export interface RpcHandler {
  (req: IncomingMessage, res: ServerResponse): void;
  /**
   * The server's `clientError` listener: bytes Node's HTTP parser refuses, headers too large, and
   * slow clients cut off by `headersTimeoutMs` / `receiveTimeoutMs` get a JSON-RPC error
   * (400, 431, 408) and the connection is closed.
   */
  clientError(error: Error & { code?: string }, socket: Duplex): void;
  /**
   * The server's `checkContinue` listener (`Expect: 100-continue`). Node's own would write the
   * interim `100 Continue` of a pipelined request into the middle of the response before it (its
   * head, then `100 Continue`, then its body); a request whose response cannot be written yet gets
   * no interim response (RFC 9110 allows omitting it: the client has sent its body already, or
   * sends it after its timeout).
   */
  checkContinue(req: IncomingMessage, res: ServerResponse): void;
  /**
   * The server's `connection` listener: Node ends a connection after a response that closes it
   * (the client's `Connection: close`, HTTP/1.0, a 413, draining) with `destroySoon`, a reset if
   * the client's bytes are unread; on the RPC listener it closes gracefully instead.
   */
  connection(socket: Socket): void;
}

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

/** `{ name: value }` as the flat `[name, value, ...]` list `send` takes. */
function headerList(headers: Readonly<Record<string, string>> | undefined): string[] {
  const list: string[] = [];
  for (const name in headers) list.push(name, headers[name]!);
  return list;
}

const REQUEST_ID_HEADER = /^[A-Za-z0-9._:-]{1,128}$/;
/** Logged user agents are cut here: enough to tell clients apart. */
const MAX_LOGGED_USER_AGENT = 200;
/** Attempt reasons come from upstream behaviour (status codes, error codes): cut defensively. */

function isJsonContentType(header: string | undefined): boolean {
  if (header === undefined) return false;
  if (header === 'application/json') return true; // what nearly every client sends
  const mediaType = header.split(';', 1)[0]!.trim().toLowerCase();
  return mediaType === 'application/json' || (mediaType.startsWith('application/') && mediaType.endsWith('+json'));
}

/** The path prefixes of a network set's base URLs, longest first (what a logged path keeps). */
const prefixCache = new WeakMap<NetworkSet, string[]>();
function prefixesOf(networks: NetworkSet): string[] {
  let prefixes = prefixCache.get(networks);
  if (prefixes === undefined) {
    const found = new Set<string>();
    for (const runtime of networks.byId.values()) {
      for (const baseUrl of runtime.config.baseUrls) {
        const slash = baseUrl.indexOf('/');
        if (slash >= 0) found.add(baseUrl.slice(slash));
      }
    }
    prefixes = [...found].sort((a, b) => b.length - a.length);
    prefixCache.set(networks, prefixes);
  }
  return prefixes;
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

/** Status line reasons of the statuses a client error is answered with. */
const CLIENT_ERROR_REASONS: Record<number, string> = { 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large' };

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

export function createRpcHandler(deps: RpcHandlerDeps): RpcHandler {
  const { server: serverConfig, logger } = deps;
  const scrubber = logScrubber(logger);
  const startTrace = deps.startTrace;
  const limits: EnvelopeLimits = {
    maxBatchItems: serverConfig.maxBatchItems,
    maxParamsDepth: serverConfig.maxParamsDepth,
    maxParamsBytes: serverConfig.maxParamsBytes,
  };
  // Which origins' pages may read answers at all; a key's own origin list narrows it.
  const corsAllows = compileOrigins(serverConfig.cors.allowedOrigins);
  const trustedProxies = serverConfig.trustedProxies.length > 0 ? compileIpRanges(serverConfig.trustedProxies) : undefined;

  /**
   * Writes the response. Headers go to `writeHead` as a flat `[name, value, ...]` list: with an
   * object, building and reshaping it cost ~5% of a cache hit's instructions (docs/benchmarks.md).
   * A response whose client is gone is not written: the request is logged as 499.
   */
  function send(res: ServerResponse, ctx: RequestContext, status: number, body: Buffer | readonly Buffer[] | undefined, headers: string[] = []): void {
    // Answered already: a client error on its connection answered it through its response
    // (answerThrough) while this handler was still waiting (for a key lookup, say).
    if (ctx.responding) return;
    ctx.responding = true;
    if (clientGone(ctx)) {
      ctx.httpStatus = CLIENT_CLOSED_REQUEST;
      return;
    }
    ctx.httpStatus = status;
    headers.push('x-request-id', ctx.requestId);
    if (ctx.corsOrigin !== undefined) pushCorsHeaders(headers, ctx.corsOrigin);
    const length = body === undefined || !Array.isArray(body) ? body?.length : body.reduce((sum: number, part: Buffer) => sum + part.length, 0);
    if (length !== undefined) headers.push('content-type', 'application/json', 'content-length', String(length));
    if (deps.draining()) headers.push('connection', 'close');
    res.writeHead(status, headers);
    if (!Array.isArray(body)) return void res.end(body);
    // A large result's parts (replyBody): gathered by the corked socket into one writev, not copied.
    res.cork();
    for (let index = 0; index < body.length - 1; index += 1) res.write(body[index]);
    res.end(body[body.length - 1]);
    res.uncork();
  }

  function reject(res: ServerResponse, ctx: RequestContext, error: GatewayError): void {
    ctx.errorCode = error.code;
    send(res, ctx, toHttpStatus(error), serialiseReply(errorReply(NULL_ID, error)), headerList(error.headers));
  }

  /** X-Credits-Cost and X-Credits-Remaining for an authenticated request (the team's balance after it). */
  function creditHeaders(auth: KeyWithTeam, ctx: RequestContext): string[] | Promise<string[]> {
    if (ctx.teamUsed !== undefined) return creditHeadersOf(auth, ctx.teamUsed, ctx);
    // No ledger operation told this request the balance (nothing was charged or refused): ask.
    return deps.meter.peek(auth.team.id, utcDay(deps.now())).then(
      (result) => {
        ctx.teamUsed = result.teamUsed;
        return creditHeadersOf(auth, result.teamUsed, ctx);
      },
      () => ['x-credits-cost', String(ctx.creditsCharged)], // the store is unreachable: balance unknown
    );
  }

  function creditHeadersOf(auth: KeyWithTeam, teamUsed: number, ctx: RequestContext): string[] {
    return ['x-credits-cost', String(ctx.creditsCharged), 'x-credits-remaining', String(Math.max(0, auth.team.dailyCredits - teamUsed))];
  }

  async function handle(
    req: IncomingMessage,
    headers: IncomingHttpHeaders,
    res: ServerResponse,
    ctx: RequestContext,
    networks: NetworkSet,
  ): Promise<void> {
    // The connection stays open: Node drains the unread body, and a close with unread bytes would be a reset.
    if (headers.host === undefined && req.httpVersionMinor === 1 && req.httpVersionMajor === 1) {
      return reject(res, ctx, new GatewayError('TG_ERR_BAD_HTTP', 'malformed HTTP request: an HTTP/1.1 request needs a Host header'));
    }
    // A page's request: its answers, errors included, are readable there if the gateway allows the origin.
    const origin = headers.origin;
    if (origin !== undefined && corsAllows(origin)) ctx.corsOrigin = origin;
    // Resolve the network from Host + path; nothing in the body takes part.
    const resolved = networks.resolver.resolve(headers.host, req.url ?? '/');
    if (resolved.kind === 'not-found') return reject(res, ctx, new GatewayError('TG_ERR_NOT_FOUND', resolved.reason));
    const network: NetworkRuntime = resolved.kind === 'found' ? resolved.value.network : resolved.network;
    ctx.networkId = network.config.id;
    if (req.method !== 'POST') {
      if (req.method === 'OPTIONS' && origin !== undefined) return preflight(res, ctx, headers, resolved, origin);
      return reject(res, ctx, new GatewayError('TG_ERR_HTTP_METHOD', `method ${req.method ?? ''} not allowed: use POST`, undefined, { allow: 'POST' }));
    }
    if (resolved.kind === 'missing-key' || resolved.value.apiKey === undefined) {
      return reject(res, ctx, new GatewayError('TG_ERR_MISSING_KEY'));
    }
    const apiKey = resolved.value.apiKey;
    ctx.skipCacheRead = asksNoCache(headers['cache-control']);
    if (!isJsonContentType(headers['content-type'])) {
      return reject(res, ctx, new GatewayError('TG_ERR_MEDIA_TYPE'));
    }

    // Authenticate before reading the body: unknown keys cost no parsing.
    const authenticated = deps.authenticator.authenticate(apiKey);
    const auth = authenticated instanceof Promise ? await authenticated : authenticated;
    ctx.keyId = auth.key.id;
    ctx.teamId = auth.team.id;
    // From here on the team is known: even a rejection carries the credit headers.
    const rejectWithCredits = async (error: GatewayError) => {
      const credits = await creditHeaders(auth, ctx);
      for (let index = 0; index < credits.length; index += 2) res.setHeader(credits[index]!, credits[index + 1]!);
      reject(res, ctx, error);
    };
    try {
      checkNetworkAllowed(auth, network.config.id);
    } catch (error) {
      return rejectWithCredits(error as GatewayError);
    }
    // A page of an origin the gateway does not serve: refused before anything runs.
    if (origin !== undefined && ctx.corsOrigin === undefined) return rejectSettings(rejected('origin'), ctx, rejectWithCredits);
    // Key settings: nothing to do (and nothing paid) for a key without any.
    let itemRules: ItemRules | undefined;
    const policy = auth.policy;
    if (policy !== undefined) {
      if (ctx.corsOrigin !== undefined && !policy.allowsOrigin(ctx.corsOrigin)) ctx.corsOrigin = undefined;
      try {
        const admitting = policy.admit({
          origin,
          userAgent: headers['user-agent'],
          authorization: headers.authorization,
          clientAddress: () => clientAddressOf(req.socket.remoteAddress, headers['x-forwarded-for'], trustedProxies),
        });
        const admission = admitting instanceof Promise ? await admitting : admitting;
        // The key secret overrides the key's origin list too.
        if (admission.secret && origin !== undefined && corsAllows(origin)) ctx.corsOrigin = origin;
        itemRules = admission.items;
      } catch (error) {
        if (!(error instanceof GatewayError)) throw error;
        return rejectSettings(error, ctx, rejectWithCredits);
      }
    }

    let body: Buffer;
    try {
      body = await readBody(req, serverConfig.maxBodyBytes, headers['content-length']);
    } catch (error) {
      if (error instanceof BodyTooLargeError) {
        res.setHeader('connection', 'close');
        return rejectWithCredits(new GatewayError('TG_ERR_BODY_TOO_LARGE', `request body larger than ${serverConfig.maxBodyBytes} bytes`));
      }
      if (error instanceof RequestClosedError) {
        // Nothing was executed or charged and no one is left to answer: logged and counted as 499
        // (or as the 408 a slow client was cut off with, see `clientError`).
        if (ctx.errorCode === undefined) ctx.httpStatus = CLIENT_CLOSED_REQUEST;
        return;
      }
      throw error;
    }

    const parsed = parseBody(body, limits);
    if (parsed.kind === 'rejected') return rejectWithCredits(parsed.error);
    // Gone already (reset, half-closed, or refused bytes after its body): nothing is worth sending upstream.
    if (clientGone(ctx)) return void (ctx.httpStatus = CLIENT_CLOSED_REQUEST);

    // The injected clock, like every deadline check downstream (forwarder, single-flight).
    const deadline = deps.now() + network.config.requestTimeoutMs;
    if (parsed.kind === 'single') {
      const reply = await deps.calls.answerOne(parsed.item, network, auth, ctx, deadline, itemRules);
      if (reply === undefined) return send(res, ctx, 204, undefined, await creditHeaders(auth, ctx)); // a notification
      if (reply === CLIENT_LEFT) return void (ctx.httpStatus = CLIENT_CLOSED_REQUEST);
      const credits = creditHeaders(auth, ctx);
      const responseHeaders = credits instanceof Promise ? await credits : credits;
      let status = 200;
      if ('error' in reply && reply.gatewayError !== undefined) {
        ctx.errorCode = reply.gatewayError.code;
        status = toHttpStatus(reply.gatewayError);
        responseHeaders.push(...headerList(reply.gatewayError.headers));
      }
      if (ctx.cache !== undefined) responseHeaders.push('x-cache', ctx.cache);
      return send(res, ctx, status, replyBody(reply), responseHeaders);
    }

    const answered = await deps.calls.answerBatch(parsed.items, network, auth, ctx, deadline, itemRules);
    if (answered === CLIENT_LEFT) return void (ctx.httpStatus = CLIENT_CLOSED_REQUEST);
    const credits = creditHeaders(auth, ctx);
    const responseHeaders = credits instanceof Promise ? await credits : credits;
    // Batch responses are 200 whatever their items say (each carries its own error);
    // notifications only: 204.
    if (answered.length === 0) return send(res, ctx, 204, undefined, responseHeaders);
    send(res, ctx, 200, serialiseBatch(answered), responseHeaders);
  }

  /** A refusal by key settings (counted by rule type) or by the key's credentials. */
  function rejectSettings(error: GatewayError, ctx: RequestContext, rejectWithCredits: (error: GatewayError) => Promise<void>): Promise<void> {
    if (error.code === 'TG_ERR_KEY_SETTINGS') (ctx.ruleRejections ??= []).push((error.data as { rule: string }).rule);
    return rejectWithCredits(error);
  }

  /**
   * A CORS preflight: answered 204 before anything else, never charged. Only the origin rules
   * apply (the gateway's, and the key's when the path names a known key); an unknown or missing
   * key gets the gateway's answer, so the page can then read the 401 of its actual request.
   */
  async function preflight(res: ServerResponse, ctx: RequestContext, headers: IncomingHttpHeaders, resolved: ResolveResult<NetworkRuntime>, origin: string): Promise<void> {
    if (ctx.corsOrigin === undefined) return reject(res, ctx, rejected('origin'));
    const apiKey = resolved.kind === 'found' ? resolved.value.apiKey : undefined;
    if (apiKey !== undefined) {
      let auth: AuthenticatedKey | undefined;
      try {
        const authenticated = deps.authenticator.authenticate(apiKey);
        auth = authenticated instanceof Promise ? await authenticated : authenticated;
      } catch {
        auth = undefined; // unknown, revoked, or the store is unreachable: the actual request says so
      }
      if (auth !== undefined) {
        ctx.keyId = auth.key.id;
        ctx.teamId = auth.team.id;
        if (auth.policy !== undefined && !auth.policy.allowsOrigin(origin)) {
          ctx.corsOrigin = undefined;
          (ctx.ruleRejections ??= []).push('origin');
          return reject(res, ctx, rejected('origin'));
        }
      }
    }
    const requested = headers['access-control-request-headers'];
    const allowed = preflightHeaders(origin, requested, serverConfig.cors.maxAgeSeconds);
    ctx.corsOrigin = undefined; // preflightHeaders has them
    send(res, ctx, 204, undefined, allowed);
  }

  // Request ids: a random per-process prefix and a counter (unique across replicas and restarts,
  // cheaper than a UUID per request). A well-formed incoming X-Request-Id is kept instead.
  const requestIdPrefix = `${randomBytes(6).toString('hex')}-`;
  let requestCounter = 0;
  const nextRequestId = (): string => requestIdPrefix + (requestCounter++).toString(36);

  /**
   * The client's X-Request-Id if it is well-formed and holds nothing shaped like a secret (a key
   * with or without its prefix, the admin token, an upstream credential), else one of ours.
   */
  function requestIdOf(incoming: string | string[] | undefined): string {
    if (typeof incoming === 'string' && REQUEST_ID_HEADER.test(incoming) && !scrubber.containsInClientText(incoming)) return incoming;
    return nextRequestId();
  }

  function finish(req: IncomingMessage, headers: IncomingHttpHeaders, ctx: RequestContext, networks: NetworkSet): void {
    // Building the line costs more than a disabled level check (see docs/benchmarks.md).
    if (logger.isLevelEnabled('info')) {
      // Every string here is either ours, config text, or bounded and scrubbed (docs/security.md).
      const userAgent = headers['user-agent'];
      logger.info(
        {
          requestId: ctx.requestId,
          path: pathForLog(req.url ?? '', prefixesOf(networks)),
          ...requestLogFields(ctx),
          userAgent: userAgent === undefined ? undefined : scrubber.scrubClientText(userAgent, MAX_LOGGED_USER_AGENT),
          durationMs: Math.round((performance.now() - ctx.startedAt) * 100) / 100,
        },
        'request',
      );
    }
    deps.onFinished(ctx, networks);
  }

  const handler = ((req, res) => {
    // `req.headers` is a getter with a cost: read once, passed along.
    const headers = req.headers;
    const socket: TrackedSocket = req.socket;
    const ctx = createRequestContext(requestIdOf(headers['x-request-id']), socket, res);
    if (startTrace !== undefined) ctx.trace = startTrace(headers);
    socket[PENDING_REQUEST] = ctx;
    const networks = deps.acquireNetworks();
    handle(req, headers, res, ctx, networks).then(
      () => whenWritten(res, ctx, deps.meter, logger, () => finish(req, headers, ctx, networks)),
      (error: unknown) => {
        // Nothing here may throw: it would be an unhandled rejection, which ends the process.
        try {
          if (error instanceof GatewayError) {
            reject(res, ctx, error);
          } else {
            logger.error({ err: error, requestId: ctx.requestId }, 'request failed unexpectedly');
            if (!res.headersSent) reject(res, ctx, new GatewayError('TG_ERR_INTERNAL', undefined, undefined, undefined, error));
            else res.destroy();
          }
        } catch (failure) {
          logger.error({ err: failure, requestId: ctx.requestId }, 'request failed unexpectedly');
          res.destroy();
        }
        whenWritten(res, ctx, deps.meter, logger, () => finish(req, headers, ctx, networks));
      },
    );
  }) as RpcHandler;

  handler.connection = (socket) => {
    socket.destroySoon = () => closeGracefully(socket, (socket as TrackedSocket)[LINGER]);
  };

  handler.checkContinue = (req, res) => {
    if (res.socket !== null && !res.socket.destroyed) {
      res.writeContinue();
    } else {
      // No interim response for a pipelined request: its client sent its body with it. Node would
      // then close the connection after this response (a client waiting for `100 Continue` might
      // still send its body), dropping the answers pipelined after it; this one is not waiting.
      (res as ServerResponse & { _expect_continue?: boolean })._expect_continue = false;
    }
    handler(req, res);
  };

  /** Writes a client error's answer straight to the connection, closes it gracefully, logs it on a line of its own. */
  function answerClientError(socket: Socket, code: GatewayErrorCode, reason: string | undefined, lingerMs: number): void {
    // Already closing after a response that ended the connection: nothing more is written.
    if ((socket as TrackedSocket)[CLOSING] === true) return;
    if (socket.destroyed || !socket.writable) return void socket.destroy();
    const status = ERROR_REGISTRY[code].httpStatus;
    const requestId = nextRequestId();
    const body = serialiseReply(errorReply(NULL_ID, new GatewayError(code)));
    const head = `HTTP/1.1 ${status} ${CLIENT_ERROR_REASONS[status] ?? 'Bad Request'}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nX-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n`;
    socket.write(Buffer.concat([Buffer.from(head, 'latin1'), body]));
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

  handler.clientError = (error, duplex) => {
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
  return handler;
}
