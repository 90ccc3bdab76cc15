// The request line (src/logging/logger.ts, logRequest): written field by field by
// src/logging/request-line.ts instead of pino's loop over fields, it must be the very line
// `logger.info(fields, 'request')` writes, byte for byte (its time aside), the logger's bindings
// included, whatever text and numbers the fields hold.

import { Writable } from 'node:stream';
import fc from 'fast-check';
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger, logRequest, type RequestLineFields } from '../src/logging/logger.js';

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

/** Printable ASCII with what JSON must escape among it: a quote, a backslash, DEL and control characters. */
const nearlyPlain = fc.string({ unit: fc.constantFrom('a', 'Z', '0', '-', ' ', '"', '\\', '\u007f', '\u001f', '\n') });
/**
 * Strings of any text (lone surrogates, quotes, control characters included), and a few that
 * recur from line to line, as a client's path, network, team and method do.
 */
const text = fc.oneof(fc.string({ unit: 'binary' }), nearlyPlain, fc.constantFrom('/evm/v3/[redacted]', 'evm', 'team-1', 'eth_getBlockByHash', 'hit', 'quote " and \\ back', 'ünïcødé'));
const optional = <T>(value: fc.Arbitrary<T>) => fc.option(value, { nil: undefined });
/** Numbers of every kind, NaN and infinities included: the line must write them as JSON.stringify does. */
const number = fc.oneof(fc.integer(), fc.double(), fc.integer({ min: 0, max: 10 ** 9 }).map((hundredths) => hundredths / 100));
/** Request ids as the gateway makes them, as a client may send them, and of any text. */
const requestId = fc.oneof(fc.stringMatching(/^[A-Za-z0-9._:-]{1,128}$/), fc.string({ unit: 'binary' }), nearlyPlain, fc.constant('0a1b2c3d4e5f-1z'));

/** Request line fields of the shape the request handler builds, each with values of any text or number. */
const fields: fc.Arbitrary<RequestLineFields> = fc.record({
  requestId,
  transport: fc.constantFrom('ws' as const, undefined),
  connectionId: optional(text),
  path: optional(text),
  network: optional(text),
  teamId: optional(text),
  keyId: optional(text),
  methods: fc.array(text, { maxLength: 6 }),
  batchSize: optional(number),
  status: number,
  error: optional(text),
  credits: number,
  cache: optional(text),
  upstream: optional(text),
  upstreamCalls: optional(number),
  attempts: optional(fc.array(fc.record({ upstream: fc.string(), reason: fc.string({ unit: 'binary' }), durationMs: fc.double() }), { maxLength: 3 })),
  userAgent: optional(text),
  durationMs: number,
});

/** The fields of a line that says little: a request id and the rest as undefined as it can be. */
function minimal(id: string): RequestLineFields {
  return {
    requestId: id,
    transport: undefined,
    connectionId: undefined,
    path: undefined,
    network: undefined,
    teamId: undefined,
    keyId: undefined,
    methods: [],
    batchSize: undefined,
    status: 200,
    error: undefined,
    credits: 0,
    cache: undefined,
    upstream: undefined,
    upstreamCalls: undefined,
    attempts: undefined,
    userAgent: undefined,
    durationMs: 0.25,
  };
}

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
      // Enough lines for the encoded strings' memory to fill and start again several times.
      { numRuns: 3_000 },
    );
  });

  it("gives a logger it did not make (a test's own pino) the plain call", () => {
    const { destination, lines } = capture();
    const logger = pino({ level: 'info', messageKey: 'message' }, destination);
    logRequest(logger, minimal('r-1'));
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
    logRequest(logger, minimal('a'));
    logger.info('another line');
    vi.setSystemTime(Date.UTC(2026, 10, 26, 10, 0, 0, 8));
    logRequest(logger, minimal('b'));
    expect(lines.map(timeOf)).toStrictEqual(['2026-11-26T10:00:00.007Z', '2026-11-26T10:00:00.007Z', '2026-11-26T10:00:00.008Z']);
  });
});
