import type { Socket } from 'node:net';
import type { ServerResponse } from 'node:http';
import type { Attempt } from '../routing/forward.js';
import type { GatewayErrorCode, JsonRpcErrorObject } from '../errors.js';
import type { ChargeSubject } from '../metering/ledger.js';
import { bounded } from '../logging/redaction.js';
import type { RequestLineFields } from '../logging/request-line.js';
import type { RequestFacts, RequestSpan } from '../tracing/tracing.js';

/**
 * Everything one request (an HTTP request or a WebSocket message) went through, filled in stage by stage. The log line, the metrics
 * and the response headers all read this one record, so they cannot disagree.
 */
export interface RequestContext {
  requestId: string;
  /** performance.now() at receive. */
  startedAt: number;
  /** The client's connection: an answer is only charged while it can still be written there. */
  socket: Socket | undefined;
  /**
   * For a request that does not own its connection (a WebSocket message): true once its answer
   * can no longer be sent there (the connection closed or is closing).
   */
  clientLeft: (() => boolean) | undefined;
  /** Set once the response's head is being written (a late client error must not write another). */
  responding: boolean;
  /** Its response: a client error on the connection is answered after it (or through it, for a timeout). */
  response: ServerResponse | undefined;
  networkId?: string;
  teamId?: string;
  keyId?: string;
  methods: string[];
  batchSize?: number;
  httpStatus: number;
  /** Credits charged for this request (all batch items together). */
  creditsCharged: number;
  /** The team's spend today as last seen by this request's ledger operations. */
  teamUsed?: number;
  /** What the response cache did for the call: answered it, missed, or was told not to read (`Cache-Control: no-cache`). */
  cache?: 'hit' | 'miss' | 'bypass';
  /** The client sent `Cache-Control: no-cache`: answers come from an upstream (and refresh the cache). */
  skipCacheRead: boolean;
  upstream?: string;
  /** Upstream calls made for split calls (`eth_getLogs` at a range), all of the request's together. */
  upstreamCalls: number | undefined;
  attempts: Attempt[];
  /** One entry per answered call: its method label (`other` if not offered) and outcome. */
  calls: Array<{ method: string; outcome: string }>;
  /** Credits charged per method, for the credits metric. */
  charges: Array<{ method: string; credits: number }>;
  /** What was charged, to give back should the answer carrying it not be written after all. */
  charged: ChargeSubject[] | undefined;
  /** Calls refused for credits: `daily_credits_exhausted` or `rate_limited`. */
  creditRejections: string[];
  /** The gateway error of a request rejected as a whole (or of a single request's reply). */
  errorCode?: GatewayErrorCode;
  /** The first error reply of its calls (an upstream's or the gateway's), for the request explorer. */
  firstError: JsonRpcErrorObject | undefined;
  /** `http`, or `ws` for a WebSocket message. */
  transport: 'http' | 'ws';
  /** The request's trace span when tracing is on and the request is sampled (tracing/tracing.ts). */
  trace: RequestSpan | undefined;
  /** The request's `Origin` when the answer may be read there (CORS headers on every answer). */
  corsOrigin: string | undefined;
  /** Key-settings rule types that refused the request or its calls, for the metric (made on the first). */
  ruleRejections: string[] | undefined;
}

/**
 * The status logged and counted for a request whose client left before its answer could be
 * written (nginx's 499): mid-body, or while its calls were being answered (they are refunded).
 */
export const CLIENT_CLOSED_REQUEST = 499;

/**
 * True when the response can no longer reach the client: the connection was reset or closed, or
 * the client half-closed it (Node then ends its side too) or sent bytes Node refused (400 and
 * close). A pipelined request's response is not attached to the socket until its turn, so the
 * socket is what is asked, not the response.
 */
export function clientGone(ctx: RequestContext): boolean {
  const socket = ctx.socket;
  if (socket !== undefined) return socket.destroyed || !socket.writable;
  return ctx.clientLeft !== undefined && ctx.clientLeft();
}

export function createRequestContext(requestId: string, socket?: Socket, response?: ServerResponse, clientLeft?: () => boolean): RequestContext {
  // Every field is present from the start, so every context has one hidden class: adding them
  // stage by stage would reshape each object several times per request.
  return {
    requestId,
    startedAt: performance.now(),
    socket,
    clientLeft,
    responding: false,
    response,
    networkId: undefined,
    teamId: undefined,
    keyId: undefined,
    methods: [],
    batchSize: undefined,
    httpStatus: 200,
    creditsCharged: 0,
    teamUsed: undefined,
    cache: undefined,
    skipCacheRead: false,
    upstream: undefined,
    upstreamCalls: undefined,
    attempts: [],
    calls: [],
    charges: [],
    charged: undefined,
    creditRejections: [],
    errorCode: undefined,
    firstError: undefined,
    transport: 'http',
    trace: undefined,
    corsOrigin: undefined,
    ruleRejections: undefined,
  };
}

/** Upstream reasons quote an upstream's words: cut to this in a log line. */
export const MAX_LOGGED_REASON = 64;

/**
 * A request's log line: what happened, in shapes that cannot carry a secret (docs/security.md).
 * Both transports build it here, as one object of one shape (a field a transport lacks is left
 * undefined and not written): HTTP gives the path and user agent, WebSocket its connection.
 */
export function requestLogFields(ctx: RequestContext, path: string | undefined, connectionId: string | undefined, userAgent: string | undefined): RequestLineFields {
  const attempts =
    ctx.attempts.length === 0
      ? undefined
      : ctx.attempts.every((attempt) => attempt.reason.length <= MAX_LOGGED_REASON)
        ? ctx.attempts
        : ctx.attempts.map((attempt) => ({ ...attempt, reason: bounded(attempt.reason, MAX_LOGGED_REASON) }));
  return {
    requestId: ctx.requestId,
    transport: ctx.transport === 'ws' ? 'ws' : undefined,
    connectionId,
    path,
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
    upstreamCalls: ctx.upstreamCalls,
    attempts,
    userAgent,
    durationMs: Math.round((performance.now() - ctx.startedAt) * 100) / 100,
  };
}

/** What a finished request tells its trace span (ids and outcomes only, as its log line). */
export function requestFacts(ctx: RequestContext): RequestFacts {
  return {
    requestId: ctx.requestId,
    transport: ctx.transport,
    network: ctx.networkId,
    methods: ctx.methods,
    batchSize: ctx.batchSize,
    teamId: ctx.teamId,
    keyId: ctx.keyId,
    status: ctx.httpStatus,
    credits: ctx.creditsCharged,
    cache: ctx.cache,
    upstream: ctx.upstream,
    error: ctx.errorCode ?? (ctx.firstError === undefined ? undefined : String(ctx.firstError.code)),
  };
}
