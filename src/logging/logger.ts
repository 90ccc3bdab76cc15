import pino, { type Logger } from 'pino';
import { createLineWriter } from './line-writer.js';
import { createSecretScrubber, DEFAULT_MAX_LENGTH, type SecretScrubber } from './redaction.js';
import { requestLineMembers, type RequestLineFields } from './request-line.js';

export type { Logger };
export { bounded, methodForLog, pathForLog, type SecretScrubber } from './redaction.js';
export type { RequestLineFields } from './request-line.js';

/**
 * pino JSON lines. Errors are logged with pino's standard serializer (type, message, stack and
 * the `cause` chain), scrubbed of secrets and bounded at this edge; fields that would hold a
 * credential if anyone logged them are censored by pino's `redact` paths. Request fields are
 * built secret-free by the request handler (see ./redaction.ts); nothing else runs over every
 * line.
 */

/** Fields censored wherever a log call passes them. */
const REDACT_PATHS = ['apiKey', 'secret', 'token', 'adminToken', 'authorization', 'headers.authorization', 'headers.cookie'];

/** Properties of errors that carry raw bytes of a request (Node's HTTP parser errors): never logged. */
const RAW_ERROR_PROPERTIES = new Set(['rawPacket']);
const MAX_ERROR_DEPTH = 4;
const MAX_ERROR_ENTRIES = 32;

/** A serialised error with every string scrubbed and bounded, buffers reduced to their size. */
function scrubErrorValue(value: unknown, scrubber: SecretScrubber, depth: number): unknown {
  if (typeof value === 'string') return scrubber.scrub(value, DEFAULT_MAX_LENGTH);
  if (value === null || typeof value !== 'object') return value;
  if (ArrayBuffer.isView(value)) return `[${value.byteLength} bytes]`;
  if (depth >= MAX_ERROR_DEPTH) return '[…]';
  if (Array.isArray(value)) return value.slice(0, MAX_ERROR_ENTRIES).map((entry) => scrubErrorValue(entry, scrubber, depth + 1));
  const out: Record<string, unknown> = {};
  let entries = 0;
  for (const [key, entry] of Object.entries(value)) {
    if (RAW_ERROR_PROPERTIES.has(key)) continue;
    if (++entries > MAX_ERROR_ENTRIES) break;
    out[key] = scrubErrorValue(entry, scrubber, depth + 1);
  }
  return out;
}

/** The levels a logger can be set to, most verbose first; `silent` writes nothing. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/**
 * Sets a running logger's level (the admin API's `PUT /v1/log-level`). The change is itself
 * logged at warn, so it is seen at the default level and after a change to warn; a level above
 * warn hides it, as it hides every other warning.
 */
export function setLogLevel(logger: Logger, level: LogLevel): void {
  const previous = logger.level;
  logger.level = level;
  if (previous !== level) logger.warn({ from: previous, to: level }, 'log level changed');
}

export interface LoggerOptions {
  level?: string;
  /** Where lines go; a test passes a stream to capture them. Defaults to stdout, written in batches (line-writer.ts). */
  destination?: pino.DestinationStream;
  /** Known secrets (upstream URL credentials, header values, the admin token) to scrub from error text. */
  secrets?: readonly string[];
  /** Fields on every line (a worker of `serve --workers N` names itself). */
  base?: Record<string, unknown>;
}

let timeMs = -1;
let timeText = '';

/**
 * pino's `isoTime`, formatted once per millisecond: formatting an ISO date costs about 3,000
 * instructions, and a busy gateway writes tens of lines within one millisecond.
 */
function isoTimeOncePerMillisecond(): string {
  const now = Date.now();
  if (now !== timeMs) {
    timeMs = now;
    timeText = `,"time":"${new Date(now).toISOString()}"`;
  }
  return timeText;
}

const scrubbers = new WeakMap<Logger, SecretScrubber>();
/** Loggers made by {@link createLogger}: their lines are known to need no hook, mixin or serializer but `err`'s. */
const ownLoggers = new WeakSet<Logger>();
/** For loggers not made by {@link createLogger}: key shapes and URL credentials only. */
const fallbackScrubber = createSecretScrubber();

/**
 * The scrubber behind a logger made by {@link createLogger}: the gateway adds the secrets of its
 * config (and of each reload) to it, and asks it whether a client-chosen request id holds one.
 */
export function logScrubber(logger: Logger): SecretScrubber {
  return scrubbers.get(logger) ?? fallbackScrubber;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const scrubber = createSecretScrubber(options.secrets ?? []);
  const logger = pino(
    {
      level: options.level ?? process.env.TOLLGATE_LOG_LEVEL ?? 'info',
      base: options.base,
      timestamp: isoTimeOncePerMillisecond,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      // Error messages can embed URLs (undici puts the origin in some) and upstream text.
      serializers: { err: (error: unknown) => scrubErrorValue(pino.stdSerializers.err(error as Error), scrubber, 0) },
    },
    options.destination ?? createLineWriter(),
  );
  scrubbers.set(logger, scrubber);
  ownLoggers.add(logger);
  return logger;
}

const INFO = 30;
const { chindingsSym, lsCacheSym, streamSym, timeSym } = pino.symbols;

/**
 * Logs the one line per request, `msg: "request"`, at info. The line is the one
 * `logger.info(fields, 'request')` writes, byte for byte; the fields are written by
 * {@link requestLineMembers} instead of pino's loop over the object. Why: with about 16 fields,
 * pino's generic per-field work (serializer, stringifier and redaction lookups by key, a string
 * per field) took about 8 µs of CPU per request, the largest single cost of a cache hit at the
 * default level; `JSON.stringify` of the fields, which replaced it, was then still about half of
 * the line's instructions (docs/benchmarks.md). The request line's fields are built secret-free
 * by the request handler and hold none of the redacted names, so nothing pino would do to them is
 * skipped. A logger not made by {@link createLogger} (a test's own pino) gets the plain call.
 */
export function logRequest(logger: Logger, fields: RequestLineFields): void {
  if (!ownLoggers.has(logger)) {
    logger.info(fields, 'request');
    return;
  }
  const internals = logger as unknown as Record<symbol, unknown>;
  const levelAndTime = (internals[lsCacheSym] as Record<number, string>)[INFO]! + (internals[timeSym] as () => string)();
  const line = `${levelAndTime}${internals[chindingsSym] as string},${requestLineMembers(fields)},"msg":"request"}\n`;
  (internals[streamSym] as pino.DestinationStream).write(line);
}
