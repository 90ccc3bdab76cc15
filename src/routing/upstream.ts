import { Pool } from 'undici';
import type { UpstreamConfig } from '../config/schema.js';
import type { JsonRpcErrorObject } from '../errors.js';
import { AnswerCollector, answerBuffers } from '../jsonrpc/answer-buffers.js';
import { readEnvelope } from '../jsonrpc/envelope-scanner.js';
import { contiguous, type ResultBytes } from '../jsonrpc/result-bytes.js';
import type { CallSignal } from './abort-signals.js';
import { exchange } from './upstream-exchange.js';
import { UpstreamHealth, type CircuitBreakerSettings } from './upstream-health.js';

/**
 * One provider endpoint: an undici keep-alive Pool, the gateway's own request ids, and the
 * {@link UpstreamHealth} the routing layer keeps for it. `send` makes exactly one HTTP attempt and
 * always resolves with one {@link AttemptOutcome}; deadlines, retries, hedging and the circuit
 * breaker are policies around it (see policies/).
 */

export type AttemptOutcome =
  /**
   * `resultBytes` are the result's JSON exactly as the upstream sent it (validated, never
   * re-serialised); `result` is its parsed value, present only when the caller asked to inspect it.
   */
  | { kind: 'result'; resultBytes: ResultBytes; result?: unknown; durationMs: number }
  /** The upstream's own JSON-RPC error, passed on to the client (and charged). */
  | { kind: 'rpc-error'; error: JsonRpcErrorObject; durationMs: number }
  /**
   * `detail` says more than the reason where there is more to say (which check a block failed);
   * `rpcError` is the upstream's own error behind an `rpc_error_*` failure, for policies that read it.
   */
  | { kind: 'failure'; reason: string; detail?: string; rpcError?: JsonRpcErrorObject; timedOut: boolean; durationMs: number };

/** What the routing policies need to know of an upstream (an interface, so they test alone). */
export interface RoutedUpstream {
  readonly id: string;
  readonly health: UpstreamHealth;
  /** Deadline of one attempt, bounded by what is left of the request's deadline. */
  readonly timeoutMs: number;
  /** Share of traffic under `selection: weighted`. */
  readonly weight: number;
}

/** Upstream JSON-RPC errors that mean "this upstream cannot serve now", not "your request is wrong". */
const FAILOVER_RPC_CODES = new Set([-32603, -32005]);

/**
 * The name an upstream's shared state goes by in the store (its rate-limit window, its quota
 * total): `<network>/<upstream>`, unique across networks.
 */
export function upstreamScope(networkId: string, upstreamId: string): string {
  return `${networkId}/${upstreamId}`;
}

/** Reason of an answer that says the provider is rate limiting us (HTTP 429, or one of its JSON-RPC wordings). */
export const RATE_LIMITED = 'rate_limited';

/**
 * How providers word "slow down" in a JSON-RPC error (Alchemy "exceeded its compute units per
 * second capacity", Infura "project ID request rate exceeded" / "daily request count exceeded",
 * QuickNode -32007 "request limit reached", the generic "rate limit", "too many requests"). Such
 * an answer fails over (the client never sees the provider's 429) and cuts that upstream's budget.
 */
const RATE_LIMIT_WORDING = /rate.?limit|too many requests|request rate exceeded|request limit reached|exceeded its .*capacity|daily request count exceeded/i;

function isRateLimitError(error: JsonRpcErrorObject): boolean {
  return error.code === 429 || RATE_LIMIT_WORDING.test(error.message);
}

export class Upstream implements RoutedUpstream {
  readonly id: string;
  readonly health: UpstreamHealth;
  readonly timeoutMs: number;
  readonly weight: number;
  private readonly pool: Pool;
  private readonly path: string;
  private readonly headers: Record<string, string>;
  private nextRequestId = 1;

  constructor(
    readonly config: UpstreamConfig,
    breaker: CircuitBreakerSettings,
    now: () => number,
  ) {
    this.id = config.id;
    this.timeoutMs = config.timeoutMs;
    this.weight = config.weight;
    this.health = new UpstreamHealth(breaker, now);
    const url = new URL(config.url);
    this.path = `${url.pathname}${url.search}`;
    this.headers = { 'content-type': 'application/json', ...config.headers };
    // Credentials in the URL become a Basic header: undici does not send userinfo itself.
    if (url.username !== '' || url.password !== '') {
      const credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
      this.headers.authorization ??= `Basic ${Buffer.from(credentials).toString('base64')}`;
    }
    this.pool = new Pool(url.origin, {
      connections: config.connections,
      keepAliveTimeout: 30_000,
      keepAliveMaxTimeout: 600_000,
    });
  }

  /**
   * One JSON-RPC call. Aborting `signal` ends it with a failure (reason `cancelled`, or whatever
   * the aborting policy says). `parseResult` asks for the parsed result beside its bytes;
   * `extraHeaders` go with this request only (a trace's `traceparent`).
   */
  async send(method: string, params: unknown, signal: CallSignal, parseResult: boolean, extraHeaders?: Readonly<Record<string, string>>): Promise<AttemptOutcome> {
    const started = performance.now();
    const requestId = this.nextRequestId++;
    const body = JSON.stringify(params === undefined ? { jsonrpc: '2.0', id: requestId, method } : { jsonrpc: '2.0', id: requestId, method, params });
    let answer: AnswerCollector | undefined;
    try {
      const headers = extraHeaders === undefined ? this.headers : { ...this.headers, ...extraHeaders };
      // A small answer stays in the chunks undici delivers (the validator copies them into its own
      // memory, so concatenating them first would be a copy for nothing); a large one is collected
      // in a pooled buffer as it arrives (jsonrpc/answer-buffers.ts says why).
      const response = await exchange(this.pool, { method: 'POST', path: this.path, headers, body }, signal, collectAnswer);
      answer = response.answer;
      const durationMs = performance.now() - started;
      if (response.status < 200 || response.status >= 300) {
        return { kind: 'failure', reason: `http_${response.status}`, timedOut: false, durationMs };
      }
      let outcome: AttemptOutcome;
      try {
        outcome = interpretBody(answer.parts(), answer.length, requestId, parseResult, durationMs);
      } catch {
        // The scan validated the bytes; JSON.parse can still give up on nesting deeper than its stack.
        return { kind: 'failure', reason: 'bad_json', timedOut: false, durationMs };
      }
      if (outcome.kind === 'result') answer.handOver(outcome.resultBytes);
      return outcome;
    } catch (error) {
      const durationMs = performance.now() - started;
      if (signal.aborted) return { kind: 'failure', reason: 'cancelled', timedOut: false, durationMs };
      return { kind: 'failure', reason: connectionFailureReason(error), timedOut: false, durationMs };
    } finally {
      // Unless handed over with the result: nothing made from the answer refers to its buffer.
      answer?.discard();
    }
  }

  close(): Promise<void> {
    return this.pool.close();
  }
}

const collectAnswer = (announcedLength: number | undefined): AnswerCollector => new AnswerCollector(answerBuffers, announcedLength);

/**
 * Reads the upstream's envelope without building its result (which may be megabytes): the scan
 * validates every byte as JSON and finds the members; the id and error are small and parsed; the
 * result is passed on as the bytes the upstream sent, and parsed only when asked for.
 */
function interpretBody(chunks: readonly Buffer[], length: number, requestId: number, parseResult: boolean, durationMs: number): AttemptOutcome {
  const failure = (reason: string): AttemptOutcome => ({ kind: 'failure', reason, timedOut: false, durationMs });
  const members = readEnvelope(chunks, length);
  if (members === undefined) return failure('bad_json');
  const parse = (bytes: Buffer): unknown => JSON.parse(bytes.toString('utf8'));
  if (members.id === undefined || parse(members.id) !== requestId) return failure('mismatched_id');
  if (members.error !== undefined && members.error[0] !== 0x6e /* null */) {
    const error = parse(members.error) as Partial<JsonRpcErrorObject> | null;
    if (error === null || typeof error !== 'object' || typeof error.code !== 'number' || typeof error.message !== 'string') {
      return failure('invalid_response');
    }
    const passed: JsonRpcErrorObject = { code: error.code, message: error.message };
    if (error.data !== undefined) passed.data = error.data;
    if (isRateLimitError(passed)) return { kind: 'failure', reason: RATE_LIMITED, rpcError: passed, timedOut: false, durationMs };
    if (FAILOVER_RPC_CODES.has(error.code)) return { kind: 'failure', reason: `rpc_error_${error.code}`, rpcError: passed, timedOut: false, durationMs };
    return { kind: 'rpc-error', error: passed, durationMs };
  }
  const resultBytes = members.result;
  if (resultBytes === undefined) return failure('invalid_response');
  if (!parseResult) return { kind: 'result', resultBytes, durationMs };
  return { kind: 'result', resultBytes, result: parse(contiguous(resultBytes)), durationMs };
}

function connectionFailureReason(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  if (code === 'ECONNREFUSED') return 'connection_refused';
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return 'connection_reset';
  if (typeof code === 'string') return `connection_error_${code}`;
  return 'connection_error';
}
