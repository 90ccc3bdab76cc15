import { ERROR_REGISTRY } from '../errors.js';
import type { Logger } from '../logging/logger.js';
import type { SecretScrubber } from '../logging/redaction.js';
import type { RequestContext } from '../server/context.js';
import { MAX_RECORDED_METHODS, REQUESTS_KEPT_PER_TEAM, type RequestLog, type RequestRecord } from '../store/index.js';

/**
 * The request explorer's writer (docs/explorer.md): what each finished request of a known team
 * did is kept in memory per team and written to the store as {@link RequestRecord}s in one batch
 * every `flushIntervalMs`, never on the request path. The store keeps each team's newest
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
const MAX_QUEUED = 50_000;
/** Error messages are cut to this many characters. */
const MAX_ERROR_MESSAGE = 200;

/**
 * Runs that are params, not prose: hex (addresses, hashes, calldata) and base58 (Solana
 * addresses, signatures) of a length no word has. Upstream error messages quote params often.
 */
const PARAM_SHAPED = /0x[0-9a-fA-F]{8,}|\b[1-9A-HJ-NP-Za-km-z]{32,}\b/g;

/** An error message as the explorer may show it: secrets scrubbed, param-shaped runs cut, bounded. */
function explorerMessage(message: string, scrubber: SecretScrubber): string {
  return scrubber.scrubClientText(message.replace(PARAM_SHAPED, '…'), MAX_ERROR_MESSAGE);
}

/** Requests kept in memory per team between writes: the store shows no more. */
const RING = REQUESTS_KEPT_PER_TEAM;
const CACHE_STATES = [null, 'hit', 'miss', 'bypass'] as const;

/**
 * One team's newest requests since the last write, column by column in a ring: recording a request
 * stores numbers into typed arrays and references to strings that exist anyway (ids, method and
 * network names), so the request path allocates no object per request for the explorer, and the
 * garbage collector has no long-lived per-request objects to promote. Records are built at write
 * time, for the requests still in the ring only.
 */
class TeamRing {
  /** Requests recorded since the last write; `pushed % RING` is the next slot (the oldest once full). */
  pushed = 0;
  readonly at = new Float64Array(RING);
  readonly latencyMs = new Float64Array(RING);
  readonly credits = new Float64Array(RING);
  /** The error's JSON-RPC code, NaN for none. */
  readonly errorCode = new Float64Array(RING);
  /** -1 for none. */
  readonly upstreamCalls = new Int32Array(RING);
  readonly status = new Uint16Array(RING);
  /** Index into {@link CACHE_STATES}. */
  readonly cache = new Uint8Array(RING);
  readonly ws = new Uint8Array(RING);
  readonly requestId: string[] = new Array<string>(RING).fill('');
  readonly keyId: string[] = new Array<string>(RING).fill('');
  readonly network: Array<string | null> = new Array<string | null>(RING).fill(null);
  /** The method; a batch's methods (an array) for a batch. */
  readonly method: Array<string | readonly string[] | null> = new Array<string | readonly string[] | null>(RING).fill(null);
  readonly upstream: Array<string | null> = new Array<string | null>(RING).fill(null);
  /** As received: scrubbed when the record is built. */
  readonly errorMessage: Array<string | null> = new Array<string | null>(RING).fill(null);

  record(ctx: RequestContext, nowMs: number): void {
    const slot = this.pushed % RING;
    this.pushed += 1;
    const latencyMs = Math.round((performance.now() - ctx.startedAt) * 100) / 100;
    this.at[slot] = Math.round(nowMs - latencyMs);
    this.latencyMs[slot] = latencyMs;
    this.credits[slot] = ctx.creditsCharged;
    this.status[slot] = ctx.httpStatus;
    this.cache[slot] = ctx.cache === undefined ? 0 : CACHE_STATES.indexOf(ctx.cache);
    this.ws[slot] = ctx.transport === 'ws' ? 1 : 0;
    this.upstreamCalls[slot] = ctx.upstreamCalls ?? -1;
    this.requestId[slot] = ctx.requestId;
    this.keyId[slot] = ctx.keyId ?? '';
    this.network[slot] = ctx.networkId ?? null;
    this.method[slot] = ctx.batchSize !== undefined ? ctx.methods.slice(0, MAX_RECORDED_METHODS) : (ctx.methods[0] ?? null);
    this.upstream[slot] = ctx.upstream ?? null;
    const error = ctx.firstError;
    if (error !== undefined) {
      this.errorCode[slot] = error.code;
      this.errorMessage[slot] = error.message;
    } else if (ctx.errorCode !== undefined) {
      this.errorCode[slot] = ERROR_REGISTRY[ctx.errorCode].rpcCode;
      this.errorMessage[slot] = ERROR_REGISTRY[ctx.errorCode].message;
    } else {
      this.errorCode[slot] = Number.NaN;
      this.errorMessage[slot] = null;
    }
  }

  /** The ring's requests as records, oldest first, appended to `out`. */
  drainInto(teamId: string, out: RequestRecord[], scrubber: SecretScrubber): void {
    const count = Math.min(this.pushed, RING);
    const start = this.pushed <= RING ? 0 : this.pushed % RING;
    for (let index = 0; index < count; index += 1) {
      const slot = (start + index) % RING;
      const method = this.method[slot]!;
      const errorCode = this.errorCode[slot]!;
      const message = this.errorMessage[slot]!;
      const record: RequestRecord = {
        at: this.at[slot]!,
        requestId: this.requestId[slot]!,
        teamId,
        keyId: this.keyId[slot]!,
        network: this.network[slot]!,
        transport: this.ws[slot] === 1 ? 'ws' : 'http',
        method: typeof method === 'string' || method === null ? method : 'batch',
        status: this.status[slot]!,
        ok: Number.isNaN(errorCode) && this.status[slot]! < 400,
        credits: this.credits[slot]!,
        latencyMs: this.latencyMs[slot]!,
        cache: CACHE_STATES[this.cache[slot]!]!,
        upstream: this.upstream[slot]!,
        upstreamCalls: this.upstreamCalls[slot]! < 0 ? null : this.upstreamCalls[slot]!,
        errorCode: Number.isNaN(errorCode) ? null : errorCode,
        errorMessage: message === null ? null : explorerMessage(message, scrubber),
      };
      if (typeof method !== 'string' && method !== null) record.methods = [...method];
      out.push(record);
    }
  }
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
  let queued = new Map<string, TeamRing>();
  /** Requests held in all rings. */
  let size = 0;
  let writing: Promise<void> = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;

  function write(): Promise<void> {
    if (timer !== undefined) {
      clearTimeout(timer);
      timer = undefined;
    }
    if (size === 0) return writing;
    const batch: RequestRecord[] = [];
    let superseded = 0;
    for (const [teamId, ring] of queued) {
      superseded += Math.max(0, ring.pushed - RING);
      ring.drainInto(teamId, batch, scrubber);
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
      if (ring === undefined) queued.set(teamId, (ring = new TeamRing()));
      if (ring.pushed < RING) size += 1;
      ring.record(ctx, now());
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
