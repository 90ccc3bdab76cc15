/**
 * A result's JSON exactly as the upstream sent it. A large result stays where the answer was
 * received (views, in order: into undici's chunks, or for an answer of 1 MiB or more into the
 * pooled buffer it was collected in, see answer-buffers.ts) and goes to the client as those same
 * views, in one gathered write: copying a 1.6 MiB `getAssetsByGroup` page into one buffer of its
 * own cost a fresh allocation per answer, the copy, and the collector's work for the external
 * memory, about a tenth of the gateway's CPU for such a call. Code that needs the bytes in one
 * piece (to parse them, or to keep them in a cache) joins them with {@link contiguous}, which
 * copies parts: parts are only borrowed, as a pooled buffer is used again once its reply is out.
 */
export type ResultBytes = Buffer | readonly Buffer[];

/**
 * Results at least this large are passed on as parts rather than copied. Below it one copy costs
 * less than a gathered write of several buffers, and the bytes are then the gateway's own, never a
 * view that keeps a whole network chunk alive.
 */
export const SPLICE_MIN_BYTES = 64 * 1024;

export function resultLength(bytes: ResultBytes): number {
  if (Buffer.isBuffer(bytes)) return bytes.length;
  let length = 0;
  for (const part of bytes) length += part.length;
  return length;
}

/** The bytes in one buffer: the buffer itself, or the parts joined into a new one the caller owns. */
export function contiguous(bytes: ResultBytes): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.concat(bytes);
}

/** The bytes in a new buffer of their own: what a cache keeps (never a view that holds a network chunk alive). */
export function ownedCopy(bytes: ResultBytes): Buffer {
  return Buffer.isBuffer(bytes) ? Buffer.from(bytes) : Buffer.concat(bytes);
}

/** The views of `chunks` (read end to end) that hold bytes `start` to `end`, in order. */
export function viewsOf(chunks: readonly Buffer[], start: number, end: number): Buffer[] {
  const parts: Buffer[] = [];
  let offset = 0;
  for (const chunk of chunks) {
    const chunkEnd = offset + chunk.length;
    if (chunkEnd > start && offset < end) parts.push(chunk.subarray(Math.max(start - offset, 0), Math.min(end, chunkEnd) - offset));
    if (chunkEnd >= end) break;
    offset = chunkEnd;
  }
  return parts;
}
