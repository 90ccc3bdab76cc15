// The request line (src/logging/logger.ts, logRequest): serialised by one JSON.stringify instead
// of pino's loop over fields, it must be the very line `logger.info(fields, 'request')` writes,
// byte for byte (its time aside), the logger's bindings included.

import { Writable } from 'node:stream';
import fc from 'fast-check';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger, logRequest } from '../src/logging/logger.js';

function capture(): { destination: Writable; lines: string[] } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString('utf8'));
      done();
    },
  });
  return { destination, lines };
}

/** A line without its time, which differs between two calls. */
const timeless = (line: string) => line.replace(/"time":"[^"]+"/, '"time":"T"');

/** Field values as the request handler builds them: strings of any text, numbers, lists, nothing. */
const fieldValue = fc.oneof(
  fc.string({ unit: 'binary' }),
  fc.constant(undefined),
  fc.integer(),
  fc.double(),
  fc.array(fc.string({ unit: 'grapheme' }), { maxLength: 4 }),
  fc.array(fc.record({ upstream: fc.string(), reason: fc.string(), durationMs: fc.double({ noNaN: true }) }), { maxLength: 3 }),
);
const fields = fc.dictionary(fc.string({ minLength: 1, maxLength: 12 }).filter((key) => !['level', 'time', 'msg', 'worker'].includes(key)), fieldValue, { maxKeys: 18 });

describe('logRequest', () => {
  it('writes the line logger.info(fields, "request") writes, byte for byte', async () => {
    const { destination, lines } = capture();
    const logger = createLogger({ level: 'info', destination, base: { worker: 3 } });
    fc.assert(
      fc.property(fields, (generated) => {
        lines.length = 0;
        logger.info(generated, 'request');
        logRequest(logger, generated);
        expect(lines).toHaveLength(2);
        const [byPino, byStringify] = lines.map(timeless) as [string, string];
        expect(byStringify).toBe(byPino);
      }),
      { numRuns: 2_000 },
    );
  });

  it("gives a logger it did not make (a test's own pino) the plain call", () => {
    const { destination, lines } = capture();
    const logger = pino({ level: 'info', messageKey: 'message' }, destination);
    logRequest(logger, { requestId: 'r-1', status: 200 });
    expect(JSON.parse(lines[0]!)).toMatchObject({ requestId: 'r-1', status: 200, message: 'request' });
  });

  afterEach(() => {
    vi.useRealTimers();
  });

  it('stamps each line with the time of its millisecond, formatted once per millisecond', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const { destination, lines } = capture();
    const logger = createLogger({ level: 'info', destination });
    const timeOf = (line: string) => (JSON.parse(line) as { time: string }).time;
    vi.setSystemTime(Date.UTC(2026, 10, 26, 10, 0, 0, 7));
    logRequest(logger, { requestId: 'a' });
    logger.info('another line');
    vi.setSystemTime(Date.UTC(2026, 10, 26, 10, 0, 0, 8));
    logRequest(logger, { requestId: 'b' });
    expect(lines.map(timeOf)).toStrictEqual(['2026-11-26T10:00:00.007Z', '2026-11-26T10:00:00.007Z', '2026-11-26T10:00:00.008Z']);
  });
});
