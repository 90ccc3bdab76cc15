import { hash, randomBytes } from 'node:crypto';

/**
 * API key secrets: `tg_` + 32 URL-safe characters (192 random bits). Only the SHA-256 of a
 * secret is stored; a fast hash is right here because the secret is random, not a password.
 */
const SECRET_PREFIX = 'tg_';

export function generateSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(24).toString('base64url')}`;
}

export function hashSecret(secret: string): string {
  // One-shot `hash` (Node ≥ 20.12): about half the cost of a Hash object, once per request.
  return hash('sha256', secret, 'hex');
}
