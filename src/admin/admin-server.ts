import type { IncomingMessage, ServerResponse } from 'node:http';
import { createHash, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { AdminError, type AdminService } from './admin-service.js';
import type { Logger } from '../logging/logger.js';

/**
 * The admin listener's handler: the teams/keys/usage API under `/v1`, plus operational routes
 * added by the composition root (/healthz, /readyz, /metrics, reload). Every route except the
 * health probes needs `Authorization: Bearer <admin.token>`; without it the answer is 401 and
 * says nothing about what exists. Documented in docs/admin-api.md.
 */

export interface AdminRoute {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH';
  /** Path pattern; `:name` segments become params. */
  path: string;
  /** Routes that health probes call without a token. */
  public?: boolean;
  handle(request: { params: Record<string, string>; query: URLSearchParams; body: unknown }): Promise<AdminResponse> | AdminResponse;
}

export interface AdminResponse {
  status?: number;
  /** JSON-serialised unless `contentType` is given, then sent as text. */
  body: unknown;
  contentType?: string;
}

const MAX_ADMIN_BODY_BYTES = 64 * 1024;

const count = z.number().int().min(0);
const teamCreate = z.strictObject({ name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/), dailyCredits: count, creditsPerSecond: z.number().int().positive().nullable().optional() });
const teamUpdate = z.strictObject({ dailyCredits: count.optional(), creditsPerSecond: z.number().int().positive().nullable().optional() });
const keyFields = {
  label: z.string().max(200).nullable().optional(),
  dailyCap: count.nullable().optional(),
  allowedNetworks: z.array(z.string().min(1)).nullable().optional(),
  /** ISO-8601 instant or null. */
  expiresAt: z.iso.datetime({ offset: true }).nullable().optional(),
  /** Allowlists, secret and JWT settings; checked field by field by the admin service (docs/keys.md). */
  settings: z.record(z.string(), z.unknown()).optional(),
};
/** Also the team API's key bodies (src/portal), so both accept the same key settings. */
export const keyCreate = z.strictObject(keyFields);
export const keyUpdate = z.strictObject(keyFields);
export const keyRotate = z.strictObject({ gracePeriodSeconds: z.number().int().min(0).max(30 * 86_400).optional() });

export function parse<T>(schema: z.ZodType<T>, body: unknown): T {
  const result = schema.safeParse(body ?? {});
  if (!result.success) {
    throw new AdminError(400, result.error.issues.map((issue) => `${issue.path.join('.') || 'body'}: ${issue.message}`).join('; '));
  }
  return result.data;
}

export function expiresAtMs(value: string | null | undefined): number | null | undefined {
  return value === undefined || value === null ? value : Date.parse(value);
}

export function adminApiRoutes(admin: AdminService, options: { defaultRotationGraceMs: number }): AdminRoute[] {
  return [
    { method: 'GET', path: '/v1/teams', handle: async () => ({ body: { teams: await admin.listTeams() } }) },
    {
      method: 'POST',
      path: '/v1/teams',
      handle: async ({ body }) => ({ status: 201, body: { team: await admin.createTeam(parse(teamCreate, body)) } }),
    },
    { method: 'GET', path: '/v1/teams/:team', handle: async ({ params }) => ({ body: { team: await admin.getTeam(params.team!) } }) },
    {
      method: 'PATCH',
      path: '/v1/teams/:team',
      handle: async ({ params, body }) => ({ body: { team: await admin.updateTeam(params.team!, parse(teamUpdate, body)) } }),
    },
    {
      method: 'POST',
      path: '/v1/teams/:team/keys',
      handle: async ({ params, body }) => {
        const input = parse(keyCreate, body);
        const issued = await admin.issueKey(params.team!, { ...input, expiresAt: expiresAtMs(input.expiresAt) ?? null });
        return { status: 201, body: issued };
      },
    },
    { method: 'GET', path: '/v1/keys', handle: async ({ query }) => ({ body: { keys: await admin.listKeys(query.get('team') ?? undefined) } }) },
    { method: 'GET', path: '/v1/keys/:key', handle: async ({ params }) => ({ body: { key: await admin.getKey(params.key!) } }) },
    {
      method: 'PATCH',
      path: '/v1/keys/:key',
      handle: async ({ params, body }) => {
        const input = parse(keyUpdate, body);
        return { body: await admin.updateKey(params.key!, { ...input, expiresAt: expiresAtMs(input.expiresAt) }) };
      },
    },
    { method: 'POST', path: '/v1/keys/:key/secret', handle: async ({ params }) => ({ body: await admin.issueKeySecret(params.key!) }) },
    {
      method: 'POST',
      path: '/v1/keys/:key/rotate',
      handle: async ({ params, body }) => {
        const input = parse(keyRotate, body);
        const graceMs = input.gracePeriodSeconds === undefined ? options.defaultRotationGraceMs : input.gracePeriodSeconds * 1000;
        return { body: await admin.rotateKey(params.key!, graceMs) };
      },
    },
    { method: 'POST', path: '/v1/keys/:key/revoke', handle: async ({ params }) => ({ body: { key: await admin.revokeKey(params.key!) } }) },
    {
      method: 'GET',
      path: '/v1/usage',
      handle: async ({ query }) => ({ body: await admin.usage(usageQuery(query)) }),
    },
  ];
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** A malformed %-escape in a path segment is the caller's mistake (400), not an uncaught URIError. */
function decodePathSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new AdminError(400, 'malformed percent-encoding in the path');
  }
}

interface CompiledRoute {
  route: AdminRoute;
  pattern: RegExp;
  names: string[];
}

function compile(route: AdminRoute): CompiledRoute {
  const names: string[] = [];
  const source = route.path
    .split('/')
    .map((segment) => {
      if (!segment.startsWith(':')) return segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      names.push(segment.slice(1));
      return '([^/]+)';
    })
    .join('/');
  return { route, pattern: new RegExp(`^${source}$`), names };
}

/** `GET /v1/usage`'s query (admin and team APIs, their CSV forms), as the admin service takes it. */
export function usageQuery(query: URLSearchParams): { team?: string; key?: string; from?: string; to?: string; days?: number } {
  const days = query.get('days');
  if (days !== null && !/^\d+$/.test(days)) throw new AdminError(400, 'days must be a whole number');
  return {
    team: query.get('team') ?? undefined,
    key: query.get('key') ?? undefined,
    from: query.get('from') ?? undefined,
    to: query.get('to') ?? undefined,
    days: days === null ? undefined : Number(days),
  };
}

/** A JSON request body of the admin and team APIs (undefined when empty); a 400 when too large or not JSON. */
export async function readJson(req: IncomingMessage, maxBytes = MAX_ADMIN_BODY_BYTES): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new AdminError(400, 'body too large');
    chunks.push(chunk as Buffer);
  }
  if (size === 0) return undefined;
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new AdminError(400, 'body is not valid JSON');
  }
}

export function createAdminHandler(routes: AdminRoute[], options: { token: string | undefined; logger: Logger }) {
  const compiled = routes.map(compile);
  const tokenDigest = options.token === undefined ? undefined : digest(options.token);

  function authorised(header: string | undefined): boolean {
    if (tokenDigest === undefined || header === undefined) return false;
    const match = /^Bearer\s+(.+)$/i.exec(header);
    return match !== null && timingSafeEqual(digest(match[1]!.trim()), tokenDigest);
  }

  function send(res: ServerResponse, status: number, body: unknown, contentType?: string): void {
    const text = contentType === undefined ? JSON.stringify(body) : String(body);
    res.writeHead(status, { 'content-type': contentType ?? 'application/json', 'content-length': Buffer.byteLength(text), 'cache-control': 'no-store' });
    res.end(text);
  }

  return (req: IncomingMessage, res: ServerResponse): void => {
    const url = new URL(req.url ?? '/', 'http://admin');
    const matches = compiled
      .map((entry) => ({ entry, match: entry.pattern.exec(url.pathname) }))
      .filter((candidate) => candidate.match !== null);
    const isPublic = matches.some(({ entry }) => entry.route.public === true);
    // Nothing about the API's shape is revealed without the token: unknown paths are 401 too.
    if (!isPublic && !authorised(req.headers.authorization)) {
      res.setHeader('www-authenticate', 'Bearer');
      return send(res, 401, { error: { code: 'unauthorized', message: 'a valid admin bearer token is required' } });
    }
    if (matches.length === 0) return send(res, 404, { error: { code: 'not_found', message: `no route ${url.pathname}` } });
    const chosen = matches.find(({ entry }) => entry.route.method === req.method);
    if (chosen === undefined) {
      res.setHeader('allow', matches.map(({ entry }) => entry.route.method).join(', '));
      return send(res, 405, { error: { code: 'method_not_allowed', message: `use ${matches.map(({ entry }) => entry.route.method).join(' or ')}` } });
    }
    void (async () => {
      try {
        const params = Object.fromEntries(chosen.entry.names.map((name, index) => [name, decodePathSegment(chosen.match![index + 1]!)]));
        const body = req.method === 'GET' ? undefined : await readJson(req);
        const response = await chosen.entry.route.handle({ params, query: url.searchParams, body });
        send(res, response.status ?? 200, response.body, response.contentType);
      } catch (error) {
        if (error instanceof AdminError) {
          const code = error.status === 404 ? 'not_found' : error.status === 409 ? 'conflict' : 'bad_request';
          return send(res, error.status, { error: { code, message: error.message } });
        }
        options.logger.error({ err: error, path: url.pathname }, 'admin request failed');
        send(res, 500, { error: { code: 'internal', message: 'internal error' } });
      }
    })();
  };
}
