import { backgroundClock, type Clock } from '../routing/clock.js';
import { collectFreedMemory } from '../startup/heap-collection.js';
import type { ResultBytes } from './result-bytes.js';

/**
 * Large upstream answers are collected in buffers that are used again, not in the buffers the
 * socket read them into.
 *
 * Why: an answer must arrive whole before it is validated and passed on, and under load that takes
 * long enough (tens to hundreds of milliseconds) for its chunks to outlive a young-generation
 * collection. V8 then counts their memory against the old generation, which it soon collects in
 * full. With 1.6 MiB `getAssetsByGroup` pages this was a full collection every 35–40 answers,
 * about a fifth of the gateway's CPU per page (docs/benchmarks.md, "Answer buffers"). Copied into a
 * buffer from this pool as they arrive, the chunks die young, and the pooled buffers, allocated
 * once, add nothing to collect.
 *
 * The pool is per thread. A buffer is taken by an upstream call ({@link AnswerCollector}); if the
 * answer's result is written to a client from it, the buffer is lent with the result
 * ({@link lend}) and comes back once the reply's write has completed ({@link returnLent}). Any
 * other consumer (a batch, a WebSocket, a cache) copies the bytes or never returns them: a
 * buffer not returned is simply collected, so the pool can lose buffers but never hands out one
 * still in use. Bytes shared between callers (a coalesced call) are never returned
 * ({@link markShared}).
 *
 * Idle buffers are kept only while large answers keep coming: {@link POOL_IDLE_RELEASE_MS} after
 * the last one was taken they are dropped, and the pool asks for a full collection
 * (src/startup/heap-collection.ts). Without that, a gateway serving small requests after a burst
 * kept the burst's 64 MiB of idle buffers, and the dead chunks beside them, for as long as it
 * ran: about 95 MiB of buffers in the bench's diagnostic (docs/benchmarks.md, "Giving back a
 * burst's memory").
 */

/**
 * The smallest buffer the pool hands out: answers below it are kept in their chunks. A 167 KiB page
 * arrives fast enough for its chunks to die young anyway, and copying it into a pooled buffer cost
 * about 5% more CPU per request; a 1.6 MiB page's copy saved a fifth.
 */
export const POOLED_MIN_BYTES = 1024 * 1024;
/** Answers that need more than this are collected in buffers of their own, never kept. */
export const POOLED_MAX_BYTES = 32 * 1024 * 1024;
/** At most this many bytes of idle buffers are kept per thread; more are left to the collector. */
export const POOL_RETAINED_BYTES = 64 * 1024 * 1024;
/**
 * After this long without an answer large enough for the pool, its idle buffers are dropped: a
 * burst of large answers leaves the gateway's memory where it was before the burst, not at the
 * burst's high-water mark.
 */
export const POOL_IDLE_RELEASE_MS = 5_000;

/** The size class of a buffer holding `length` bytes: the next power of two, at least {@link POOLED_MIN_BYTES}. */
function sizeClass(length: number): number {
  let size = POOLED_MIN_BYTES;
  while (size < length) size *= 2;
  return size;
}

export interface AnswerBufferStats {
  /** Buffers allocated because none of the size was idle. */
  allocated: number;
  /** Buffers handed out again after they came back. */
  reused: number;
  /** Idle bytes kept now. */
  retainedBytes: number;
  /** Idle bytes dropped after a quiet period, in all. */
  releasedBytes: number;
}

/** When and how a pool lets its idle buffers go. */
export interface IdleRelease {
  /** Milliseconds without a {@link AnswerBufferPool.take} after which idle buffers are dropped. */
  afterMs: number;
  /** Called with the bytes dropped, once they are: where the process can, it asks for them to be freed. */
  onRelease?: (droppedBytes: number) => void;
  /** Injected by tests; by default real time, with a timer that does not keep the process alive. */
  clock?: Clock;
}

export class AnswerBufferPool {
  private readonly idle = new Map<number, Buffer[]>();
  private readonly stats: AnswerBufferStats = { allocated: 0, reused: 0, retainedBytes: 0, releasedBytes: 0 };
  private lastTakenAt = 0;
  private releaseArmed = false;

  constructor(
    private readonly maxRetainedBytes: number = POOL_RETAINED_BYTES,
    private readonly release?: IdleRelease,
  ) {}

  /** A buffer of at least `length` bytes (its content is whatever it held before). */
  take(length: number): Buffer {
    if (this.release !== undefined) this.lastTakenAt = (this.release.clock ?? backgroundClock).now();
    const size = sizeClass(length);
    const buffer = this.idle.get(size)?.pop();
    if (buffer !== undefined) {
      this.stats.reused += 1;
      this.stats.retainedBytes -= size;
      return buffer;
    }
    this.stats.allocated += 1;
    // Memory of its own, never a slice of Node's shared pool of small buffers.
    return Buffer.allocUnsafeSlow(size);
  }

  /** Keeps `buffer` for a later {@link take}, if it is one of the pool's sizes and there is room. */
  giveBack(buffer: Buffer): void {
    const size = buffer.length;
    if (size > POOLED_MAX_BYTES || size !== sizeClass(size) || buffer.byteOffset !== 0) return;
    if (this.stats.retainedBytes + size > this.maxRetainedBytes) return;
    let list = this.idle.get(size);
    if (list === undefined) this.idle.set(size, (list = []));
    list.push(buffer);
    this.stats.retainedBytes += size;
    this.armRelease();
  }

  /** Drops every idle buffer (the collector frees them); returns the bytes dropped. */
  releaseIdle(): number {
    const dropped = this.stats.retainedBytes;
    this.idle.clear();
    this.stats.retainedBytes = 0;
    this.stats.releasedBytes += dropped;
    return dropped;
  }

  /**
   * One timer at most, armed while buffers are idle. When it fires it checks how long ago a buffer
   * was last taken, and waits out the rest of the quiet period if one was taken since: a steady
   * stream of large answers costs no timer per answer.
   */
  private armRelease(): void {
    const release = this.release;
    if (release === undefined || this.releaseArmed) return;
    this.releaseArmed = true;
    const clock = release.clock ?? backgroundClock;
    const check = (): void => {
      if (this.stats.retainedBytes === 0) {
        this.releaseArmed = false;
        return;
      }
      const quietFor = clock.now() - this.lastTakenAt;
      if (quietFor < release.afterMs) {
        clock.setTimer(release.afterMs - quietFor, check);
        return;
      }
      this.releaseArmed = false;
      release.onRelease?.(this.releaseIdle());
    };
    clock.setTimer(release.afterMs, check);
  }

  snapshot(): AnswerBufferStats {
    return { ...this.stats };
  }
}

/** This thread's pool: its idle buffers dropped after a quiet period, then their memory freed. */
export const answerBuffers = new AnswerBufferPool(POOL_RETAINED_BYTES, { afterMs: POOL_IDLE_RELEASE_MS, onRelease: () => collectFreedMemory() });

/**
 * One upstream answer's bytes as they arrive: in the socket's chunks while small, in a pooled
 * buffer once the answer is (or is announced as) {@link POOLED_MIN_BYTES} or more.
 */
export class AnswerCollector {
  private readonly chunks: Buffer[] = [];
  private buffer: Buffer | undefined;
  length = 0;

  /** `expectedLength`: the answer's `Content-Length`, when it sent one. */
  constructor(
    private readonly pool: AnswerBufferPool,
    expectedLength?: number,
  ) {
    if (expectedLength !== undefined && expectedLength >= POOLED_MIN_BYTES && expectedLength <= POOLED_MAX_BYTES) this.buffer = pool.take(expectedLength);
  }

  add(chunk: Buffer): void {
    const length = this.length + chunk.length;
    if (this.buffer === undefined) {
      this.chunks.push(chunk);
      this.length = length;
      if (length >= POOLED_MIN_BYTES && length <= POOLED_MAX_BYTES) this.moveTo(this.pool.take(2 * length));
      return;
    }
    if (length > this.buffer.length) this.grow(length);
    chunk.copy(this.buffer, this.length);
    this.length = length;
  }

  /** The answer's bytes, in order. */
  parts(): Buffer[] {
    return this.buffer === undefined ? this.chunks : [this.buffer.subarray(0, this.length)];
  }

  /** The pooled buffer holding the answer, if it is in one. */
  get pooled(): Buffer | undefined {
    return this.buffer;
  }

  /**
   * The answer's result is `result`: when it is a view into the pooled buffer, the buffer goes with
   * it (lent when in parts, which a reply writes and gives back; left to the collector when in one
   * piece, the JavaScript scan's way, which a cache may keep as it is), and {@link discard} no
   * longer gives it back.
   */
  handOver(result: ResultBytes): void {
    const buffer = this.buffer;
    const first = Buffer.isBuffer(result) ? result : result[0];
    if (buffer === undefined || first === undefined || first.buffer !== buffer.buffer) return;
    if (!Buffer.isBuffer(result)) lend(result, buffer, this.pool);
    this.buffer = undefined;
  }

  /** Gives the pooled buffer back: only when nothing made from the answer refers to it. */
  discard(): void {
    if (this.buffer !== undefined) this.pool.giveBack(this.buffer);
    this.buffer = undefined;
  }

  private grow(length: number): void {
    const old = this.buffer!;
    // Past the largest pooled size (an upstream that announced less than it sent, or a huge
    // answer): a buffer of its own, twice the need, which giveBack will not keep.
    const bigger = length <= POOLED_MAX_BYTES ? this.pool.take(2 * length) : Buffer.allocUnsafeSlow(2 * length);
    old.copy(bigger, 0, 0, this.length);
    this.buffer = bigger;
    this.pool.giveBack(old);
  }

  private moveTo(buffer: Buffer): void {
    let offset = 0;
    for (const chunk of this.chunks) offset += chunk.copy(buffer, offset);
    this.chunks.length = 0;
    this.buffer = buffer;
  }
}

interface Lease {
  buffer: Buffer;
  pool: AnswerBufferPool;
  shared: boolean;
  returned: boolean;
}

/** Results written from a pooled buffer, by the parts array that carries them. */
const leases = new WeakMap<object, Lease>();

/** `result` (parts of `buffer`) goes to a client: the buffer comes back through {@link returnLent}. */
export function lend(result: readonly Buffer[], buffer: Buffer, pool: AnswerBufferPool): void {
  leases.set(result, { buffer, pool, shared: false, returned: false });
}

/** The lease of `bytes`, when they are parts lent with a pooled buffer. */
function leaseOf(bytes: ResultBytes | string | undefined): Lease | undefined {
  return bytes === undefined || typeof bytes === 'string' || Buffer.isBuffer(bytes) ? undefined : leases.get(bytes);
}

/** `bytes` go to more than one consumer: their buffer is never given back. */
export function markShared(bytes: ResultBytes | string | undefined): void {
  const lease = leaseOf(bytes);
  if (lease !== undefined) lease.shared = true;
}

/**
 * The one writer of `bytes` is done with them (its write completed, or its client left). The
 * buffer is given back on the next turn of the event loop, after every caller that shares them
 * has had the chance to say so ({@link markShared} runs where a shared outcome is handed out, in
 * the same turn the outcome arrives).
 */
export function returnLent(bytes: ResultBytes | string | undefined): void {
  const lease = leaseOf(bytes);
  // Kept in the map (it goes with the parts array): a caller that shares the bytes may still mark it.
  if (lease === undefined || lease.returned) return;
  lease.returned = true;
  setImmediate(() => {
    if (!lease.shared) lease.pool.giveBack(lease.buffer);
  });
}
