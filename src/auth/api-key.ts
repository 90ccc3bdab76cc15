import { createHash, randomBytes } from 'node:crypto';

/**
 * API key secrets: `tg_` + 32 URL-safe characters (192 random bits). Only the SHA-256 of a
 * secret is stored; a fast hash is right here because the secret is random, not a password.
 */
const SECRET_PREFIX = 'tg_';

export function generateSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(24).toString('base64url')}`;
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}
