import { Pool } from 'undici';
import type { UpstreamConfig } from '../config/schema.js';
import type { JsonRpcErrorObject } from '../errors.js';
import { scanEnvelope, type MemberSpan } from '../jsonrpc/envelope-scanner.js';

/**
 * One provider endpoint: an undici keep-alive Pool, the gateway's own request ids, and the
 * health this upstream has shown (consecutive failures for its circuit breaker, a latency
 * average for ordering). Every attempt ends in exactly one {@link AttemptOutcome}; nothing throws.
 */

export type AttemptOutcome =
  /**
   * `resultBytes` are the result's JSON exactly as the upstream sent it; `result` is its parsed
   * value, present only when a result check asked to see it.
   */
  | { kind: 'result'; resultBytes: Buffer; result?: unknown; durationMs: number }
  /** The upstream's own JSON-RPC error, passed on to the client (and charged). */
  | { kind: 'rpc-error'; error: JsonRpcErrorObject; durationMs: number }
  | { kind: 'failure'; reason: string; timedOut: boolean; durationMs: number };

/** Upstream JSON-RPC errors that mean "this upstream cannot serve now", not "your request is wrong". */
const FAILOVER_RPC_CODES = new Set([-32603, -32005]);

export interface CircuitBreakerSettings {
  failureThreshold: number;
  cooldownMs: number;
}

export class Upstream {
  readonly id: string;
  private readonly pool: Pool;
  private readonly path: string;
  private readonly headers: Record<string, string>;
  private nextRequestId = 1;
  private consecutiveFailures = 0;
  private openUntil = 0;
  /** Exponentially weighted average of successful attempts' latency; 0 until the first one. */
  latencyMs = 0;
  lastAttemptFailed = false;

  constructor(
    readonly config: UpstreamConfig,
    private readonly breaker: CircuitBreakerSettings,
    private readonly now: () => number = Date.now,
  ) {
    this.id = config.id;
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

  /** False while the circuit is open: enough consecutive failures, cooldown not yet over. */
  isAvailable(): boolean {
    return this.consecutiveFailures < this.breaker.failureThreshold || this.now() >= this.openUntil;
  }

  /**
   * Claims the right to send one attempt now. Always granted while the circuit is closed; once
   * the cooldown of an open circuit is over, granted to a single trial (the circuit stays
   * half-open for another cooldown, so concurrent requests do not pile onto a sick upstream).
   */
  admit(): boolean {
    if (this.consecutiveFailures < this.breaker.failureThreshold) return true;
    if (this.now() < this.openUntil) return false;
    this.openUntil = this.now() + this.breaker.cooldownMs;
    return true;
  }

  /** Healthy in the readiness sense: its circuit is not open. */
  isHealthy(): boolean {
    return this.consecutiveFailures < this.breaker.failureThreshold;
  }

  async call(
    method: string,
    params: unknown,
    timeoutMs: number,
    /** Why a result cannot be used; given only for methods whose results must be inspected. */
    checkResult?: (result: unknown) => string | undefined,
  ): Promise<AttemptOutcome> {
    const started = performance.now();
    const requestId = this.nextRequestId++;
    const body = JSON.stringify(params === undefined ? { jsonrpc: '2.0', id: requestId, method } : { jsonrpc: '2.0', id: requestId, method, params });
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, Math.max(1, timeoutMs));
    let outcome: AttemptOutcome;
    try {
      const response = await this.pool.request({
        method: 'POST',
        path: this.path,
        headers: this.headers,
        body,
        signal: controller.signal,
      });
      const bytes = Buffer.from(await response.body.arrayBuffer());
      const durationMs = performance.now() - started;
      if (response.statusCode < 200 || response.statusCode >= 300) {
        outcome = { kind: 'failure', reason: `http_${response.statusCode}`, timedOut: false, durationMs };
      } else {
        outcome = interpretBody(bytes, requestId, checkResult, durationMs);
      }
    } catch (error) {
      const durationMs = performance.now() - started;
      outcome = timedOut
        ? { kind: 'failure', reason: 'timeout', timedOut: true, durationMs }
        : { kind: 'failure', reason: connectionFailureReason(error), timedOut: false, durationMs };
    } finally {
      clearTimeout(timer);
    }
    this.record(outcome);
    return outcome;
  }

  private record(outcome: AttemptOutcome): void {
    if (outcome.kind === 'failure') {
      this.consecutiveFailures += 1;
      this.lastAttemptFailed = true;
      if (this.consecutiveFailures >= this.breaker.failureThreshold) this.openUntil = this.now() + this.breaker.cooldownMs;
      return;
    }
    this.consecutiveFailures = 0;
    this.lastAttemptFailed = false;
    this.latencyMs = this.latencyMs === 0 ? outcome.durationMs : this.latencyMs * 0.8 + outcome.durationMs * 0.2;
  }

  close(): Promise<void> {
    return this.pool.close();
  }

}

/**
 * Reads the upstream's envelope without parsing its result (which may be megabytes): the id and
 * error are small and parsed; the result is passed on as the bytes the upstream sent, and parsed
 * only when the method's check needs to look at it (block hashes).
 */
function interpretBody(
  bytes: Buffer,
  requestId: number,
  checkResult: ((result: unknown) => string | undefined) | undefined,
  durationMs: number,
): AttemptOutcome {
  const failure = (reason: string): AttemptOutcome => ({ kind: 'failure', reason, timedOut: false, durationMs });
  const spans = scanEnvelope(bytes);
  if (spans === undefined) return failure('invalid_json');
  const member = (span: MemberSpan): unknown => JSON.parse(bytes.toString('utf8', span.start, span.end));
  try {
    if (spans.id === undefined || member(spans.id) !== requestId) return failure('mismatched_id');
    if (spans.error !== undefined && bytes[spans.error.start] !== 0x6e /* null */) {
      const error = member(spans.error) as Partial<JsonRpcErrorObject> | null;
      if (error === null || typeof error !== 'object' || typeof error.code !== 'number' || typeof error.message !== 'string') {
        return failure('invalid_response');
      }
      if (FAILOVER_RPC_CODES.has(error.code)) return failure(`rpc_error_${error.code}`);
      const passed: JsonRpcErrorObject = { code: error.code, message: error.message };
      if (error.data !== undefined) passed.data = error.data;
      return { kind: 'rpc-error', error: passed, durationMs };
    }
    if (spans.result === undefined) return failure('invalid_response');
    const resultBytes = bytes.subarray(spans.result.start, spans.result.end);
    if (checkResult === undefined) {
      // A bare number or literal is tiny: parse it, so that `tru` or `1.2.3` never reaches a client.
      const first = resultBytes[0];
      if (first !== 0x7b && first !== 0x5b && first !== 0x22) member(spans.result);
      return { kind: 'result', resultBytes, durationMs };
    }
    const result = member(spans.result);
    const problem = checkResult(result);
    if (problem !== undefined) return failure(problem.replaceAll(' ', '_'));
    return { kind: 'result', resultBytes, result, durationMs };
  } catch {
    return failure('invalid_json'); // a member that is not valid JSON after all
  }
}

function connectionFailureReason(error: unknown): string {
  const code = (error as { code?: unknown }).code;
  if (code === 'ECONNREFUSED') return 'connection_refused';
  if (code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return 'connection_reset';
  if (typeof code === 'string') return `connection_error_${code}`;
  return 'connection_error';
}
