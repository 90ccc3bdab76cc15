import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { asksNoCache } from '../cache/cache-control.js';
import { randomBytes } from 'node:crypto';
import { GatewayError, toHttpStatus } from '../errors.js';
import { errorReply, NULL_ID, parseBody, replyBody, returnCopiedResults, serialiseBatch, serialiseReply, type EnvelopeLimits } from '../jsonrpc/envelope.js';
import { returnLent } from '../jsonrpc/answer-buffers.js';
import type { ResultBytes } from '../jsonrpc/result-bytes.js';
import { rejected } from '../auth/key-policy.js';
import { preflightHeaders, pushCorsHeaders } from './cors.js';
import type { GatewayConfig } from '../config/schema.js';
import { logRequest, logScrubber, pathForLog, type Logger } from '../logging/logger.js';
import { CLIENT_CLOSED_REQUEST, clientGone, createRequestContext, requestLogFields, type RequestContext } from './context.js';
import { BodyTooLargeError, readBody, RequestClosedError } from './request-reader.js';
import { CLIENT_LEFT, type CallDispatcher } from './call-dispatch.js';
import { whenWritten } from './answer-delivery.js';
import type { Admitter } from './admission.js';
import { createConnectionHandlers, trackRequest, type ConnectionHandlers } from './http-connections.js';
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
  /** Who may call: the same decision the WebSocket endpoint takes. */
  admitter: Admitter;
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

export interface RpcHandler extends ConnectionHandlers {
  (req: IncomingMessage, res: ServerResponse): void;
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
  const corsAllows = deps.admitter.gatewayAllowsOrigin;

  /**
   * Writes the response. Headers go to `writeHead` as a flat `[name, value, ...]` list: with an
   * object, building and reshaping it cost ~5% of a cache hit's instructions (docs/benchmarks.md).
   * A response whose client is gone is not written: the request is logged as 499.
   */
  function send(res: ServerResponse, ctx: RequestContext, status: number, body: Buffer | readonly Buffer[] | undefined, headers: string[] = [], lent?: ResultBytes | string): void {
    // Answered already: a client error on its connection answered it through its response
    // (answerThrough) while this handler was still waiting (for a key lookup, say).
    if (ctx.responding) return;
    ctx.responding = true;
    if (clientGone(ctx)) {
      ctx.httpStatus = CLIENT_CLOSED_REQUEST;
      returnLent(lent);
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
    // A result in a pooled buffer (jsonrpc/answer-buffers.ts) goes back once the write has
    // completed; a response that fails never finishes, and its buffer is left to the collector.
    if (lent === undefined) res.end(body[body.length - 1]);
    else res.end(body[body.length - 1], () => returnLent(lent));
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

  /** A rejection of an authenticated request: it carries the team's credit headers. */
  async function rejectWithCredits(res: ServerResponse, ctx: RequestContext, auth: KeyWithTeam, error: GatewayError): Promise<void> {
    const credits = await creditHeaders(auth, ctx);
    for (let index = 0; index < credits.length; index += 2) res.setHeader(credits[index]!, credits[index + 1]!);
    reject(res, ctx, error);
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

    // Admitted before reading the body: unknown keys cost no parsing.
    const admitting = deps.admitter.admit(apiKey, network.config.id, {
      origin,
      userAgent: headers['user-agent'],
      authorization: headers.authorization,
      clientAddress: () => deps.admitter.clientAddress(req.socket.remoteAddress, headers['x-forwarded-for']),
    });
    const admission = admitting instanceof Promise ? await admitting : admitting;
    const known = admission.auth;
    if (known !== undefined) {
      ctx.keyId = known.key.id;
      ctx.teamId = known.team.id;
    }
    // The key's origin list decides whether the page may read the answer; its secret overrides it.
    const secret = admission.kind === 'admitted' && admission.secret;
    if (ctx.corsOrigin !== undefined && !secret && known?.policy !== undefined && (admission.kind === 'admitted' || admission.bySettings) && !known.policy.allowsOrigin(ctx.corsOrigin)) {
      ctx.corsOrigin = undefined;
    }
    if (admission.kind === 'refused') {
      if (admission.rule !== undefined) (ctx.ruleRejections ??= []).push(admission.rule);
      // Once the team is known, even a rejection carries the credit headers.
      return known === undefined ? reject(res, ctx, admission.error) : rejectWithCredits(res, ctx, known, admission.error);
    }
    const { auth, rules: itemRules } = admission;

    let body: Buffer;
    try {
      body = await readBody(req, serverConfig.maxBodyBytes, headers['content-length']);
    } catch (error) {
      if (error instanceof BodyTooLargeError) {
        res.setHeader('connection', 'close');
        return rejectWithCredits(res, ctx, auth, new GatewayError('TG_ERR_BODY_TOO_LARGE', `request body larger than ${serverConfig.maxBodyBytes} bytes`));
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
    if (parsed.kind === 'rejected') return rejectWithCredits(res, ctx, auth, parsed.error);
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
      return send(res, ctx, status, replyBody(reply), responseHeaders, 'result' in reply ? reply.result : undefined);
    }

    const answered = await deps.calls.answerBatch(parsed.items, network, auth, ctx, deadline, itemRules);
    if (answered === CLIENT_LEFT) return void (ctx.httpStatus = CLIENT_CLOSED_REQUEST);
    const credits = creditHeaders(auth, ctx);
    const responseHeaders = credits instanceof Promise ? await credits : credits;
    // Batch responses are 200 whatever their items say (each carries its own error);
    // notifications only: 204.
    if (answered.length === 0) return send(res, ctx, 204, undefined, responseHeaders);
    send(res, ctx, 200, serialiseBatch(answered), responseHeaders);
    returnCopiedResults(answered);
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
      const { allowed, auth } = await deps.admitter.keyAllowsOrigin(apiKey, origin);
      if (auth !== undefined) {
        ctx.keyId = auth.key.id;
        ctx.teamId = auth.team.id;
      }
      if (!allowed) {
        ctx.corsOrigin = undefined;
        (ctx.ruleRejections ??= []).push('origin');
        return reject(res, ctx, rejected('origin'));
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

  // A client calls the same URL request after request: the last logged path is kept with the URL
  // and network set it came from, and the next request of the same URL costs two comparisons
  // instead of pathForLog's search of the prefixes (about 2,000 instructions, docs/benchmarks.md).
  let lastLoggedUrl: string | undefined;
  let lastLoggedNetworks: NetworkSet | undefined;
  let lastLoggedPath = '';
  function loggedPath(url: string, networks: NetworkSet): string {
    if (url !== lastLoggedUrl || networks !== lastLoggedNetworks) {
      lastLoggedPath = pathForLog(url, prefixesOf(networks));
      lastLoggedUrl = url;
      lastLoggedNetworks = networks;
    }
    return lastLoggedPath;
  }

  function finish(req: IncomingMessage, headers: IncomingHttpHeaders, ctx: RequestContext, networks: NetworkSet): void {
    // Building the line costs more than a disabled level check (see docs/benchmarks.md).
    if (logger.isLevelEnabled('info')) {
      // Every string here is either ours, config text, or bounded and scrubbed (docs/security.md).
      const userAgent = headers['user-agent'];
      const path = loggedPath(req.url ?? '', networks);
      logRequest(logger, requestLogFields(ctx, path, undefined, userAgent === undefined ? undefined : scrubber.scrubClientText(userAgent, MAX_LOGGED_USER_AGENT)));
    }
    deps.onFinished(ctx, networks);
  }

  const handler = ((req, res) => {
    // `req.headers` is a getter with a cost: read once, passed along.
    const headers = req.headers;
    const ctx = createRequestContext(requestIdOf(headers['x-request-id']), req.socket, res);
    if (startTrace !== undefined) ctx.trace = startTrace(headers);
    trackRequest(req.socket, ctx);
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
  Object.assign(handler, createConnectionHandlers({ handle: handler, logger, nextRequestId }));

  return handler;
}
