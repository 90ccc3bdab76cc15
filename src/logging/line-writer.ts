import { write, writeSync } from 'node:fs';

/**
 * Where log lines go by default (standard output): the lines logged within BATCH_MS (20 ms) are
 * joined and written with one `write`, at most one write in flight.
 *
 * Why not pino's own destination (sonic-boom): with one line per request it issues a write
 * almost per line while idle, and while a write is in flight it measures the whole pending text
 * (`Buffer.byteLength` of up to 16 KiB) for every line it appends. Both cost more CPU than
 * pino's serialisation of the request line itself (docs/benchmarks.md has the figures). Here a
 * line costs an array push; the join and the system call are shared by all lines of 20 ms.
 *
 * Lines are kept in order and none is dropped: a write that the descriptor refuses for now
 * (EAGAIN, a full non-blocking pipe) is retried shortly after. At exit, whatever is pending is
 * written synchronously.
 */
export interface LineWriter {
  write(line: string): boolean;
  /** Calls back once everything logged so far is written (pino's `logger.flush`). */
  flush(callback?: (error?: Error) => void): void;
  /** Writes everything pending now, blocking (at exit). */
  flushSync(): void;
}

const RETRY_AFTER_MS = 10;
/**
 * Lines wait at most this long to be written, or until {@link WRITE_NOW_BYTES} are pending: a
 * write costs about 20 µs of CPU whatever its size (a trip through libuv's thread pool), so one
 * per turn of the event loop would still cost several µs per line at a few lines per turn.
 */
const BATCH_MS = 20;
const WRITE_NOW_CHARS = 64 * 1024;

/** Every writer's synchronous flush, run by one exit listener (not one listener per writer). */
const flushesAtExit = new Set<() => void>();
process.once('exit', () => {
  for (const flush of flushesAtExit) flush();
});

export function createLineWriter(fd = 1): LineWriter {
  let pending: string[] = [];
  let pendingChars = 0;
  /** Bytes of a write that went out in part, written before anything else. */
  let rest: Buffer | undefined;
  let writing = false;
  let scheduled = false;
  let waiters: Array<(error?: Error) => void> = [];

  const settled = (error?: Error): void => {
    if (writing || scheduled || pending.length > 0 || rest !== undefined) return;
    const called = waiters;
    waiters = [];
    for (const waiter of called) waiter(error);
  };

  const writeOut = (): void => {
    scheduled = false;
    if (writing) return;
    let bytes = rest;
    rest = undefined;
    if (bytes === undefined) {
      if (pending.length === 0) return settled();
      bytes = Buffer.from(pending.length === 1 ? pending[0]! : pending.join(''));
      pending = [];
      pendingChars = 0;
    }
    writing = true;
    const chunk = bytes;
    write(fd, chunk, 0, chunk.length, null, (error, written) => {
      writing = false;
      if (error !== null && (error as NodeJS.ErrnoException).code !== 'EAGAIN') {
        // Nowhere to report a broken log destination but the destination: drop this chunk, go on.
        return settleAndContinue(error);
      }
      const done = error === null ? written : 0;
      if (done < chunk.length) {
        rest = chunk.subarray(done);
        setTimeout(writeOut, error === null ? 0 : RETRY_AFTER_MS).unref();
        return;
      }
      settleAndContinue();
    });
  };

  const settleAndContinue = (error?: Error): void => {
    if (pending.length > 0) writeOut();
    else settled(error);
  };

  const flushSync = (): void => {
    const text = (rest === undefined ? '' : rest.toString()) + pending.join('');
    rest = undefined;
    pending = [];
    pendingChars = 0;
    const bytes = Buffer.from(text);
    let offset = 0;
    for (let attempts = 0; offset < bytes.length && attempts < 1000; attempts += 1) {
      try {
        offset += writeSync(fd, bytes, offset);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') return;
      }
    }
  };
  flushesAtExit.add(flushSync);

  return {
    write(line) {
      pending.push(line);
      pendingChars += line.length;
      if (pendingChars >= WRITE_NOW_CHARS && !writing) {
        writeOut();
      } else if (!scheduled && !writing) {
        scheduled = true;
        setTimeout(writeOut, BATCH_MS).unref();
      }
      return true;
    },
    flush(callback) {
      if (callback !== undefined) waiters.push(callback);
      settled();
    },
    flushSync,
  };
}
