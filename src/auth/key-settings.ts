import { createPublicKey, type KeyObject } from 'node:crypto';
import { z } from 'zod';
import { parseRange } from './ip-matcher.js';
import { parseOriginPattern } from './origin-matcher.js';

export { compileIpRanges, isIpRange, type IpMatcher } from './ip-matcher.js';
export { compileOrigins, isOriginPattern, type OriginMatcher } from './origin-matcher.js';

/**
 * Per-key settings (DESIGN §3, docs/keys.md): validation of what an operator submits, and the
 * compiled form a request is checked against. Rules of different types are ANDed, entries of one
 * type ORed; an empty list is no rule. Compiled once per key load, so a request pays only for the
 * rule types its key has, and a key without settings pays nothing.
 */

/**
 * A key's settings as stored: normalised and validated by `applySettingsPatch` below before the
 * store gets them. An empty list means "no rule of this type".
 */
export interface KeySettings {
  /** `https://app.example.com`, `app.example.com` (any scheme), `https://*.example.com` (subdomains). */
  allowedOrigins: string[];
  /** Substrings of the `User-Agent` header. */
  allowedUserAgents: string[];
  /** IPv4 / IPv6 CIDR ranges (a bare address is a /32 or /128). */
  allowedIps: string[];
  /** JSON-RPC method names, or `prefix_*`. */
  allowedMethods: string[];
  /** Lower-case `0x` + 40 hex contract addresses. */
  allowedAddresses: string[];
  /** Every request must carry the key secret (HTTP Basic, empty user). */
  requireSecret: boolean;
  /** Every request must carry a JWT signed by one of `jwtKeys` (`Authorization: Bearer`). */
  requireJwt: boolean;
  /** Up to three public keys that sign this key's JWTs. */
  jwtKeys: JwtPublicKey[];
  /** The `aud` a JWT must carry; null: `aud` is not checked. */
  jwtAudience: string | null;
}

export interface JwtPublicKey {
  /** Matched against the JWT header's `kid`. */
  id: string;
  alg: 'RS256' | 'ES256';
  /** SPKI PEM, or a public JWK: exactly one of the two. */
  pem?: string;
  jwk?: Record<string, unknown>;
}

/** Most entries of one rule type (Infura's bound). */
export const MAX_RULE_ENTRIES = 30;
export const MAX_JWT_KEYS = 3;

/** The rule types a rejection names in `data.rule` and in the metric. */
export type RuleType = 'origin' | 'user_agent' | 'ip' | 'method' | 'address';

/** The methods whose contract address the address rule checks, and where it is in their params. */
export const ADDRESS_METHODS: ReadonlySet<string> = new Set([
  'eth_call',
  'eth_estimateGas',
  'eth_getLogs',
  'eth_getBalance',
  'eth_getCode',
  'eth_getStorageAt',
  'eth_getTransactionCount',
]);

// ---------------------------------------------------------------------------------------------
// Methods and addresses

export interface NameMatcher {
  (name: string): boolean;
}

/** Exact method names, or `prefix_*` for every method starting with `prefix_`. */
export function compileMethods(entries: readonly string[]): NameMatcher {
  const exact = new Set(entries.filter((entry) => !entry.endsWith('*')));
  const prefixes = entries.filter((entry) => entry.endsWith('*')).map((entry) => entry.slice(0, -1));
  if (prefixes.length === 0) return (name) => exact.has(name);
  return (name) => exact.has(name) || prefixes.some((prefix) => name.startsWith(prefix));
}

const ADDRESS = /^0x[0-9a-f]{40}$/;

/**
 * The contract addresses a call targets, lower-case, for the address rule; `undefined` when the
 * method takes none. A call of such a method without a readable address (a contract creation, an
 * `eth_getLogs` over every contract) gives an empty list, which no address rule allows.
 */
export function addressesOf(method: string, params: unknown): string[] | undefined {
  // A `logs` subscription (WebSocket) names its contracts as eth_getLogs does; other types take none.
  if (method === 'eth_subscribe') return Array.isArray(params) && params[0] === 'logs' ? addressesOf('eth_getLogs', [params[1]]) : undefined;
  if (!ADDRESS_METHODS.has(method)) return undefined;
  const first = Array.isArray(params) ? (params[0] as unknown) : undefined;
  let raw: unknown;
  if (method === 'eth_call' || method === 'eth_estimateGas') raw = isObject(first) ? first.to : undefined;
  else if (method === 'eth_getLogs') raw = isObject(first) ? first.address : undefined;
  else raw = first;
  const list = Array.isArray(raw) ? raw : [raw];
  const addresses: string[] = [];
  for (const value of list) {
    if (typeof value !== 'string') return [];
    addresses.push(value.toLowerCase());
  }
  return addresses;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

// ---------------------------------------------------------------------------------------------
// JWT public keys

/**
 * The verification key of a registered public key, and its algorithm: RSA keys sign RS256, P-256
 * EC keys ES256. Throws with a reason a person can act on.
 */
export function jwtKeyObject(key: Pick<JwtPublicKey, 'pem' | 'jwk'>): { keyObject: KeyObject; alg: JwtPublicKey['alg'] } {
  let keyObject: KeyObject;
  if (key.pem !== undefined) {
    if (/PRIVATE KEY/.test(key.pem)) throw new Error('is a private key: register the public key only');
    try {
      keyObject = createPublicKey({ key: key.pem, format: 'pem' });
    } catch {
      throw new Error('is not a PEM public key (-----BEGIN PUBLIC KEY-----)');
    }
  } else if (key.jwk !== undefined) {
    if ('d' in key.jwk) throw new Error('is a private JWK: register the public key only');
    try {
      keyObject = createPublicKey({ key: key.jwk as never, format: 'jwk' });
    } catch {
      throw new Error('is not a public JWK');
    }
  } else {
    throw new Error('needs a pem or a jwk');
  }
  if (keyObject.asymmetricKeyType === 'rsa') {
    if ((keyObject.asymmetricKeyDetails?.modulusLength ?? 0) < 2048) throw new Error('is an RSA key shorter than 2048 bits');
    return { keyObject, alg: 'RS256' };
  }
  if (keyObject.asymmetricKeyType === 'ec' && keyObject.asymmetricKeyDetails?.namedCurve === 'prime256v1') return { keyObject, alg: 'ES256' };
  throw new Error('must be an RSA (RS256) or P-256 EC (ES256) public key');
}

// ---------------------------------------------------------------------------------------------
// Validation of what an operator submits

const ruleList = (what: string, check: (entry: string) => string | undefined) =>
  z
    .array(z.string().max(512))
    .max(MAX_RULE_ENTRIES, `at most ${MAX_RULE_ENTRIES} entries`)
    .superRefine((entries, ctx) => {
      entries.forEach((entry, index) => {
        const problem = check(entry);
        if (problem !== undefined) ctx.addIssue({ code: 'custom', path: [index], message: `${JSON.stringify(entry)} is not ${what}${problem === '' ? '' : `: ${problem}`}` });
      });
    });

const jwtKeyInput = z
  .strictObject({
    id: z.string().regex(/^[A-Za-z0-9._:-]{1,128}$/, 'an id of letters, digits and ._:- (at most 128)'),
    pem: z.string().max(16_384).optional(),
    jwk: z.record(z.string(), z.unknown()).optional(),
  })
  .superRefine((key, ctx) => {
    if ((key.pem === undefined) === (key.jwk === undefined)) return void ctx.addIssue({ code: 'custom', message: 'give exactly one of pem or jwk' });
    try {
      jwtKeyObject(key);
    } catch (error) {
      ctx.addIssue({ code: 'custom', path: [key.pem !== undefined ? 'pem' : 'jwk'], message: (error as Error).message });
    }
  });

/** What `PATCH /v1/keys/:key` and `tollgate keys update` accept under `settings`; every field optional. */
export const keySettingsPatchSchema = z.strictObject({
  allowedOrigins: ruleList('an origin pattern (https://app.example.com, app.example.com, https://*.example.com)', (entry) =>
    parseOriginPattern(entry) === undefined ? '' : undefined,
  ).optional(),
  allowedUserAgents: ruleList('a user agent substring', (entry) => (entry.trim() === '' ? 'empty' : undefined)).optional(),
  allowedIps: ruleList('an IPv4 or IPv6 CIDR range (203.0.113.0/24, 2001:db8::/32)', (entry) => (parseRange(entry) === undefined ? '' : undefined)).optional(),
  allowedMethods: ruleList('a method name or prefix_*', (entry) => (/^[A-Za-z][A-Za-z0-9_]*\*?$/.test(entry) ? undefined : '')).optional(),
  allowedAddresses: ruleList('a contract address (0x + 40 hex digits)', (entry) => (ADDRESS.test(entry.toLowerCase()) ? undefined : '')).optional(),
  requireSecret: z.boolean().optional(),
  requireJwt: z.boolean().optional(),
  jwtKeys: z
    .array(jwtKeyInput)
    .max(MAX_JWT_KEYS, `at most ${MAX_JWT_KEYS} keys`)
    .superRefine((keys, ctx) => {
      const ids = keys.map((key) => key.id);
      ids.forEach((id, index) => ids.indexOf(id) !== index && ctx.addIssue({ code: 'custom', path: [index, 'id'], message: `duplicate key id "${id}"` }));
    })
    .optional(),
  jwtAudience: z.string().min(1).max(512).nullable().optional(),
});

export type KeySettingsPatch = z.input<typeof keySettingsPatchSchema>;

export const EMPTY_SETTINGS: KeySettings = Object.freeze({
  allowedOrigins: [],
  allowedUserAgents: [],
  allowedIps: [],
  allowedMethods: [],
  allowedAddresses: [],
  requireSecret: false,
  requireJwt: false,
  jwtKeys: [],
  jwtAudience: null,
}) as KeySettings;

/** Thrown for settings that fail validation; the message names each field (`settings.allowedIps.2: …`). */
export class KeySettingsError extends Error {
  override name = 'KeySettingsError';
}

/**
 * Applies a patch to a key's current settings: each given field replaces that field. The result
 * is normalised (origins and addresses lower-case, duplicates dropped); null when nothing is set.
 */
export function applySettingsPatch(current: KeySettings | null, input: unknown): KeySettings | null {
  const parsed = keySettingsPatchSchema.safeParse(input ?? {});
  if (!parsed.success) {
    throw new KeySettingsError(parsed.error.issues.map((issue) => `${['settings', ...issue.path].join('.')}: ${issue.message}`).join('; '));
  }
  const patch = parsed.data;
  const unique = (entries: string[]) => [...new Set(entries)];
  const next: KeySettings = { ...(current ?? EMPTY_SETTINGS) };
  if (patch.allowedOrigins !== undefined) next.allowedOrigins = unique(patch.allowedOrigins.map((entry) => entry.trim().toLowerCase()));
  if (patch.allowedUserAgents !== undefined) next.allowedUserAgents = unique(patch.allowedUserAgents);
  if (patch.allowedIps !== undefined) next.allowedIps = unique(patch.allowedIps.map((entry) => entry.trim()));
  if (patch.allowedMethods !== undefined) next.allowedMethods = unique(patch.allowedMethods);
  if (patch.allowedAddresses !== undefined) next.allowedAddresses = unique(patch.allowedAddresses.map((entry) => entry.toLowerCase()));
  if (patch.requireSecret !== undefined) next.requireSecret = patch.requireSecret;
  if (patch.requireJwt !== undefined) next.requireJwt = patch.requireJwt;
  if (patch.jwtKeys !== undefined) {
    next.jwtKeys = patch.jwtKeys.map((key) => ({ id: key.id, alg: jwtKeyObject(key).alg, ...(key.pem !== undefined ? { pem: key.pem } : { jwk: key.jwk }) }));
  }
  if (patch.jwtAudience !== undefined) next.jwtAudience = patch.jwtAudience;
  if (next.requireJwt && next.jwtKeys.length === 0) throw new KeySettingsError('settings.requireJwt: register at least one key in settings.jwtKeys first');
  return isEmpty(next) ? null : next;
}

function isEmpty(settings: KeySettings): boolean {
  return (
    settings.allowedOrigins.length === 0 &&
    settings.allowedUserAgents.length === 0 &&
    settings.allowedIps.length === 0 &&
    settings.allowedMethods.length === 0 &&
    settings.allowedAddresses.length === 0 &&
    !settings.requireSecret &&
    !settings.requireJwt &&
    settings.jwtKeys.length === 0 &&
    settings.jwtAudience === null
  );
}
