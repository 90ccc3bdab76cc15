/**
 * Asking V8 for one full collection, where the process allows it.
 *
 * Why: memory that outlived a young-generation collection is freed only by a full one, and V8
 * starts one when the old generation grows, which after a burst of large answers can take
 * minutes of small requests (the gateway's Node flags keep that generation's limit at 128 MiB
 * or more). The answer buffer pool calls this once it has dropped its idle buffers after a quiet
 * period, so that their memory, and that of the answers' chunks still waiting for a full
 * collection, goes back to the system then, not at the next full collection.
 *
 * `gc` exists only under `--expose-gc`, one of the gateway's Node flags
 * (src/startup/node-flags.ts). The collection is asked for asynchronously: V8 runs it in a task
 * of its own, off the caller's stack. It is a full mark-compact, a pause of the main thread for as
 * long as marking its live heap takes (docs/benchmarks.md, "Giving back a burst's memory").
 */

type ExposedGc = (options: { type: 'major'; execution: 'async' }) => Promise<void>;

/** Whether this process can ask for a collection (`--expose-gc`). */
export function canCollect(): boolean {
  return typeof (globalThis as { gc?: unknown }).gc === 'function';
}

/** Asks for one full collection; false when the process was started without `--expose-gc`. */
export function collectFreedMemory(): boolean {
  const gc = (globalThis as { gc?: ExposedGc }).gc;
  if (typeof gc !== 'function') return false;
  void gc({ type: 'major', execution: 'async' });
  return true;
}
