/**
 * Picks the network of a request from its Host header and path; nothing in the body
 * takes part. A base URL is `host[:port][/prefix]` or `*[/prefix]`. A base URL without a port
 * matches the host on any port; with a port, only that port. The most specific match wins: an
 * exact host beats `*`, then the longest prefix.
 */

export interface ResolvedPath<N> {
  network: N;
  /** The API key from `{prefix}/v3/<key>`, or undefined if the path stops at `/v3`. */
  apiKey: string | undefined;
}

export type ResolveResult<N> =
  | { kind: 'found'; value: ResolvedPath<N> }
  | { kind: 'missing-key'; network: N }
  | { kind: 'not-found'; reason: string };

interface Route<N> {
  host: string | undefined; // lower-case, undefined for `*`
  port: string | undefined;
  prefix: string; // '' or '/a/b'
  network: N;
}

function splitHostPort(hostPort: string): { host: string; port: string | undefined } {
  const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(hostPort);
  if (bracketed) return { host: `[${bracketed[1]!.toLowerCase()}]`, port: bracketed[2] };
  const colon = hostPort.lastIndexOf(':');
  if (colon > 0 && /^\d+$/.test(hostPort.slice(colon + 1))) {
    return { host: hostPort.slice(0, colon).toLowerCase(), port: hostPort.slice(colon + 1) };
  }
  return { host: hostPort.toLowerCase(), port: undefined };
}

function safeDecode(segment: string): string {
  // Keys are URL-safe; skipping the decoder when nothing is escaped saves time on every request.
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment; // malformed escapes: keep the raw text; it will simply not match a key
  }
}

export interface NetworkResolver<N> {
  resolve(hostHeader: string | undefined, path: string): ResolveResult<N>;
}

export function createNetworkResolver<N>(entries: ReadonlyArray<{ baseUrl: string; network: N }>): NetworkResolver<N> {
  const routes: Route<N>[] = entries.map(({ baseUrl, network }) => {
    const slash = baseUrl.indexOf('/');
    const hostPart = slash === -1 ? baseUrl : baseUrl.slice(0, slash);
    const prefix = slash === -1 ? '' : baseUrl.slice(slash);
    if (hostPart === '*') return { host: undefined, port: undefined, prefix, network };
    const { host, port } = splitHostPort(hostPart);
    return { host, port, prefix, network };
  });
  // Most specific first: exact host before `*`, host:port before host, longer prefix first.
  routes.sort(
    (a, b) =>
      Number(a.host === undefined) - Number(b.host === undefined) ||
      Number(a.port === undefined) - Number(b.port === undefined) ||
      b.prefix.length - a.prefix.length,
  );

  // Clients call the same URL over and over: remember recent answers, by host then path (two
  // lookups of the strings as they came, rather than hashing a new concatenation per request).
  // Bounded: emptied when full.
  const recent = new Map<string, Map<string, ResolveResult<N>>>();
  let recentSize = 0;
  const RECENT_MAX = 10_000;
  // Under load, request after request carries the same Host and URL (one API key per client
  // application). Two string comparisons answer those; the maps would hash both strings anew,
  // as every request's header strings are new ones.
  let lastHost: string | undefined;
  let lastPath: string | undefined;
  let lastResult: ResolveResult<N> | undefined;

  return {
    resolve(hostHeader, rawPath) {
      if (lastResult !== undefined && rawPath === lastPath && hostHeader === lastHost) return lastResult;
      const host = hostHeader ?? '';
      let byPath = recent.get(host);
      let result = byPath?.get(rawPath);
      if (result === undefined) {
        result = resolveUncached(hostHeader, rawPath);
        if (recentSize >= RECENT_MAX) {
          recent.clear();
          recentSize = 0;
          byPath = undefined;
        }
        if (byPath === undefined) recent.set(host, (byPath = new Map()));
        byPath.set(rawPath, result);
        recentSize += 1;
      }
      lastHost = hostHeader;
      lastPath = rawPath;
      lastResult = result;
      return result;
    },
  };

  function resolveUncached(hostHeader: string | undefined, rawPath: string): ResolveResult<N> {
    const queryStart = rawPath.indexOf('?');
    const path = queryStart === -1 ? rawPath : rawPath.slice(0, queryStart);
    const { host, port } = splitHostPort(hostHeader ?? '');
    let hostMatched = false;
    for (const route of routes) {
      if (route.host !== undefined && (route.host !== host || (route.port !== undefined && route.port !== port))) continue;
      hostMatched = true;
      if (route.prefix !== '' && path !== route.prefix && !path.startsWith(`${route.prefix}/`)) continue;
      const rest = path.slice(route.prefix.length);
      if (rest === '/v3' || rest === '/v3/') return { kind: 'missing-key', network: route.network };
      const match = /^\/v3\/([^/]+)\/?$/.exec(rest);
      if (match) return { kind: 'found', value: { network: route.network, apiKey: safeDecode(match[1]!) } };
      // The prefix matched but the rest is not `/v3/<key>`: a more general route may still match.
    }
    return {
      kind: 'not-found',
      reason: hostMatched
        ? 'not found: expected POST {base_url}/v3/<API_KEY>'
        : `not found: no network is served at host ${hostHeader ?? '(none)'}`,
    };
  }
}
