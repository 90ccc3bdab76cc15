/**
 * Whether a request's `Cache-Control` asks not to be answered from a cache: a `no-cache`
 * directive among its comma-separated directives (any case). Anything else, malformed values
 * included, is ignored: the header can only ever skip a read, never fail a call.
 */
export function asksNoCache(header: string | string[] | undefined): boolean {
  if (header === undefined) return false;
  const value = Array.isArray(header) ? header.join(',') : header;
  // Bounded work whatever the client sends: a real header is a few directives.
  if (value.length > 1024) return false;
  return value.split(',').some((directive) => directive.trim().toLowerCase() === 'no-cache');
}
