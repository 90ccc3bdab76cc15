import { hash, randomBytes } from 'node:crypto';

/**
 * API key secrets: `tg_` + 32 URL-safe characters (192 random bits). Only the SHA-256 of a
 * secret is stored; a fast hash is right here because the secret is random, not a password.
 */
const SECRET_PREFIX = 'tg_';

export function generateSecret(): string {
  return `${SECRET_PREFIX}${randomBytes(24).toString('base64url')}`;
}

/**
 * Key secrets (HTTP Basic, docs/keys.md): `tgs_` + 32 URL-safe characters, a second credential of
 * a key for server-side use, stored only as its SHA-256 like the key itself.
 */
export function generateKeySecret(): string {
  return `tgs_${randomBytes(24).toString('base64url')}`;
}

export function hashSecret(secret: string): string {
  // One-shot `hash` (Node ≥ 20.12): about half the cost of a Hash object, once per request.
  return hash('sha256', secret, 'hex');
}
