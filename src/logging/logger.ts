import pino, { type Logger } from 'pino';

export type { Logger };

/**
 * Strings that must never reach a log line: API key secrets in request paths, credentials in
 * upstream URLs, the admin token. Request paths are logged only after {@link redactKeyPath}.
 */
const CREDENTIAL_IN_URL = /(\/\/)[^/@\s]+@/g;
const KEY_IN_PATH = /(\/v3\/)[^/?#\s]+/g;
const SECRET_LIKE = /tg_[A-Za-z0-9_-]{20,}/g;
/** The same in a percent-encoded path (`tg%5F...`). */
const ESCAPED_SECRET_LIKE = /tg%5F[A-Za-z0-9_%-]{20,}/gi;

/** Removes every secret-looking part of a free-form string (error messages, URLs, paths). */
export function redactSecrets(text: string, extraSecrets: readonly string[] = []): string {
  let redacted = text.replace(CREDENTIAL_IN_URL, '$1[redacted]@').replace(KEY_IN_PATH, '$1[redacted]').replace(SECRET_LIKE, '[redacted]');
  for (const secret of extraSecrets) {
    if (secret.length >= 8) redacted = redacted.split(secret).join('[redacted]');
  }
  return redacted;
}

/**
 * A request path as it may be logged. Besides `/v3/<key>`, a secret anywhere else in the path is
 * scrubbed too: a client that mistypes the path (`/v2/<key>`, a wrong prefix) still sends its key.
 */
export function redactKeyPath(path: string): string {
  return path.replace(KEY_IN_PATH, '$1[redacted]').replace(SECRET_LIKE, '[redacted]').replace(ESCAPED_SECRET_LIKE, '[redacted]');
}

export interface LoggerOptions {
  level?: string;
  /** Where lines go; a test passes a stream to capture them. Defaults to stdout. */
  destination?: pino.DestinationStream;
  /** Known secrets (upstream URL query keys, header values, the admin token) to scrub from messages. */
  secrets?: readonly string[];
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const secrets = options.secrets ?? [];
  return pino(
    {
      level: options.level ?? process.env.TOLLGATE_LOG_LEVEL ?? 'info',
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // Error messages can embed URLs (undici puts the origin in some); scrub them on the way out.
      serializers: {
        err: (error: Error) => ({
          type: error.name,
          message: redactSecrets(error.message, secrets),
          code: (error as { code?: unknown }).code,
        }),
      },
      hooks: {
        logMethod(args, method) {
          const scrubbed = args.map((arg) => (typeof arg === 'string' ? redactSecrets(arg, secrets) : arg));
          method.apply(this, scrubbed as Parameters<typeof method>);
        },
      },
    },
    options.destination ?? pino.destination({ sync: false }),
  );
}
