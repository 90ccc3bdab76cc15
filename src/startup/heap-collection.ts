/**
 * Asking V8 for one full collection, where the process allows it.
 *
 * Why: memory that outlived a young-generation collection is freed only by a full one, and V8
 * starts one when the old generation grows, which after a burst of large answers can take
 * minutes of small requests (the gateway's Node flags keep that generation's limit at 128 MiB
 * or more). The answer buffer pool asks for one once it has dropped its idle buffers after a
 * quiet period, so that their memory, and that of the answers' chunks still waiting for a full
 * collection, goes back to the system then, not at the next full collection.
 *
 * `gc` exists only under `--expose-gc`, one of the gateway's Node flags
 * (src/startup/node-flags.ts). The collection is asked for asynchronously: V8 runs it in a task
 * of its own, off the caller's stack. It is a full mark-compact, a pause of the main thread for as
 * long as marking its live heap takes: 30 ms on the bench's gateway (docs/benchmarks.md, "Giving
 * back a burst's memory"). So one is asked for at most once a minute: a gateway that gets one
 * large answer every quarter of a minute drops its idle buffer after each, but pauses once a
 * minute, not after each.
 */

type ExposedGc = (options: { type: 'major'; execution: 'async' }) => Promise<void>;

/** At most one collection is asked for in this long. */
export const MIN_COLLECTION_INTERVAL_MS = 60_000;

/** Asks for one full collection; false when the process cannot (no `--expose-gc`) or asked less than the interval ago. */
export type CollectionRequests = () => boolean;

/** `gc` and the clock are injected by tests. */
export function collectionRequests(options: { gc?: ExposedGc | undefined; now?: () => number; minIntervalMs?: number } = {}): CollectionRequests {
  const gc = 'gc' in options ? options.gc : (globalThis as { gc?: ExposedGc }).gc;
  const now = options.now ?? Date.now;
  const minIntervalMs = options.minIntervalMs ?? MIN_COLLECTION_INTERVAL_MS;
  let lastAskedAt = -Infinity;
  return () => {
    if (typeof gc !== 'function' || now() - lastAskedAt < minIntervalMs) return false;
    lastAskedAt = now();
    void gc({ type: 'major', execution: 'async' });
    return true;
  };
}

/** This process's requests (one per thread: each worker thread has its own heap). */
export const collectFreedMemory = collectionRequests();
