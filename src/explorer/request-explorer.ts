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
 * Memory is bounded too: {@link REQUESTS_KEPT_PER_TEAM} records per team seen since the last
 * write, and a write starts early when all teams together reach {@link MAX_QUEUED}. A batch the
 * store refuses is dropped and counted: the explorer is a recent view, not the ledger.
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
  /** Records dropped: the store refused their write. */
  dropped?(records: number): void;
  /** Records left out of a batch because newer ones of the same team filled its share. */
  superseded?(records: number): void;
}

/** Queued records (all teams) at which a write starts at once rather than at the interval. */
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

/** Records kept in memory per team between writes: the store shows no more. */
const RING = REQUESTS_KEPT_PER_TEAM;

interface TeamRing {
  /** Up to {@link RING} records; once full, `pushed % RING` is the oldest. */
  records: RequestRecord[];
  /** Records pushed since the last write. */
  pushed: number;
}

/** A ring's records, oldest first, appended to `out`. */
function ringInto(ring: TeamRing, out: RequestRecord[]): void {
  const { records } = ring;
  const start = ring.pushed <= RING ? 0 : ring.pushed % RING;
  for (let index = 0; index < records.length; index += 1) out.push(records[(start + index) % records.length]!);
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
  /** Per team, a ring of its newest records: a record pushed out could never have been shown. */
  let queued = new Map<string, TeamRing>();
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
    for (const ring of queued.values()) {
      superseded += ring.pushed - Math.min(ring.pushed, RING);
      ringInto(ring, batch);
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

  return {
    record(ctx) {
      // Preflights have no method and no error; requests of no known key have no team.
      const teamId = ctx.teamId;
      if (teamId === undefined || (ctx.methods.length === 0 && ctx.errorCode === undefined)) return;
      let ring = queued.get(teamId);
      if (ring === undefined) queued.set(teamId, (ring = { records: [], pushed: 0 }));
      const slot = ring.pushed % RING;
      // Overwriting the oldest in place: no array is shifted on the request path.
      if (slot === ring.records.length) ring.records.push(recordOf(ctx));
      else ring.records[slot] = recordOf(ctx);
      ring.pushed += 1;
      if (ring.pushed <= RING) size += 1;
      // Many busy teams at once: write now rather than hold more.
      if (size >= MAX_QUEUED) void write();
      if (timer === undefined) {
        timer = setTimeout(() => void write(), options.flushIntervalMs);
        timer.unref();
      }
    },
    flush: write,
    close: write,
  };
}
