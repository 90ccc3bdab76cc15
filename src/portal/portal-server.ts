import type { IncomingMessage, ServerResponse } from 'node:http';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AdminError, type AdminService } from '../admin/admin-service.js';
import { expiresAtMs, keyCreate, keyRotate, keyUpdate, parse, readJson, usageQuery } from '../admin/admin-server.js';
import type { Logger } from '../logging/logger.js';
import type { Store } from '../store/index.js';
import { createSessions, type Session } from './session.js';
import { createTeamService, type TeamService } from './team-service.js';
import { teamOfToken } from './team-token.js';
import { usageCsv } from './usage-csv.js';

/**
 * The `portal` listener (docs/portal.md): the team self-service page, its static assets (shipped
 * in the package: `assets/portal/` and Chart.js from node_modules, nothing from a CDN), sign-in
 * sessions, and the team API under `/v1`. The API takes `Authorization: Bearer <team token>`
 * (scripts) or the session cookie (the page); with the cookie, every write must carry the
 * session's `X-CSRF-Token`, a JSON body, and no foreign `Origin`.
 */

export interface PortalOptions {
  store: Store;
  admin: AdminService;
  now: () => number;
  sessionTtlMs: number;
  sessionSecret?: string;
  secureCookies: boolean;
  defaultRotationGraceMs: number;
  logger: Logger;
}

interface TeamRequest {
  params: Record<string, string>;
  query: URLSearchParams;
  body: unknown;
  team: TeamService;
}

interface TeamRoute {
  method: 'GET' | 'POST' | 'PATCH';
  pattern: RegExp;
  handle(request: TeamRequest): Promise<{ status?: number; body: unknown; contentType?: string; filename?: string }>;
}

const COOKIE = 'tollgate_session';
const MAX_BODY_BYTES = 64 * 1024;
const ASSETS_DIR = fileURLToPath(new URL('../../assets/portal/', import.meta.url));

const CONTENT_SECURITY_POLICY =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

function loadAssets(): Map<string, { type: string; body: Buffer }> {
  const chartJs = join(dirname(createRequire(import.meta.url).resolve('chart.js')), 'chart.umd.min.js');
  const icon = { type: 'image/svg+xml', body: readFileSync(join(ASSETS_DIR, 'favicon.svg')) };
  return new Map([
    ['/', { type: 'text/html; charset=utf-8', body: readFileSync(join(ASSETS_DIR, 'index.html')) }],
    ['/assets/portal.js', { type: 'text/javascript; charset=utf-8', body: readFileSync(join(ASSETS_DIR, 'portal.js')) }],
    ['/assets/portal.css', { type: 'text/css; charset=utf-8', body: readFileSync(join(ASSETS_DIR, 'portal.css')) }],
    ['/assets/chart.umd.min.js', { type: 'text/javascript; charset=utf-8', body: readFileSync(chartJs) }],
    // The page's icon (linked from it), and at the path browsers and tools ask for by default.
    ['/favicon.svg', icon],
    ['/favicon.ico', icon],
  ]);
}

/** A team reads its own usage only: a `team` parameter is not the team's to choose, and is ignored. */
function ownUsageQuery(query: URLSearchParams): Omit<ReturnType<typeof usageQuery>, 'team'> {
  const { team: _notTheirs, ...own } = usageQuery(query);
  return own;
}

function teamRoutes(options: { defaultRotationGraceMs: number }): TeamRoute[] {
  const route = (method: TeamRoute['method'], path: string, handle: TeamRoute['handle']): TeamRoute => ({
    method,
    pattern: new RegExp(`^${path.replace(/\./g, '\\.').replace(/:(\w+)/g, '(?<$1>[^/]+)')}$`),
    handle,
  });
  return [
    route('GET', '/v1/team', async ({ team }) => ({ body: await team.overview() })),
    route('GET', '/v1/keys', async ({ team }) => ({ body: { keys: await team.listKeys() } })),
    route('POST', '/v1/keys', async ({ team, body }) => {
      const input = parse(keyCreate, body);
      return { status: 201, body: await team.createKey({ ...input, expiresAt: expiresAtMs(input.expiresAt) ?? null }) };
    }),
    route('GET', '/v1/keys/:key', async ({ team, params }) => ({ body: { key: await team.getKey(params.key!) } })),
    route('PATCH', '/v1/keys/:key', async ({ team, params, body }) => {
      const input = parse(keyUpdate, body);
      return { body: await team.updateKey(params.key!, { ...input, expiresAt: expiresAtMs(input.expiresAt) }) };
    }),
    route('POST', '/v1/keys/:key/rotate', async ({ team, params, body }) => {
      const input = parse(keyRotate, body);
      const graceMs = input.gracePeriodSeconds === undefined ? options.defaultRotationGraceMs : input.gracePeriodSeconds * 1000;
      return { body: await team.rotateKey(params.key!, graceMs) };
    }),
    route('POST', '/v1/keys/:key/revoke', async ({ team, params }) => ({ body: { key: await team.revokeKey(params.key!) } })),
    route('GET', '/v1/usage', async ({ team, query }) => ({ body: await team.usage(ownUsageQuery(query)) })),
    route('GET', '/v1/usage.csv', async ({ team, query }) => {
      const report = await team.usage(ownUsageQuery(query));
      return { body: usageCsv(report.rows), contentType: 'text/csv; charset=utf-8', filename: `usage-${report.from}-${report.to}.csv` };
    }),
    route('GET', '/v1/usage/hourly', async ({ team, query }) => ({ body: await team.hourlyUsage(query.get('day') ?? undefined) })),
    route('GET', '/v1/requests', async ({ team, query }) => ({ body: await team.requests(query) })),
    // The admin API's path too, for the token's own team; any other team is a team that does not exist.
    route('GET', '/v1/teams/:team/requests', async ({ team, params, query }) => ({ body: await team.requests(query, params.team!) })),
  ];
}

function cookieOf(req: IncomingMessage, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const at = part.indexOf('=');
    if (at > 0 && part.slice(0, at).trim() === name) return part.slice(at + 1).trim();
  }
  return undefined;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export function createPortalHandler(options: PortalOptions) {
  const { store, admin, now, logger } = options;
  const assets = loadAssets();
  const routes = teamRoutes(options);
  const sessions = createSessions({ secret: options.sessionSecret, ttlMs: options.sessionTtlMs, now });

  function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string | string[]> = {}): void {
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    res.writeHead(status, {
      'content-type': 'application/json',
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      ...headers,
      'content-length': Buffer.byteLength(text),
    });
    res.end(text);
  }

  function sessionCookie(value: string, maxAgeSeconds: number): string {
    return `${COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${options.secureCookies ? '; Secure' : ''}`;
  }

  /** A browser's `Origin`, when sent, must be the portal's own (no other site may sign in or write). */
  function checkOrigin(req: IncomingMessage): void {
    const origin = req.headers.origin;
    if (origin === undefined) return;
    let host: string | undefined;
    try {
      host = new URL(origin).host;
    } catch {
      host = undefined;
    }
    if (host === undefined || host === '' || host !== req.headers.host) throw new HttpError(403, 'forbidden', 'cross-origin request refused');
  }

  /** A write sent with the cookie must come from the page: same origin, JSON, the session's CSRF token. */
  function checkWrite(req: IncomingMessage, session: Session): void {
    checkOrigin(req);
    if (!/^application\/json\b/i.test(req.headers['content-type'] ?? '') && req.method !== 'DELETE') {
      throw new HttpError(415, 'unsupported_media_type', 'send JSON (content-type: application/json)');
    }
    const csrf = req.headers['x-csrf-token'];
    if (!sessions.checkCsrf(session, typeof csrf === 'string' ? csrf : undefined)) throw new HttpError(403, 'forbidden', 'missing or wrong X-CSRF-Token');
  }

  /** The session of the cookie, if its token is still valid. */
  async function currentSession(req: IncomingMessage): Promise<Session | null> {
    const value = cookieOf(req, COOKIE);
    const session = value === undefined ? null : sessions.read(value);
    if (session === null) return null;
    const token = (await store.listTeamTokens({ teamId: session.teamId })).find((candidate) => candidate.id === session.tokenId);
    return token === undefined || token.revokedAt !== null ? null : session;
  }

  /** The team acting: by bearer team token, or by the session cookie (then writes are CSRF-checked). */
  async function teamOf(req: IncomingMessage): Promise<string> {
    const authorization = req.headers.authorization;
    if (authorization !== undefined) {
      const match = /^Bearer\s+(\S+)$/i.exec(authorization);
      const found = match === null ? null : await teamOfToken(store, match[1]!);
      if (found === null) throw new HttpError(401, 'unauthorized', 'a valid team token is required');
      return found.team.id;
    }
    const session = await currentSession(req);
    if (session === null) throw new HttpError(401, 'unauthorized', 'sign in with a team token');
    if (req.method !== 'GET' && req.method !== 'HEAD') checkWrite(req, session);
    return session.teamId;
  }

  async function handleSession(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method === 'POST') {
      checkOrigin(req);
      const body = (await readJson(req, MAX_BODY_BYTES)) as { token?: unknown } | undefined;
      const found = typeof body?.token === 'string' ? await teamOfToken(store, body.token) : null;
      if (found === null) throw new HttpError(401, 'unauthorized', 'that team token is not valid');
      const { cookie, session } = sessions.issue(found.token.id, found.team.id);
      return send(
        res,
        200,
        { team: { id: found.team.id, name: found.team.name }, csrfToken: session.csrfToken, expiresAt: new Date(session.expiresAt).toISOString() },
        { 'set-cookie': sessionCookie(cookie, Math.floor(options.sessionTtlMs / 1000)) },
      );
    }
    const session = await currentSession(req);
    if (req.method === 'GET') {
      // Asking whether one is signed in is not an error either way: the page asks on every load.
      const team = session === null ? null : await store.findTeam(session.teamId);
      if (session === null || team === null) return send(res, 200, { signedIn: false });
      return send(res, 200, { signedIn: true, team: { id: team.id, name: team.name }, csrfToken: session.csrfToken, expiresAt: new Date(session.expiresAt).toISOString() });
    }
    if (req.method === 'DELETE') {
      if (session !== null) checkWrite(req, session);
      return send(res, 204, '', { 'set-cookie': sessionCookie('', 0) });
    }
    throw new HttpError(405, 'method_not_allowed', 'use GET, POST or DELETE');
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://portal');
    const asset = assets.get(url.pathname === '/index.html' ? '/' : url.pathname);
    if (asset !== undefined && (req.method === 'GET' || req.method === 'HEAD')) {
      res.writeHead(200, {
        'content-type': asset.type,
        'content-length': asset.body.length,
        'cache-control': url.pathname === '/' ? 'no-store' : 'public, max-age=300',
        'content-security-policy': CONTENT_SECURITY_POLICY,
        'x-content-type-options': 'nosniff',
        'x-frame-options': 'DENY',
        'referrer-policy': 'no-referrer',
      });
      res.end(req.method === 'HEAD' ? undefined : asset.body);
      return;
    }
    if (url.pathname === '/session') return handleSession(req, res);
    const candidates = routes.map((route) => ({ route, match: route.pattern.exec(url.pathname) })).filter((candidate) => candidate.match !== null);
    if (candidates.length === 0) throw new HttpError(404, 'not_found', `no route ${url.pathname}`);
    // Authenticate before saying anything more about the route.
    const teamId = await teamOf(req);
    const chosen = candidates.find(({ route }) => route.method === req.method);
    if (chosen === undefined) throw new HttpError(405, 'method_not_allowed', `use ${candidates.map(({ route }) => route.method).join(' or ')}`);
    const params: Record<string, string> = {};
    for (const [name, value] of Object.entries(chosen.match!.groups ?? {})) {
      try {
        params[name] = decodeURIComponent(value);
      } catch {
        throw new AdminError(400, 'malformed percent-encoding in the path');
      }
    }
    const body = req.method === 'GET' ? undefined : await readJson(req, MAX_BODY_BYTES);
    const team = createTeamService(teamId, admin, store, { now });
    const response = await chosen.route.handle({ params, query: url.searchParams, body, team });
    if (response.contentType !== undefined) {
      return send(res, response.status ?? 200, response.body as string, {
        'content-type': response.contentType,
        ...(response.filename !== undefined ? { 'content-disposition': `attachment; filename="${response.filename}"` } : {}),
      });
    }
    send(res, response.status ?? 200, response.body);
  }

  return (req: IncomingMessage, res: ServerResponse): void => {
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) return void res.destroy();
      if (error instanceof HttpError) {
        return send(res, error.status, { error: { code: error.code, message: error.message } }, error.status === 401 ? { 'www-authenticate': 'Bearer' } : {});
      }
      if (error instanceof AdminError) {
        const code = error.status === 404 ? 'not_found' : error.status === 409 ? 'conflict' : 'bad_request';
        return send(res, error.status, { error: { code, message: error.message } });
      }
      logger.error({ err: error, path: req.url?.split('?')[0] }, 'portal request failed');
      send(res, 500, { error: { code: 'internal', message: 'internal error' } });
    });
  };
}
