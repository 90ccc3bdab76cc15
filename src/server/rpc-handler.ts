import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import { GatewayError, toHttpStatus } from '../errors.js';
import { errorReply, parseBody, serialiseBatch, serialiseReply, type Reply, type RequestItem } from '../jsonrpc/envelope.js';
import { checkNetworkAllowed, type Authenticator } from '../auth/authenticator.js';
import type { GatewayConfig } from '../config/schema.js';
import { redactKeyPath, type Logger } from '../logging/logger.js';
import { CLIENT_CLOSED_REQUEST, createRequestContext, type RequestContext } from './context.js';
import { BodyTooLargeError, readBody, RequestClosedError } from './request-reader.js';
import type { CallExecutor } from './call-executor.js';
import type { Meter } from '../metering/meter.js';
import { utcDay } from '../metering/meter.js';
import type { KeyWithTeam } from '../store/index.js';
import type { NetworkRuntime, NetworkSet } from './network-runtime.js';

/**
 * The RPC listener's request handler. The stages of a request, in order:
 *   receive → resolve network → authenticate → read + parse body → per item: validate →
 *   (answer locally | forward with failover) → respond → log.
 * A request rejected as a whole gets one JSON-RPC error object with its HTTP status (DESIGN §2).
 */

export interface RpcHandlerDeps {
  server: GatewayConfig['server'];
  /** The network set a request works with, from arrival to finish (a reload swaps in a new one). */
  acquireNetworks: () => NetworkSet;
  /** True while draining: responses tell keep-alive clients to close their connection. */
  draining: () => boolean;
  authenticator: Authenticator;
  executor: CallExecutor;
  meter: Meter;
  now: () => number;
  logger: Logger;
  /** Called once per request after its response is written, with the set it acquired. */
  onFinished: (ctx: RequestContext, networks: NetworkSet) => void;
}

/** Metrics outcome of one reply: `ok`, `upstream_error` (passed through), or the gateway error's code. */
function outcomeOf(reply: Reply): string {
  if ('result' in reply) return 'ok';
  return reply.gatewayError === undefined ? 'upstream_error' : reply.gatewayError.code.slice('TG_ERR_'.length).toLowerCase();
}

/** `{ name: value }` as the flat `[name, value, ...]` list `send` takes. */
function headerList(headers: Readonly<Record<string, string>> | undefined): string[] {
  const list: string[] = [];
  for (const name in headers) list.push(name, headers[name]!);
  return list;
}

const REQUEST_ID_HEADER = /^[A-Za-z0-9._:-]{1,128}$/;

function isJsonContentType(header: string | undefined): boolean {
  if (header === undefined) return false;
  if (header === 'application/json') return true; // what nearly every client sends
  const mediaType = header.split(';', 1)[0]!.trim().toLowerCase();
  return mediaType === 'application/json' || (mediaType.startsWith('application/') && mediaType.endsWith('+json'));
}

export function createRpcHandler(deps: RpcHandlerDeps): (req: IncomingMessage, res: ServerResponse) => void {
  const { server: serverConfig, logger } = deps;

  /**
   * Writes the response. Headers go to `writeHead` as a flat `[name, value, ...]` list: with an
   * object, building and reshaping it cost ~5% of a cache hit's instructions (docs/benchmarks.md).
   */
  function send(res: ServerResponse, ctx: RequestContext, status: number, body: Buffer | undefined, headers: string[] = []): void {
    ctx.httpStatus = status;
    headers.push('x-request-id', ctx.requestId);
    if (body !== undefined) headers.push('content-type', 'application/json', 'content-length', String(body.length));
    if (deps.draining()) headers.push('connection', 'close');
    res.writeHead(status, headers);
    res.end(body);
  }

  function reject(res: ServerResponse, ctx: RequestContext, error: GatewayError, id: Reply['id'] = null): void {
    ctx.errorCode = error.code;
    send(res, ctx, toHttpStatus(error), serialiseReply(errorReply(id, error)), headerList(error.headers));
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
    // Resolve the network from Host + path; nothing in the body takes part.
    const resolved = networks.resolver.resolve(headers.host, req.url ?? '/');
    if (resolved.kind === 'not-found') return reject(res, ctx, new GatewayError('TG_ERR_NOT_FOUND', resolved.reason));
    const network: NetworkRuntime = resolved.kind === 'found' ? resolved.value.network : resolved.network;
    ctx.networkId = network.config.id;
    if (req.method !== 'POST') {
      return reject(res, ctx, new GatewayError('TG_ERR_HTTP_METHOD', `method ${req.method ?? ''} not allowed: use POST`, undefined, { allow: 'POST' }));
    }
    if (resolved.kind === 'missing-key' || resolved.value.apiKey === undefined) {
      return reject(res, ctx, new GatewayError('TG_ERR_MISSING_KEY'));
    }
    if (!isJsonContentType(headers['content-type'])) {
      return reject(res, ctx, new GatewayError('TG_ERR_MEDIA_TYPE'));
    }

    // Authenticate before reading the body: unknown keys cost no parsing.
    const authenticated = deps.authenticator.authenticate(resolved.value.apiKey);
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

    let body: Buffer;
    try {
      body = await readBody(req, serverConfig.maxBodyBytes, headers['content-length']);
    } catch (error) {
      if (error instanceof BodyTooLargeError) {
        res.setHeader('connection', 'close');
        return rejectWithCredits(new GatewayError('TG_ERR_BODY_TOO_LARGE', `request body larger than ${serverConfig.maxBodyBytes} bytes`));
      }
      if (error instanceof RequestClosedError) {
        // Nothing was executed or charged and no one is left to answer: logged and counted as 499.
        ctx.httpStatus = CLIENT_CLOSED_REQUEST;
        return;
      }
      throw error;
    }

    const parsed = parseBody(body, serverConfig.maxBatchItems);
    if (parsed.kind === 'rejected') return rejectWithCredits(parsed.error);

    // The injected clock, like every deadline check downstream (forwarder, single-flight).
    const deadline = deps.now() + network.config.requestTimeoutMs;
    if (parsed.kind === 'single') {
      // Its own path, without the batch's arrays and closures: every cache hit comes this way.
      const { item } = parsed;
      if (item.kind !== 'invalid') ctx.methods.push(item.method);
      const reply = await executeItem(item, network, auth, ctx, deadline);
      if (reply !== undefined) recordCall(item, reply, network, ctx);
      const credits = creditHeaders(auth, ctx);
      const responseHeaders = credits instanceof Promise ? await credits : credits;
      if (reply === undefined) return send(res, ctx, 204, undefined, responseHeaders); // a notification
      let status = 200;
      if ('error' in reply && reply.gatewayError !== undefined) {
        ctx.errorCode = reply.gatewayError.code;
        status = toHttpStatus(reply.gatewayError);
        responseHeaders.push(...headerList(reply.gatewayError.headers));
      }
      if (ctx.cache !== undefined) responseHeaders.push('x-cache', ctx.cache);
      return send(res, ctx, status, serialiseReply(reply), responseHeaders);
    }

    const { items } = parsed;
    ctx.batchSize = items.length;
    for (const item of items) if (item.kind !== 'invalid') ctx.methods.push(item.method);
    const replies = await Promise.all(items.map((item) => executeItem(item, network, auth, ctx, deadline)));
    const answered: Reply[] = [];
    items.forEach((item, index) => {
      const reply = replies[index];
      if (reply === undefined) return;
      answered.push(reply);
      recordCall(item, reply, network, ctx);
    });
    const credits = creditHeaders(auth, ctx);
    const responseHeaders = credits instanceof Promise ? await credits : credits;
    // Batch responses are 200 whatever their items say (DESIGN §2); notifications only: 204.
    if (answered.length === 0) return send(res, ctx, 204, undefined, responseHeaders);
    send(res, ctx, 200, serialiseBatch(answered), responseHeaders);
  }

  /** The method label (`other` if not offered) and outcome of one answered call, for metrics. */
  function recordCall(item: RequestItem, reply: Reply, network: NetworkRuntime, ctx: RequestContext): void {
    const method = item.kind === 'call' && network.methods.has(item.method) ? item.method : 'other';
    ctx.calls.push({ method, outcome: outcomeOf(reply) });
  }

  function executeItem(
    item: RequestItem,
    network: NetworkRuntime,
    auth: KeyWithTeam,
    ctx: RequestContext,
    deadline: number,
  ): Promise<Reply | undefined> | Reply | undefined {
    switch (item.kind) {
      case 'notification':
        return undefined;
      case 'invalid':
        return errorReply(item.id, item.error);
      case 'call':
        return deps.executor.execute(item, network, auth, ctx, deadline);
    }
  }

  // Request ids: a random per-process prefix and a counter (unique across replicas and restarts,
  // cheaper than a UUID per request). A well-formed incoming X-Request-Id is kept instead.
  const requestIdPrefix = `${randomBytes(6).toString('hex')}-`;
  let requestCounter = 0;

  function finish(req: IncomingMessage, ctx: RequestContext, networks: NetworkSet): void {
    // Building the line costs more than a disabled level check (see docs/benchmarks.md).
    if (logger.isLevelEnabled('info')) {
      logger.info(
        {
          requestId: ctx.requestId,
          path: redactKeyPath(req.url ?? ''),
          network: ctx.networkId,
          teamId: ctx.teamId,
          keyId: ctx.keyId,
          methods: ctx.methods,
          batchSize: ctx.batchSize,
          status: ctx.httpStatus,
          error: ctx.errorCode,
          credits: ctx.creditsCharged,
          cache: ctx.cache,
          upstream: ctx.upstream,
          attempts: ctx.attempts.length > 0 ? ctx.attempts : undefined,
          durationMs: Math.round((performance.now() - ctx.startedAt) * 100) / 100,
        },
        'request',
      );
    }
    deps.onFinished(ctx, networks);
  }

  return (req, res) => {
    // `req.headers` is a getter with a cost: read once, passed along.
    const headers = req.headers;
    const incomingId = headers['x-request-id'];
    const requestId = typeof incomingId === 'string' && REQUEST_ID_HEADER.test(incomingId) ? incomingId : requestIdPrefix + (requestCounter++).toString(36);
    const ctx = createRequestContext(requestId);
    const networks = deps.acquireNetworks();
    handle(req, headers, res, ctx, networks).then(
      () => finish(req, ctx, networks),
      (error: unknown) => {
        if (error instanceof GatewayError) {
          reject(res, ctx, error);
        } else {
          logger.error({ err: error, requestId }, 'request failed unexpectedly');
          if (!res.headersSent) reject(res, ctx, new GatewayError('TG_ERR_INTERNAL'));
          else res.destroy();
        }
        finish(req, ctx, networks);
      },
    );
  };
}
