import type { ServerResponse } from 'node:http';

/**
 * CORS on RPC paths (docs/keys.md#cors). Every answer to a request whose origin may read it
 * carries these headers, errors included, so a page can read error bodies and credit headers.
 * The origin is echoed, never `*`; no `Access-Control-Allow-Credentials` (the gateway uses no
 * cookies, and an explicit `Authorization` header needs only the preflight's allowed headers).
 */

const EXPOSED = 'X-Request-Id, X-Credits-Cost, X-Credits-Remaining, X-Cache, Retry-After';

/** Appends the CORS headers of an answer to `headers` (a flat `[name, value, ...]` list). */
export function pushCorsHeaders(headers: string[], origin: string): void {
  headers.push('access-control-allow-origin', origin, 'vary', 'Origin', 'access-control-expose-headers', EXPOSED);
}

/** The same, on a response whose headers are set one by one. */
export function setCorsHeaders(res: ServerResponse, origin: string): void {
  res.setHeader('access-control-allow-origin', origin);
  res.setHeader('vary', 'Origin');
  res.setHeader('access-control-expose-headers', EXPOSED);
}

/** A comma-separated list of header names (RFC 9110 tokens), as `Access-Control-Request-Headers` sends. */
const HEADER_LIST = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:[ \t]*,[ \t]*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*$/;
const MAX_REQUESTED_HEADERS = 2_048;

/**
 * The headers a preflight answer allows: the ones requested (clients send `authorization`,
 * `content-type` and SDK headers such as `Infura-Source`), or none when the list is malformed.
 */
export function preflightHeaders(origin: string, requestedHeaders: string | undefined, maxAgeSeconds: number): string[] {
  const headers: string[] = [];
  pushCorsHeaders(headers, origin);
  headers.push('access-control-allow-methods', 'POST, OPTIONS', 'access-control-max-age', String(maxAgeSeconds));
  const requested = requestedHeaders?.trim();
  if (requested !== undefined && requested !== '' && requested.length <= MAX_REQUESTED_HEADERS && HEADER_LIST.test(requested)) {
    headers.push('access-control-allow-headers', requested);
  }
  return headers;
}
