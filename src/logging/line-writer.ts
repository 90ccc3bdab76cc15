import { writeSync } from 'node:fs';

/**
 * Where log lines go by default (standard output): the lines logged within BATCH_MS (20 ms) are
 * written with one synchronous `write`.
 *
 * Why not pino's own destination (sonic-boom, asynchronous): with one line per request it issues
 * a write almost per line while idle, each a trip through libuv's thread pool, and while a write
 * is in flight it measures the whole pending text (`Buffer.byteLength` of up to 16 KiB) for every
 * line it appends. Both cost more CPU than pino's serialisation of the request line itself
 * (docs/benchmarks.md has the figures). Here a line costs a copy of its bytes into a buffer; the
 * system call is shared by all lines of 20 ms. The write is synchronous so that nothing is ever
 * in flight: lines stay in order, and at exit whatever is pending is simply written.
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

/** Lines wait at most this long, or until the chunk below is about full. */
const BATCH_MS = 20;
/**
 * The bytes of the lines waiting, in one buffer reused from batch to batch (a busy gateway fills
 * it every few milliseconds, and it is written then). Each line is copied into it as UTF-8 when it
 * is logged, so no line string outlives its request, and neither a joined text of the batch nor
 * its UTF-8 copy is made.
 */
const CHUNK_BYTES = 64 * 1024;
const RETRY_AFTER_MS = 10;

/** Every writer's flush, run by one exit listener (not one listener per writer). */
const flushesAtExit = new Set<() => void>();
process.once('exit', () => {
  for (const flush of flushesAtExit) flush();
});

export function createLineWriter(fd = 1): LineWriter {
  const chunk = Buffer.allocUnsafeSlow(CHUNK_BYTES);
  let used = 0;
  /** Bytes the descriptor did not take yet, written before anything newer. */
  let rest: Buffer | undefined;
  let timer: NodeJS.Timeout | undefined;

  /** Appends bytes that must go out after `rest` (a copy: the chunk is reused). */
  const keep = (bytes: Buffer) => {
    rest = rest === undefined ? Buffer.from(bytes) : Buffer.concat([rest, bytes]);
  };

  /** Writes what it can; returns an error other than EAGAIN, if any. */
  const writeOut = (): Error | undefined => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    try {
      if (rest !== undefined) {
        const written = writeSync(fd, rest);
        rest = written >= rest.length ? undefined : rest.subarray(written);
      }
      while (rest === undefined && used > 0) {
        const written = writeSync(fd, chunk, 0, used);
        if (written < used) chunk.copyWithin(0, written, used);
        used -= written;
      }
    } catch (caught) {
      if ((caught as NodeJS.ErrnoException).code !== 'EAGAIN') {
        // A broken destination has nowhere to report to but itself: drop this text, go on.
        rest = undefined;
        used = 0;
        return caught as Error;
      }
    }
    if (rest !== undefined || used > 0) {
      // The descriptor is full for now (a non-blocking pipe): keep the bytes, in order, and retry.
      if (used > 0) keep(chunk.subarray(0, used));
      used = 0;
      timer = setTimeout(writeOut, RETRY_AFTER_MS).unref();
    }
    return undefined;
  };
  flushesAtExit.add(() => {
    // At exit, EAGAIN cannot wait for a timer: retry a bounded number of times.
    for (let attempt = 0; attempt < 1000 && (used > 0 || rest !== undefined); attempt += 1) writeOut();
  });

  return {
    write(line) {
      // A UTF-16 code unit is at most 3 bytes of UTF-8 (a surrogate pair, two units, is 4).
      const room = line.length * 3;
      if (used + room > CHUNK_BYTES) writeOut();
      if (room > CHUNK_BYTES) {
        // A line longer than the whole chunk goes out on its own, after what is waiting.
        keep(Buffer.from(line));
        writeOut();
        return true;
      }
      used += chunk.write(line, used);
      timer ??= setTimeout(writeOut, BATCH_MS).unref();
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
