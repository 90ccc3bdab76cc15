import { randomBytes } from 'node:crypto';
import { hashSecret } from '../auth/api-key.js';
import type { KeyDirectory, Team, TeamToken, TeamTokens } from '../store/index.js';

/**
 * Team tokens (docs/portal.md): `tgt_` + 43 URL-safe characters (256 random bits), shown once when
 * issued; only their SHA-256 is stored, as for API keys. A token acts for its team only.
 */

const TOKEN_PREFIX = 'tgt_';

export function generateTeamToken(): string {
  return `${TOKEN_PREFIX}${randomBytes(32).toString('base64url')}`;
}

export async function issueTeamToken(store: Pick<TeamTokens, 'createTeamToken'>, teamId: string, label: string | null): Promise<{ token: TeamToken; secret: string }> {
  const secret = generateTeamToken();
  return { token: await store.createTeamToken({ teamId, tokenHash: hashSecret(secret), label }), secret };
}

/** The team a token acts for, or null if the token is unknown, revoked or its team gone. */
export async function teamOfToken(store: Pick<TeamTokens, 'findTeamTokenByHash'> & Pick<KeyDirectory, 'findTeam'>, secret: string): Promise<{ token: TeamToken; team: Team } | null> {
  if (!secret.startsWith(TOKEN_PREFIX) || secret.length > 100) return null;
  const token = await store.findTeamTokenByHash(hashSecret(secret));
  if (token === null || token.revokedAt !== null) return null;
  const team = await store.findTeam(token.teamId);
  return team === null || team.id !== token.teamId ? null : { token, team };
}
