// A large upstream result is passed on in the chunks undici received it in (views into them, in
// order), never copied into a buffer of its own; everything that writes or keeps a result reads
// such parts exactly as it reads one buffer. src/jsonrpc/result-bytes.ts says why.

import { describe, expect, it } from 'vitest';
import { readEnvelope } from '../src/jsonrpc/envelope-scanner.js';
import { idText, replyBody, serialiseBatch, serialiseReply, type Reply } from '../src/jsonrpc/envelope.js';
import { contiguous, ownedCopy, resultLength, SPLICE_MIN_BYTES, viewsOf, type ResultBytes } from '../src/jsonrpc/result-bytes.js';

/** A result of about `bytes` bytes: an array of assets with multi-byte names, as a DAS page has. */
function largeResult(bytes: number): string {
  const items: string[] = [];
  let length = 2;
  for (let index = 0; length < bytes; index += 1) {
    const item = JSON.stringify({ id: `asset-${index}`, name: `Ünïcode 🦀 #${index}`, royalty: { percent: 0.05, locked: index % 2 === 0 } });
    items.push(item);
    length += Buffer.byteLength(item) + 1;
  }
  return `[${items.join(',')}]`;
}

/** `text` cut into chunks of the given sizes (the last takes the rest), each in a buffer of its own, as a socket delivers them. */
function chunked(text: string, sizes: readonly number[]): Buffer[] {
  const bytes = Buffer.from(text);
  const chunks: Buffer[] = [];
  let offset = 0;
  // Buffer.alloc, never the shared pool of small buffers: each chunk has its own memory, as a socket read's has.
  const own = (part: Buffer): Buffer => {
    const chunk = Buffer.alloc(part.length);
    part.copy(chunk);
    return chunk;
  };
  for (const size of sizes) {
    chunks.push(own(bytes.subarray(offset, offset + size)));
    offset += size;
  }
  chunks.push(own(bytes.subarray(offset)));
  return chunks;
}

const length = (chunks: readonly Buffer[]): number => chunks.reduce((sum, chunk) => sum + chunk.length, 0);

describe('a large result in parts', () => {
  const result = largeResult(3 * SPLICE_MIN_BYTES);
  const envelope = `{"jsonrpc":"2.0","id":41,"result":${result}}`;
  // Cuts inside the head, inside multi-byte characters and at odd offsets, so the result starts and ends mid-chunk.
  const chunks = chunked(envelope, [7, 30, 65_536, 1, 65_535, 50_001]);

  it('is returned as views into the chunks the answer arrived in, not as a copy', () => {
    const members = readEnvelope(chunks, length(chunks))!;
    expect(members.id!.toString()).toBe('41');
    const parts = members.result!;
    expect(Buffer.isBuffer(parts)).toBe(false);
    expect(contiguous(parts).toString('utf8')).toBe(result);
    const chunkMemory = new Set(chunks.map((chunk) => chunk.buffer));
    for (const part of parts as readonly Buffer[]) expect(chunkMemory.has(part.buffer)).toBe(true);
    expect(resultLength(parts)).toBe(Buffer.byteLength(result));
  });

  it('is copied out when small: the gateway owns it, and it keeps no network chunk alive', () => {
    const small = '{"number":"0x1b4","transactions":["0xab"]}';
    const smallChunks = chunked(`{"jsonrpc":"2.0","id":1,"result":${small}}`, [20, 9]);
    const members = readEnvelope(smallChunks, length(smallChunks))!;
    expect(Buffer.isBuffer(members.result)).toBe(true);
    expect((members.result as Buffer).toString()).toBe(small);
    for (const chunk of smallChunks) expect((members.result as Buffer).buffer).not.toBe(chunk.buffer);
  });

  it('is written to the client as the head, the parts in order and the closing brace', () => {
    const parts = readEnvelope(chunks, length(chunks))!.result!;
    const reply: Reply = { id: idText(7), result: parts };
    const body = replyBody(reply);
    expect(Array.isArray(body)).toBe(true);
    const written = body as Buffer[];
    expect(written.slice(1, -1)).toEqual(parts);
    const expected = `{"jsonrpc":"2.0","id":7,"result":${result}}`;
    expect(Buffer.concat(written).toString('utf8')).toBe(expected);
    // The WebSocket transport and batches take one buffer: the same bytes.
    expect(serialiseReply(reply).toString('utf8')).toBe(expected);
    expect(serialiseBatch([reply, { id: idText('b'), result: Buffer.from('1') }]).toString('utf8')).toBe(`[${expected},{"jsonrpc":"2.0","id":"b","result":1}]`);
  });

  it('is joined into a buffer of its own only where one is needed', () => {
    const parts: ResultBytes = viewsOf(chunks, 3, 70_000);
    const joined = ownedCopy(parts);
    expect(joined.equals(Buffer.concat(chunks).subarray(3, 70_000))).toBe(true);
    for (const chunk of chunks) expect(joined.buffer).not.toBe(chunk.buffer);
    const single = Buffer.from('"0x1"');
    expect(contiguous(single)).toBe(single);
    expect(ownedCopy(single)).not.toBe(single);
    expect(ownedCopy(single).equals(single)).toBe(true);
  });

  it('views cover exactly the span asked for, wherever the chunk edges fall', () => {
    const whole = Buffer.concat(chunks);
    for (const [start, end] of [
      [0, whole.length],
      [7, 37],
      [36, 37],
      [37, 65_573],
      [100, 131_000],
      [whole.length - 1, whole.length],
    ] as const) {
      const views = viewsOf(chunks, start, end);
      expect(Buffer.concat(views).equals(whole.subarray(start, end))).toBe(true);
      expect(views.every((view) => view.length > 0)).toBe(true);
    }
  });
});
