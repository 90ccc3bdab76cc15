import { writeSync } from 'node:fs';

/**
 * Where log lines go by default (standard output): the lines logged within BATCH_MS (20 ms) are
 * joined and written with one synchronous `write`.
 *
 * Why not pino's own destination (sonic-boom, asynchronous): with one line per request it issues
 * a write almost per line while idle, each a trip through libuv's thread pool, and while a write
 * is in flight it measures the whole pending text (`Buffer.byteLength` of up to 16 KiB) for every
 * line it appends. Both cost more CPU than pino's serialisation of the request line itself
 * (docs/benchmarks.md has the figures). Here a line costs an array push; the join and the system
 * call are shared by all lines of 20 ms. The write is synchronous so that nothing is ever in
 * flight: lines stay in order, and at exit whatever is pending is simply written.
 *
 * None is dropped: what the descriptor refuses for now (EAGAIN, a full non-blocking pipe) is
 * kept, in order, and retried shortly after.
 */
export interface LineWriter {
  write(line: string): boolean;
  /** Writes what is pending (what a full pipe refuses now is retried later), then calls back (pino's `logger.flush`). */
  flush(callback?: (error?: Error) => void): void;
  /** Writes what is pending now (at exit). */
  flushSync(): void;
}

/** Lines wait at most this long, or until WRITE_NOW_CHARS are pending. */
const BATCH_MS = 20;
const WRITE_NOW_CHARS = 64 * 1024;
const RETRY_AFTER_MS = 10;

/** Every writer's flush, run by one exit listener (not one listener per writer). */
const flushesAtExit = new Set<() => void>();
process.once('exit', () => {
  for (const flush of flushesAtExit) flush();
});

export function createLineWriter(fd = 1): LineWriter {
  let pending: string[] = [];
  let pendingChars = 0;
  /** Bytes the descriptor did not take yet, written before anything newer. */
  let rest: Buffer | undefined;
  let timer: NodeJS.Timeout | undefined;

  /** Writes what it can; returns an error other than EAGAIN, if any. */
  const writeOut = (): Error | undefined => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    if (pending.length > 0) {
      const text = pending.length === 1 ? pending[0]! : pending.join('');
      rest = rest === undefined ? Buffer.from(text) : Buffer.concat([rest, Buffer.from(text)]);
      pending = [];
      pendingChars = 0;
    }
    while (rest !== undefined) {
      try {
        const written = writeSync(fd, rest);
        rest = written >= rest.length ? undefined : rest.subarray(written);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'EAGAIN') {
          timer = setTimeout(writeOut, RETRY_AFTER_MS).unref();
          return undefined;
        }
        // A broken destination has nowhere to report to but itself: drop this text, go on.
        rest = undefined;
        return error as Error;
      }
    }
    return undefined;
  };
  flushesAtExit.add(() => {
    // At exit, EAGAIN cannot wait for a timer: retry a bounded number of times.
    for (let attempt = 0; attempt < 1000 && (pending.length > 0 || rest !== undefined); attempt += 1) writeOut();
  });

  return {
    write(line) {
      pending.push(line);
      pendingChars += line.length;
      if (pendingChars >= WRITE_NOW_CHARS) writeOut();
      else timer ??= setTimeout(writeOut, BATCH_MS).unref();
      return true;
    },
    flush(callback) {
      const error = writeOut();
      callback?.(error);
    },
    flushSync() {
      writeOut();
    },
  };
}
