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
 * An idle buffer is kept only while it is needed: one that has sat idle for
 * {@link POOL_IDLE_RELEASE_MS} is dropped, so the pool holds what the large answers of the last
 * few seconds used at once, and no more. When no large answer has come for that long, the last
 * ones go and the pool asks for a full collection (src/startup/heap-collection.ts). Without that,
 * a gateway serving small requests after a burst kept the burst's idle buffers, and the dead
 * chunks beside them, for as long as it ran: about 95 MiB of buffers in the bench's diagnostic
 * (docs/benchmarks.md, "Giving back a burst's memory").
 */

/**
 * The smallest buffer the pool hands out: answers below it are kept in their chunks. A 167 KiB page
 * arrives fast enough for its chunks to die young anyway, and copying it into a pooled buffer cost
 * about 5% more CPU per request; a 1.6 MiB page's copy saved a fifth.
 */
export const POOLED_MIN_BYTES = 1024 * 1024;
/** Answers that need more than this are collected in buffers of their own, never kept. */
export const POOLED_MAX_BYTES = 32 * 1024 * 1024;
/**
 * At most this many bytes of idle buffers are kept per thread; more are left to the collector.
 *
 * Room for the answers of a busy gateway's concurrent large calls, 128 of 2 MiB. It bounds what is
 * kept idle, not what is allocated: the pool allocates only when nothing of the size is idle, so
 * what it holds, idle and lent, never exceeds the most it had lent at once. A bound below that
 * concurrency costs memory mapped afresh all the time, not memory saved. With 64 MiB, 50 concurrent
 * 1.6 MiB answers (100 MiB of 2 MiB buffers) dropped the surplus each time fewer were in use and
 * mapped it again each time more were. A fresh page costs a page fault, about 13.5 µs on the
 * bench's machine, so up to 512 of them per 2 MiB buffer (docs/benchmarks.md, "Pooled buffers
 * kept for as long as they are used").
 */
export const POOL_RETAINED_BYTES = 256 * 1024 * 1024;
/**
 * A buffer idle for this long is dropped. A burst of large answers leaves the gateway's memory
 * where it was before the burst, not at the burst's high-water mark, and after a spike a trickle
 * of large answers keeps only the buffers it uses. Since only buffers that went unused are
 * dropped, the period can be long enough to span the pauses between a client's bursts. At 5 s, a
 * gateway measured as the bench measures `getAssetsByGroup` (1 s rounds of 50 connections in
 * turn with two references, so four other rounds between its pairs of rounds) mapped 17–32 of its
 * 2 MiB buffers afresh at the start of most pairs. 10 s is the period jemalloc waits by default
 * before it gives unused memory back, for the same trade.
 */
export const POOL_IDLE_RELEASE_MS = 10_000;

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
  /** Idle bytes dropped once unused for the release period, in all. */
  releasedBytes: number;
}

/** When and how a pool lets its idle buffers go. */
export interface IdleRelease {
  /** Milliseconds without a {@link AnswerBufferPool.take} after which idle buffers are dropped. */
  afterMs: number;
  /**
   * Called once no buffer is idle and none has been taken for `afterMs`, with the bytes dropped
   * since the last call: where the process can, it asks for them to be freed.
   */
  onRelease?: (droppedBytes: number) => void;
  /** Injected by tests; by default real time, with a timer that does not keep the process alive. */
  clock?: Clock;
}

/** Idle buffers of one size, oldest first, with when each came back. */
interface IdleList {
  buffers: Buffer[];
  idleSince: number[];
}

export class AnswerBufferPool {
  private readonly idle = new Map<number, IdleList>();
  private readonly stats: AnswerBufferStats = { allocated: 0, reused: 0, retainedBytes: 0, releasedBytes: 0 };
  private lastTakenAt = 0;
  private releaseArmed = false;
  /** Bytes dropped since `onRelease` was last called: what the next collection would free. */
  private droppedSinceRelease = 0;
  private readonly clock: Clock;

  constructor(
    private readonly maxRetainedBytes: number = POOL_RETAINED_BYTES,
    private readonly release?: IdleRelease,
  ) {
    this.clock = release?.clock ?? backgroundClock;
  }

  /** A buffer of at least `length` bytes (its content is whatever it held before). */
  take(length: number): Buffer {
    if (this.release !== undefined) this.lastTakenAt = this.clock.now();
    const size = sizeClass(length);
    // The one that came back last: the oldest stay at the bottom and are the ones that age out.
    const list = this.idle.get(size);
    const buffer = list?.buffers.pop();
    if (buffer !== undefined) {
      list!.idleSince.pop();
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
    if (list === undefined) this.idle.set(size, (list = { buffers: [], idleSince: [] }));
    list.buffers.push(buffer);
    list.idleSince.push(this.release === undefined ? 0 : this.clock.now());
    this.stats.retainedBytes += size;
    this.armRelease();
  }

  /**
   * Drops every idle buffer that came back at or before `cutoff` (the collector frees them);
   * returns the bytes dropped.
   */
  private releaseIdle(cutoff: number): number {
    let dropped = 0;
    for (const [size, list] of this.idle) {
      let aged = 0;
      while (aged < list.idleSince.length && list.idleSince[aged]! <= cutoff) aged += 1;
      if (aged === 0) continue;
      list.buffers.splice(0, aged);
      list.idleSince.splice(0, aged);
      dropped += aged * size;
    }
    this.stats.retainedBytes -= dropped;
    this.stats.releasedBytes += dropped;
    return dropped;
  }

  /**
   * One timer at most, armed while buffers are idle, set for when the oldest will have been idle
   * for the release period: a steady stream of large answers costs no timer per answer. Once none
   * is idle and none has been taken for that period either, the large answers have stopped: what
   * was dropped since the last report is reported, so that its memory can be freed. That wait is
   * its own, since the last buffers taken may never come back (a result shared by concurrent
   * calls, say) and the ones that did may have aged out before it ended.
   */
  private armRelease(): void {
    const release = this.release;
    if (release === undefined || this.releaseArmed) return;
    this.releaseArmed = true;
    const check = (): void => {
      const now = this.clock.now();
      this.droppedSinceRelease += this.releaseIdle(now - release.afterMs);
      const oldest = this.oldestIdleSince();
      if (oldest !== undefined) return void this.clock.setTimer(oldest + release.afterMs - now, check);
      const quietAt = this.lastTakenAt + release.afterMs;
      if (this.droppedSinceRelease > 0 && now < quietAt) return void this.clock.setTimer(quietAt - now, check);
      this.releaseArmed = false;
      const dropped = this.droppedSinceRelease;
      this.droppedSinceRelease = 0;
      if (dropped > 0) release.onRelease?.(dropped);
    };
    this.clock.setTimer(release.afterMs, check);
  }

  /** When the longest-idle buffer came back, if any is idle. */
  private oldestIdleSince(): number | undefined {
    let oldest: number | undefined;
    for (const { idleSince } of this.idle.values()) {
      const since = idleSince[0];
      if (since !== undefined && (oldest === undefined || since < oldest)) oldest = since;
    }
    return oldest;
  }

  snapshot(): AnswerBufferStats {
    return { ...this.stats };
  }
}

/**
 * This thread's pool: each idle buffer dropped once unused for the release period, and once all
 * are gone, their memory freed.
 */
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
