import type { Logger } from '../logging/logger.js';
import type { AlertStore, WebhookDelivery } from '../store/index.js';
import { SIGNATURE_HEADER, signatureHeader } from './webhook-signature.js';

/**
 * Delivers webhook events: a signed JSON POST, retried with exponential backoff on a non-2xx
 * answer, a timeout or a connection error, for at most `maxAttempts` attempts. Every attempt is
 * written to the store's delivery log and counted (`onAttempt`, the metrics). Deliveries run in
 * the background; `close` stops waiting between retries and lets attempts in flight finish.
 * The wait is injected (`sleep`), so tests retry without sleeping for real.
 */

export interface WebhookEvent {
  id: string;
  type: string;
  team: string;
  [field: string]: unknown;
}

export interface WebhookTarget {
  url: string;
  secret: string;
}

export interface WebhookSenderOptions {
  store: Pick<AlertStore, 'recordDelivery'>;
  timeoutMs: number;
  maxAttempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
  now?: () => number;
  /** Waits `ms` before a retry; resolves early (and the retry is skipped) when `signal` aborts. */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
  onAttempt?: (type: string, outcome: WebhookDelivery['outcome']) => void;
  logger?: Logger;
}

export interface WebhookSender {
  /** Starts delivering; the promise resolves true once delivered, false after the last failed attempt. */
  deliver(event: WebhookEvent, target: WebhookTarget): Promise<boolean>;
  /** Resolves when every delivery started so far has ended. */
  idle(): Promise<void>;
  close(): Promise<void>;
}

function realSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    timer.unref();
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

/** The wait before attempt `attempt + 1`: initial × 2^(attempt − 1), capped. */
export function backoffMs(attempt: number, initialMs: number, maxMs: number): number {
  return Math.min(maxMs, initialMs * 2 ** (attempt - 1));
}

export function createWebhookSender(options: WebhookSenderOptions): WebhookSender {
  const now = options.now ?? Date.now;
  const sleep = options.sleep ?? realSleep;
  const closing = new AbortController();
  const running = new Set<Promise<boolean>>();

  async function attempt(event: WebhookEvent, target: WebhookTarget, body: string, n: number): Promise<WebhookDelivery> {
    const startedAt = now();
    const started = performance.now();
    const timeout = AbortSignal.timeout(options.timeoutMs);
    let status: number | null = null;
    let outcome: WebhookDelivery['outcome'];
    try {
      const response = await fetch(target.url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'user-agent': 'Tollgate-Webhooks/1',
          'tollgate-event-id': event.id,
          'tollgate-delivery-attempt': String(n),
          [SIGNATURE_HEADER]: signatureHeader(target.secret, Math.floor(now() / 1000), body),
        },
        body,
        signal: timeout,
        redirect: 'manual',
      });
      status = response.status;
      // The body is not read beyond what is needed to free the connection.
      await response.body?.cancel().catch(() => undefined);
      outcome = status >= 200 && status < 300 ? 'delivered' : 'failed';
    } catch {
      outcome = timeout.aborted ? 'timeout' : 'error';
    }
    return { eventId: event.id, type: event.type, teamId: event.team, attempt: n, at: startedAt, status, outcome, durationMs: Math.round(performance.now() - started) };
  }

  async function run(event: WebhookEvent, target: WebhookTarget): Promise<boolean> {
    const body = JSON.stringify(event);
    for (let n = 1; n <= options.maxAttempts; n += 1) {
      const delivery = await attempt(event, target, body, n);
      options.onAttempt?.(event.type, delivery.outcome);
      await options.store.recordDelivery(delivery).catch((error: unknown) => options.logger?.warn({ err: error }, 'could not record a webhook delivery attempt'));
      if (delivery.outcome === 'delivered') return true;
      options.logger?.warn({ event: event.id, type: event.type, team: event.team, attempt: n, status: delivery.status, outcome: delivery.outcome }, 'webhook delivery failed');
      if (n === options.maxAttempts || closing.signal.aborted) break;
      await sleep(backoffMs(n, options.initialBackoffMs, options.maxBackoffMs), closing.signal);
      if (closing.signal.aborted) break;
    }
    return false;
  }

  return {
    deliver(event, target) {
      const delivery = run(event, target);
      running.add(delivery);
      void delivery.finally(() => running.delete(delivery));
      return delivery;
    },
    async idle() {
      while (running.size > 0) await Promise.allSettled([...running]);
    },
    async close() {
      closing.abort();
      await Promise.allSettled([...running]);
    },
  };
}
