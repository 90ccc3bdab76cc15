import { hash } from 'node:crypto';

/**
 * What may reach a log line from the outside, in one place. Request fields are logged in shapes
 * that cannot carry a secret (a path cut after the network prefix, a method name from the
 * catalogue or a hash, a request id checked against every known secret); free-form text (error
 * messages and stacks, an upstream's words, a user agent) goes through one {@link SecretScrubber}
 * and is bounded in length.
 */

const REDACTED = '[redacted]';
/** Issued API keys are `tg_` + 32 base64url characters; anything shaped like one is treated as one. */
const KEY_SHAPED = /tg_[A-Za-z0-9_-]{20,}/g;
/** The same, percent-encoded (`tg%5F…`). */
const ESCAPED_KEY_SHAPED = /tg%5F[A-Za-z0-9_%-]{20,}/gi;
/** `scheme://user:password@host`: credentials in a URL. */
const CREDENTIAL_IN_URL = /(\/\/)[^/@\s]+@/g;
/** The same patterns without the global flag, for tests that must not keep a `lastIndex`. */
const HAS_KEY_SHAPED = new RegExp(KEY_SHAPED.source);
const HAS_ESCAPED_KEY_SHAPED = new RegExp(ESCAPED_KEY_SHAPED.source, 'i');
const HAS_CREDENTIAL_IN_URL = new RegExp(CREDENTIAL_IN_URL.source);
/** Known secrets shorter than this are not looked for: too many innocent strings would match. */
const MIN_SECRET_LENGTH = 8;
/**
 * Client texts found clean are remembered, up to this many, each at most
 * {@link MAX_REMEMBERED_TEXT_LENGTH} characters (at most about 1 MiB in all); when full, the set
 * starts again empty.
 */
const MAX_REMEMBERED_CLEAN_TEXTS = 1_024;
const MAX_REMEMBERED_TEXT_LENGTH = 512;

export interface SecretScrubber {
  /**
   * Adds known secrets (the admin token, upstream URL credentials and header values). Secrets are
   * never removed: one replaced by a reload may still be quoted by an error of a request in flight.
   */
  add(secrets: Iterable<string>): void;
  /** True when `text` holds a known secret, something shaped like an API key, or URL credentials. */
  contains(text: string): boolean;
  /** `text` with every known secret, key-shaped string and URL credential replaced, then bounded to `maxLength`. */
  scrub(text: string, maxLength?: number): string;
  /**
   * For short values a client chose (a request id, a user agent): {@link contains}, and also a
   * key without its `tg_` prefix, which no list knows — 20 or more URL-safe characters mixing
   * upper- and lower-case letters (random base64url; request ids, UUIDs and user agents do not
   * look like that).
   */
  containsInClientText(text: string): boolean;
  /** {@link scrub} for a value a client chose, with bare key shapes replaced too. */
  scrubClientText(text: string, maxLength: number): string;
}

/** A run of URL-safe characters long enough to be a key without its prefix. */
const URL_SAFE_RUN = /[A-Za-z0-9_-]{20,}/g;
const isBareKeyShaped = (run: string): boolean => /[a-z]/.test(run) && /[A-Z]/.test(run);

export function createSecretScrubber(initial: Iterable<string> = []): SecretScrubber {
  /** Longest first, so a secret that contains another is replaced whole. */
  let secrets: string[] = [];
  /**
   * Client texts that {@link SecretScrubber.scrubClientText} left unchanged. A user agent repeats
   * on every request of a client, and scrubbing one of a browser's length costs about 1.5 µs of
   * CPU (four regular expressions and a search per known secret), a lookup here a tenth of that.
   * Only texts with nothing to scrub are kept, so no secret is held here; a new secret empties it.
   */
  let cleanClientTexts = new Set<string>();
  const scrubber: SecretScrubber = {
    add(more) {
      const merged = new Set(secrets);
      for (const secret of more) if (secret.length >= MIN_SECRET_LENGTH) merged.add(secret);
      secrets = [...merged].sort((a, b) => b.length - a.length);
      cleanClientTexts = new Set();
    },
    contains(text) {
      if (HAS_KEY_SHAPED.test(text) || HAS_ESCAPED_KEY_SHAPED.test(text) || HAS_CREDENTIAL_IN_URL.test(text)) return true;
      for (const secret of secrets) if (text.includes(secret)) return true;
      return false;
    },
    scrub(text, maxLength = DEFAULT_MAX_LENGTH) {
      let scrubbed = text.replace(CREDENTIAL_IN_URL, `$1${REDACTED}@`).replace(KEY_SHAPED, REDACTED).replace(ESCAPED_KEY_SHAPED, REDACTED);
      for (const secret of secrets) if (scrubbed.includes(secret)) scrubbed = scrubbed.split(secret).join(REDACTED);
      return bounded(scrubbed, maxLength);
    },
    containsInClientText(text) {
      if (scrubber.contains(text)) return true;
      for (const run of text.match(URL_SAFE_RUN) ?? []) if (isBareKeyShaped(run)) return true;
      return false;
    },
    scrubClientText(text, maxLength) {
      if (cleanClientTexts.has(text)) return bounded(text, maxLength);
      // Scrubbed before it is cut, so no secret is cut in two with a half left standing.
      const scrubbed = scrubber.scrub(text, Number.MAX_SAFE_INTEGER).replace(URL_SAFE_RUN, (run) => (isBareKeyShaped(run) ? REDACTED : run));
      if (scrubbed === text && text.length <= MAX_REMEMBERED_TEXT_LENGTH) {
        if (cleanClientTexts.size >= MAX_REMEMBERED_CLEAN_TEXTS) cleanClientTexts = new Set();
        cleanClientTexts.add(text);
      }
      return bounded(scrubbed, maxLength);
    },
  };
  scrubber.add(initial);
  return scrubber;
}

/** Free-form text (error messages, stacks) is cut after this many characters. */
export const DEFAULT_MAX_LENGTH = 4_096;

/** `text`, or its first `maxLength` characters and how many were left out. */
export function bounded(text: string, maxLength: number): string {
  return text.length <= maxLength ? text : `${text.slice(0, maxLength)}…(+${text.length - maxLength} chars)`;
}

/**
 * A request path as it may be logged: the network prefix it starts with (config text), then
 * `/v3/[redacted]` where the key's place is, `/[redacted]` for anything else, and `?[redacted]`
 * for a query string. Nothing a client typed after a prefix reaches a log line, so no key, token
 * or mistyped secret can, whatever it looks like. `prefixes`: longest first.
 */
export function pathForLog(rawUrl: string, prefixes: readonly string[]): string {
  const queryStart = rawUrl.indexOf('?');
  const path = queryStart < 0 ? rawUrl : rawUrl.slice(0, queryStart);
  const query = queryStart < 0 ? '' : `?${REDACTED}`;
  let prefix = '';
  for (const candidate of prefixes) {
    if (path.startsWith(candidate) && (path.length === candidate.length || path.charCodeAt(candidate.length) === 0x2f)) {
      prefix = candidate;
      break;
    }
  }
  const rest = prefix.length === 0 ? path : path.slice(prefix.length);
  let shown: string;
  if (rest === '' || rest === '/' || rest === '/v3' || rest === '/v3/') shown = rest;
  else if (rest.startsWith('/v3/')) shown = `/v3/${REDACTED}`;
  else shown = `/${REDACTED}`;
  return prefix + shown + query;
}

/**
 * A method name as it may be logged: itself when the network offers it, otherwise `other:` and
 * 8 hex digits of its SHA-256, so that a key pasted as a method name stays unreadable while
 * repeated unknown names can still be told apart (and the line stays short).
 */
export function methodForLog(method: string, offered: boolean): string {
  return offered ? method : `other:${hash('sha256', method, 'hex').slice(0, 8)}`;
}
