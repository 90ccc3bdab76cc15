import { ERROR_REGISTRY } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import type { SecretScrubber } from '../logging/redaction.js';
import type { RequestContext } from '../server/context.js';
import { MAX_RECORDED_METHODS, REQUESTS_KEPT_PER_TEAM, type RequestLog, type RequestRecord } from '../store/index.js';

/**
 * The request explorer's writer (docs/explorer.md): each finished request of a known team becomes
 * a {@link RequestRecord}, queued in memory per team and written to the store in one batch every
 * `flushIntervalMs`, never on the request path. The store keeps each team's newest
 * {@link REQUESTS_KEPT_PER_TEAM}, so a team's queue keeps no more than those either: a record
 * pushed out of it could never have been shown. A batch is therefore at most that many records per
 * team, however busy the team is, and the store's work per second stays bounded as traffic grows.
 * A store that cannot keep up loses the oldest queued records beyond {@link MAX_QUEUED} (many
 * teams at once), counted, rather than holding memory or slowing requests.
 */

export interface RequestExplorer {
  /** Queues a finished request (nothing for requests of no known team, or CORS preflights). */
  record(ctx: RequestContext): void;
  /** Writes what is queued now. */
  flush(): Promise<void>;
  /** Writes what is queued and stops the timer. */
  close(): Promise<void>;
}

export interface ExplorerObserver {
  /** One store write of `records` records. */
  flushed?(records: number): void;
  /** Records dropped: the queue was full, or the write failed. */
  dropped?(records: number): void;
  /** Records left out of a batch because newer ones of the same team filled its share. */
  superseded?(records: number): void;
}

/** Queued records beyond which the oldest are dropped. */
export const MAX_QUEUED = 50_000;
/** Error messages are cut to this many characters. */
export const MAX_ERROR_MESSAGE = 200;

/**
 * Runs that are params, not prose: hex (addresses, hashes, calldata) and base58 (Solana
 * addresses, signatures) of a length no word has. Upstream error messages quote params often.
 */
const PARAM_SHAPED = /0x[0-9a-fA-F]{8,}|\b[1-9A-HJ-NP-Za-km-z]{32,}\b/g;

/** An error message as the explorer may show it: secrets scrubbed, param-shaped runs cut, bounded. */
export function explorerMessage(message: string, scrubber: SecretScrubber): string {
  return scrubber.scrubClientText(message.replace(PARAM_SHAPED, '…'), MAX_ERROR_MESSAGE);
}

export function createRequestExplorer(options: {
  store: RequestLog;
  now: () => number;
  scrubber: SecretScrubber;
  logger: Logger;
  flushIntervalMs: number;
  observe?: ExplorerObserver;
}): RequestExplorer {
  const { store, now, scrubber, logger, observe } = options;
  /** Per team, oldest first; trimmed to the newest kept when it grows to twice that (amortised). */
  let queued = new Map<string, RequestRecord[]>();
  let size = 0;
  let writing: Promise<void> = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;

  function recordOf(ctx: RequestContext): RequestRecord {
    const latencyMs = Math.round((performance.now() - ctx.startedAt) * 100) / 100;
    const error = ctx.firstError ?? (ctx.errorCode === undefined ? undefined : { code: ERROR_REGISTRY[ctx.errorCode].rpcCode, message: ERROR_REGISTRY[ctx.errorCode].message });
    const batch = ctx.batchSize !== undefined;
    const record: RequestRecord = {
      at: Math.round(now() - latencyMs),
      requestId: ctx.requestId,
      teamId: ctx.teamId!,
      keyId: ctx.keyId ?? '',
      network: ctx.networkId ?? null,
      transport: ctx.transport,
      method: batch ? 'batch' : (ctx.methods[0] ?? null),
      status: ctx.httpStatus,
      ok: error === undefined && ctx.httpStatus < 400,
      credits: ctx.creditsCharged,
      latencyMs,
      cache: ctx.cache ?? null,
      upstream: ctx.upstream ?? null,
      upstreamCalls: ctx.upstreamCalls ?? null,
      errorCode: error?.code ?? null,
      errorMessage: error === undefined ? null : explorerMessage(error.message, scrubber),
    };
    if (batch) record.methods = ctx.methods.slice(0, MAX_RECORDED_METHODS);
    return record;
  }

  function write(): Promise<void> {
    if (timer !== undefined) {
      clearTimeout(timer);
      timer = undefined;
    }
    if (size === 0) return writing;
    const batch: RequestRecord[] = [];
    let superseded = 0;
    for (const records of queued.values()) {
      superseded += Math.max(0, records.length - REQUESTS_KEPT_PER_TEAM);
      for (let index = Math.max(0, records.length - REQUESTS_KEPT_PER_TEAM); index < records.length; index += 1) batch.push(records[index]!);
    }
    queued = new Map();
    size = 0;
    if (superseded > 0) observe?.superseded?.(superseded);
    // One write at a time, in order: a later batch never lands before an earlier one.
    writing = writing.then(() =>
      store.appendRequests(batch).then(
        () => observe?.flushed?.(batch.length),
        (error: unknown) => {
          observe?.dropped?.(batch.length);
          logger.warn({ err: error, records: batch.length }, 'request explorer records could not be written');
        },
      ),
    );
    return writing;
  }

  /** Drops the oldest queued records of the largest team queues until the total is within {@link MAX_QUEUED}. */
  function shed(): void {
    let dropped = 0;
    for (const records of [...queued.values()].sort((a, b) => b.length - a.length)) {
      const excess = Math.min(records.length, size - MAX_QUEUED);
      if (excess <= 0) break;
      records.splice(0, excess);
      size -= excess;
      dropped += excess;
    }
    observe?.dropped?.(dropped);
  }

  return {
    record(ctx) {
      // Preflights have no method and no error; requests of no known key have no team.
      const teamId = ctx.teamId;
      if (teamId === undefined || (ctx.methods.length === 0 && ctx.errorCode === undefined)) return;
      let records = queued.get(teamId);
      if (records === undefined) queued.set(teamId, (records = []));
      records.push(recordOf(ctx));
      size += 1;
      if (records.length >= 2 * REQUESTS_KEPT_PER_TEAM) {
        const superseded = records.length - REQUESTS_KEPT_PER_TEAM;
        records.splice(0, superseded);
        size -= superseded;
        observe?.superseded?.(superseded);
      }
      if (size > MAX_QUEUED) shed();
      if (timer === undefined) {
        timer = setTimeout(() => void write(), options.flushIntervalMs);
        timer.unref();
      }
    },
    flush: write,
    close: write,
  };
}
