import { GatewayError, type GatewayErrorCode, type JsonRpcErrorObject } from '../errors.js';
import { alignedChunks, hex, type BlockRange } from './logs-range.js';
import type { Attempt } from './policies/types.js';

/**
 * Answers an `eth_getLogs` range of any width from upstreams that each answer only so much:
 *   aligned chunks (logs-range.ts) → run with bounded concurrency, each on its own through the
 *   injected {@link ChunkRunner} (the cache and the failsafe chain) → a chunk every upstream
 *   declined as too large is bisected, down to one block → the chunks' answers are joined in
 *   block order into one JSON array, as bytes, without parsing the logs.
 * Never a partial answer: the first chunk (in block order) that fails makes the call fail, the
 * chunks not started yet are not started, and the ones under way are waited for (so the count of
 * upstream calls is exact) and dropped.
 */

/** How one chunk went, as the runner reports it. */
export type ChunkOutcome =
  /** `bytes`: the chunk's result JSON as the upstream (or the cache) had it, a JSON array. */
  | { kind: 'logs'; bytes: Buffer; upstream: string | undefined }
  /** Every upstream that answered declined the range as too large: bisect it. */
  | { kind: 'too-large'; attempts: Attempt[] }
  /** An upstream's own JSON-RPC error (not a size refusal): the call's answer. */
  | { kind: 'rpc-error'; error: JsonRpcErrorObject; upstream: string }
  /** Every upstream failed (down, timed out, refused for another reason). */
  | { kind: 'failed'; error: GatewayError; attempts: Attempt[] };

export interface ChunkRun {
  outcome: ChunkOutcome;
  /** Upstream calls the chunk took (0 for a cache hit). */
  upstreamCalls: number;
}

export type ChunkRunner = (range: BlockRange) => Promise<ChunkRun>;

export interface SplitOptions {
  /** Chunk width in blocks (the smallest upstream range); `Infinity` for one chunk. */
  chunkSize: number;
  /** Chunk calls under way at once. */
  concurrency: number;
}

export type SplitResult = (
  | { kind: 'logs'; bytes: Buffer; upstreams: string[] }
  | { kind: 'rpc-error'; error: JsonRpcErrorObject; upstream: string }
  | { kind: 'failed'; error: GatewayError; attempts: Attempt[] }
) & {
  /** Upstream calls of every chunk and bisection together. */
  upstreamCalls: number;
  /** Chunk calls made (bisected halves included). */
  chunkCalls: number;
};

/** Why a chunk ended the call; thrown through the chunk tree to the top. */
class ChunkFailure {
  constructor(readonly result: Exclude<SplitResult, { kind: 'logs' }>) {}
}

export async function splitLogsRange(range: BlockRange, options: SplitOptions, runChunk: ChunkRunner): Promise<SplitResult> {
  let upstreamCalls = 0;
  let chunkCalls = 0;
  let stopped = false;
  const upstreams = new Set<string>();
  const slots = createSlots(Math.max(1, options.concurrency));

  /** The answers of `chunk`, in block order: one, or those of its halves once bisected. */
  async function solve(chunk: BlockRange): Promise<Buffer[]> {
    await slots.take();
    let run: ChunkRun;
    try {
      if (stopped) throw STOPPED;
      chunkCalls += 1;
      run = await runChunk(chunk);
      upstreamCalls += run.upstreamCalls;
      // Known before the slot is given back, so no waiting chunk starts after a failure.
      if (run.outcome.kind === 'rpc-error' || run.outcome.kind === 'failed' || (run.outcome.kind === 'too-large' && chunk.from === chunk.to)) stopped = true;
    } finally {
      slots.give();
    }
    const { outcome } = run;
    switch (outcome.kind) {
      case 'logs':
        if (outcome.upstream !== undefined) upstreams.add(outcome.upstream);
        return [outcome.bytes];
      case 'too-large': {
        if (chunk.from === chunk.to) throw fail(tooLargeError(chunk, outcome.attempts), outcome.attempts);
        const middle = Math.floor((chunk.from + chunk.to) / 2);
        const halves = await settleInOrder([solve({ from: chunk.from, to: middle }), solve({ from: middle + 1, to: chunk.to })]);
        return halves.flat();
      }
      case 'rpc-error':
        throw new ChunkFailure({ kind: 'rpc-error', error: outcome.error, upstream: outcome.upstream, upstreamCalls: 0, chunkCalls: 0 });
      case 'failed':
        throw fail(chunkError(chunk, outcome.error, outcome.attempts), outcome.attempts);
    }
  }

  const fail = (error: GatewayError, attempts: Attempt[]): ChunkFailure => new ChunkFailure({ kind: 'failed', error, attempts, upstreamCalls: 0, chunkCalls: 0 });

  /**
   * Waits for every promise (so no chunk call is still running when the call answers) and
   * returns their values in order, or throws the failure of the first in order that failed.
   */
  async function settleInOrder<T>(promises: Array<Promise<T>>): Promise<T[]> {
    const settled = await Promise.allSettled(promises);
    // A chunk skipped because another failed carries no news: report the failure that caused it.
    const failures = settled.filter((entry): entry is PromiseRejectedResult => entry.status === 'rejected').map((entry) => entry.reason as unknown);
    const cause = failures.find((reason) => reason !== STOPPED) ?? failures[0];
    if (cause !== undefined) throw cause;
    return settled.map((entry) => (entry as PromiseFulfilledResult<T>).value);
  }

  try {
    const parts = (await settleInOrder(alignedChunks(range, options.chunkSize).map(solve))).flat();
    const bytes = joinArrays(parts);
    if (bytes === undefined) {
      const attempts = [{ upstream: [...upstreams].join(','), reason: 'invalid_response', detail: 'a chunk of a split eth_getLogs call is not a JSON array' }];
      return { kind: 'failed', error: new GatewayError('TG_ERR_UPSTREAMS_FAILED', undefined, { attempts }), attempts, upstreamCalls, chunkCalls };
    }
    return { kind: 'logs', bytes, upstreams: [...upstreams], upstreamCalls, chunkCalls };
  } catch (error) {
    if (error instanceof ChunkFailure) return { ...error.result, upstreamCalls, chunkCalls };
    throw error;
  }
}

const STOPPED = Symbol('logs-splitter.stopped');

/** The error of a chunk every upstream failed: the failure's own code (so its HTTP status), naming the blocks. */
function chunkError(chunk: BlockRange, cause: GatewayError, attempts: Attempt[]): GatewayError {
  const code: GatewayErrorCode = cause.code;
  return new GatewayError(code, `${cause.message} for the logs of blocks ${hex(chunk.from)}-${hex(chunk.to)}`, { attempts, fromBlock: hex(chunk.from), toBlock: hex(chunk.to) });
}

function tooLargeError(chunk: BlockRange, attempts: Attempt[]): GatewayError {
  return new GatewayError('TG_ERR_UPSTREAMS_FAILED', `every upstream declined the logs of block ${hex(chunk.from)} as too large`, {
    attempts,
    fromBlock: hex(chunk.from),
    toBlock: hex(chunk.to),
  });
}

const OPEN = 0x5b; // [
const CLOSE = 0x5d; // ]
const COMMA = Buffer.from(',');

function isSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

/**
 * Joins JSON arrays (validated JSON, as upstream results are) into one without parsing them: the
 * elements between each one's brackets, comma-separated. One part is returned as it is; a part
 * that is not an array makes the join fail (undefined).
 */
export function joinArrays(parts: readonly Buffer[]): Buffer | undefined {
  if (parts.length === 1) return parts[0];
  const pieces: Buffer[] = [Buffer.from('[')];
  for (const part of parts) {
    let start = 0;
    let end = part.length - 1;
    while (start <= end && isSpace(part[start]!)) start += 1;
    while (end >= start && isSpace(part[end]!)) end -= 1;
    if (part[start] !== OPEN || part[end] !== CLOSE || start === end) return undefined;
    const inner = part.subarray(start + 1, end);
    if (inner.every(isSpace)) continue;
    if (pieces.length > 1) pieces.push(COMMA);
    pieces.push(inner);
  }
  pieces.push(Buffer.from(']'));
  return Buffer.concat(pieces);
}

/** A counting semaphore: at most `size` chunk calls under way. */
function createSlots(size: number): { take(): Promise<void>; give(): void } {
  let free = size;
  const waiting: Array<() => void> = [];
  return {
    take() {
      if (free > 0) {
        free -= 1;
        return Promise.resolve();
      }
      return new Promise((resolve) => waiting.push(resolve));
    },
    give() {
      const next = waiting.shift();
      if (next !== undefined) next();
      else free += 1;
    },
  };
}
