import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Webhook signatures, Stripe's scheme: `Tollgate-Signature: t=<unix seconds>,v1=<hex>` where v1 is
 * HMAC-SHA256(secret, `${t}.${body}`). The timestamp is signed so a captured delivery cannot be
 * replayed later; receivers reject signatures older than a tolerance (docs/webhooks.md).
 */

export const SIGNATURE_HEADER = 'tollgate-signature';

export function signatureOf(secret: string, timestampSeconds: number, body: string): string {
  return createHmac('sha256', secret).update(`${timestampSeconds}.${body}`).digest('hex');
}

export function signatureHeader(secret: string, timestampSeconds: number, body: string): string {
  return `t=${timestampSeconds},v1=${signatureOf(secret, timestampSeconds, body)}`;
}

/** Checks a header against a body, as a receiver does; false if malformed, wrong or older than `toleranceSeconds`. */
export function verifySignature(header: string, body: string, secret: string, options: { nowSeconds: number; toleranceSeconds: number }): boolean {
  const parts = new Map<string, string[]>();
  for (const item of header.split(',')) {
    const at = item.indexOf('=');
    if (at <= 0) continue;
    const name = item.slice(0, at).trim();
    parts.set(name, [...(parts.get(name) ?? []), item.slice(at + 1).trim()]);
  }
  const t = Number(parts.get('t')?.[0]);
  if (!Number.isInteger(t) || Math.abs(options.nowSeconds - t) > options.toleranceSeconds) return false;
  const expected = Buffer.from(signatureOf(secret, t, body), 'hex');
  return (parts.get('v1') ?? []).some((candidate) => {
    const given = Buffer.from(candidate, 'hex');
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}
