/**
 * Origin patterns (`[scheme://]host[:port]`, host possibly `*.`-prefixed) and their matcher: what
 * a key's `allowedOrigins` and `server.cors.allowedOrigins` hold. A leaf module: the config schema
 * and the key settings both validate with it.
 */


/** `[scheme://]host[:port]`, host possibly `*.`-prefixed; what one origin entry may look like. */
const ORIGIN_PATTERN = /^(?:([a-z][a-z0-9+.-]*):\/\/)?(\*\.)?((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]+\])(?::(\d{1,5}))?$/;

interface ParsedOrigin {
  scheme: string | undefined;
  wildcard: boolean;
  /** Host and `:port`, lower-case. */
  authority: string;
}

export function parseOriginPattern(entry: string): ParsedOrigin | undefined {
  const match = ORIGIN_PATTERN.exec(entry.trim().toLowerCase());
  if (match === null) return undefined;
  if (match[4] !== undefined && Number(match[4]) > 65535) return undefined;
  if (match[2] !== undefined && match[3]!.startsWith('[')) return undefined;
  return { scheme: match[1], wildcard: match[2] !== undefined, authority: match[4] === undefined ? match[3]! : `${match[3]}:${match[4]}` };
}

/** True for an origin entry a key or `server.cors.allowedOrigins` may hold. */
export const isOriginPattern = (entry: string): boolean => parseOriginPattern(entry) !== undefined;

/** An origin matcher: exact origins by set lookup, scheme-less ones by authority, wildcards by suffix. */
export interface OriginMatcher {
  (origin: string): boolean;
}

/** `*` alone allows any origin (the gateway-wide default). */
export function compileOrigins(entries: readonly string[]): OriginMatcher {
  if (entries.includes('*')) return () => true;
  const exact = new Set<string>();
  const anyScheme = new Set<string>();
  const suffixes: Array<{ scheme: string | undefined; suffix: string }> = [];
  for (const entry of entries) {
    const parsed = parseOriginPattern(entry);
    if (parsed === undefined) continue; // validated before it was stored
    if (parsed.wildcard) suffixes.push({ scheme: parsed.scheme, suffix: `.${parsed.authority}` });
    else if (parsed.scheme === undefined) anyScheme.add(parsed.authority);
    else exact.add(`${parsed.scheme}://${parsed.authority}`);
  }
  // A page sends the same Origin on every call: the last answer is kept (one string compare).
  let lastOrigin: string | undefined;
  let lastAllowed = false;
  const matches = (raw: string): boolean => {
    const origin = raw.toLowerCase();
    if (exact.has(origin)) return true;
    const separator = origin.indexOf('://');
    if (separator < 0) return false; // `null` and other opaque origins
    const authority = origin.slice(separator + 3);
    if (anyScheme.has(authority)) return true;
    for (const { scheme, suffix } of suffixes) {
      if (authority.endsWith(suffix) && authority.length > suffix.length && (scheme === undefined || origin.startsWith(scheme) && separator === scheme.length)) return true;
    }
    return false;
  };
  return (raw) => {
    if (raw !== lastOrigin) {
      lastAllowed = matches(raw);
      lastOrigin = raw;
    }
    return lastAllowed;
  };
}
