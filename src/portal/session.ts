import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * Portal sign-in sessions, kept in the browser: an HMAC-signed cookie value naming the team token
 * and its expiry, so any replica that shares `portal.sessionSecret` can read it and no session
 * table is needed. Each request still checks that the token is not revoked (revoking a team
 * token ends its sessions). The CSRF token is derived from the session, so it needs no storage
 * either; the page sends it in `X-CSRF-Token` with every write.
 */

export interface Session {
  tokenId: string;
  teamId: string;
  /** Epoch ms. */
  expiresAt: number;
  csrfToken: string;
}

export interface Sessions {
  issue(tokenId: string, teamId: string): { cookie: string; session: Session };
  /** The session of a cookie value, or null if forged, malformed or expired. */
  read(cookie: string): Session | null;
  /** Constant-time check of a request's CSRF header. */
  checkCsrf(session: Session, header: string | undefined): boolean;
}

export function createSessions(options: { secret?: string; ttlMs: number; now: () => number }): Sessions {
  const secret = options.secret ?? randomBytes(32).toString('hex');
  const mac = (text: string) => createHmac('sha256', secret).update(text).digest('base64url');
  const csrfOf = (payload: string) => mac(`csrf.${payload}`);

  return {
    issue(tokenId, teamId) {
      const expiresAt = options.now() + options.ttlMs;
      const payload = Buffer.from(JSON.stringify({ k: tokenId, t: teamId, e: expiresAt })).toString('base64url');
      return { cookie: `${payload}.${mac(`session.${payload}`)}`, session: { tokenId, teamId, expiresAt, csrfToken: csrfOf(payload) } };
    },
    read(cookie) {
      const [payload, signature, extra] = cookie.split('.');
      if (payload === undefined || signature === undefined || extra !== undefined) return null;
      const expected = Buffer.from(mac(`session.${payload}`));
      const given = Buffer.from(signature);
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
      try {
        const { k, t, e } = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { k: unknown; t: unknown; e: unknown };
        if (typeof k !== 'string' || typeof t !== 'string' || typeof e !== 'number' || e <= options.now()) return null;
        return { tokenId: k, teamId: t, expiresAt: e, csrfToken: csrfOf(payload) };
      } catch {
        return null;
      }
    },
    checkCsrf(session, header) {
      if (header === undefined) return false;
      const expected = Buffer.from(session.csrfToken);
      const given = Buffer.from(header);
      return given.length === expected.length && timingSafeEqual(given, expected);
    },
  };
}
