import { timingSafeEqual } from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { errors as joseErrors, jwtVerify, type JWTPayload, type JWTHeaderParameters } from 'jose';
import { LRUCache } from 'lru-cache';
import { GatewayError } from '../errors.js';
import { hashSecret } from './api-key.js';
import { addressesOf, compileIpRanges, compileMethods, compileOrigins, jwtKeyObject, type KeySettings, type NameMatcher, type OriginMatcher, type RuleType } from './key-settings.js';

/**
 * A key's settings compiled into the checks a request goes through (docs/keys.md), built once
 * when the key is loaded. Stages, in order:
 *   credentials: the key secret (HTTP Basic, empty user) admits the request past every rule;
 *                a JWT (Bearer) is verified and its claims narrow the lists
 *   request rules: origin, user agent, IP (403 for the whole request, batch or not)
 *   item rules:    method, contract address (403 for a single call, per item in a batch)
 */

/** What the request rules look at; the client address is computed only for keys with an IP rule. */
export interface RequestFacts {
  origin: string | undefined;
  userAgent: string | undefined;
  authorization: string | undefined;
  clientAddress: () => string | undefined;
}

/** The per-call rules of an admitted request: the rule type a call breaks, or undefined. */
export interface ItemRules {
  check(method: string, params: unknown): RuleType | undefined;
}

export interface Admission {
  /** The key secret came with the request: no rule applies. */
  secret: boolean;
  /** Method and address rules for each call; undefined when there are none. */
  items: ItemRules | undefined;
}

export interface KeyPolicy {
  /** False when the key has an origin list that does not allow this origin (its answers are not readable there). */
  allowsOrigin(origin: string): boolean;
  /** Checks credentials and request rules; throws the 401/403 GatewayError of a refusal. */
  admit(facts: RequestFacts): Admission | Promise<Admission>;
}

/** The `data.reason` values of `-32016 invalid JWT` (docs/keys.md). */
export type JwtFailure = 'missing' | 'malformed' | 'bad_signature' | 'unknown_kid' | 'expired' | 'not_yet_valid' | 'wrong_audience';

export function rejected(rule: RuleType): GatewayError {
  return new GatewayError('TG_ERR_KEY_SETTINGS', undefined, { rule });
}

function invalidJwt(reason: JwtFailure): GatewayError {
  return new GatewayError('TG_ERR_INVALID_JWT', undefined, { reason });
}

/** Verified JWTs, shared by every key: a token seen before costs a map lookup until its `exp`. */
export interface JwtCache {
  get(token: string): VerifiedToken | undefined;
  set(token: string, verified: VerifiedToken): void;
}

interface VerifiedToken {
  /** The policy that verified it: a token is only good for the key (and key version) it was checked against. */
  policy: KeyPolicy;
  expiresAtMs: number;
  origins: OriginMatcher | undefined;
  items: ItemRules | undefined;
}

export function createJwtCache(maxEntries: number): JwtCache {
  const cache = new LRUCache<string, VerifiedToken>({ max: maxEntries });
  return { get: (token) => cache.get(token), set: (token, verified) => void cache.set(token, verified) };
}

export interface KeyPolicyOptions {
  jwtCache: JwtCache;
  now: () => number;
}

/** Strings in a claim, or undefined when absent; anything else makes the token malformed. */
function stringsClaim(payload: JWTPayload, name: string): string[] | undefined {
  const value = payload[name];
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || !value.every((entry) => typeof entry === 'string')) throw invalidJwt('malformed');
  return value as string[];
}

function itemRules(methods: NameMatcher[], addresses: Array<ReadonlySet<string>>): ItemRules | undefined {
  if (methods.length === 0 && addresses.length === 0) return undefined;
  return {
    check(method, params) {
      for (const allowed of methods) if (!allowed(method)) return 'method';
      if (addresses.length > 0) {
        const targets = addressesOf(method, params);
        if (targets !== undefined) {
          if (targets.length === 0) return 'address';
          for (const allowed of addresses) for (const target of targets) if (!allowed.has(target)) return 'address';
        }
      }
      return undefined;
    },
  };
}

const BEARER = /^Bearer +([A-Za-z0-9._~+/=-]+)$/i;
const BASIC = /^Basic +([A-Za-z0-9+/=]+)$/i;

/** The key's policy, or undefined for a key without settings or secret (nothing to check). */
export function compileKeyPolicy(settings: KeySettings | null, keySecretHash: string | null, options: KeyPolicyOptions): KeyPolicy | undefined {
  if (settings === null && keySecretHash === null) return undefined;
  const s: KeySettings = settings ?? { allowedOrigins: [], allowedUserAgents: [], allowedIps: [], allowedMethods: [], allowedAddresses: [], requireSecret: false, requireJwt: false, jwtKeys: [], jwtAudience: null };
  const { jwtCache, now } = options;

  const origins = s.allowedOrigins.length > 0 ? compileOrigins(s.allowedOrigins) : undefined;
  const userAgents = s.allowedUserAgents.length > 0 ? s.allowedUserAgents.map((entry) => entry.toLowerCase()) : undefined;
  const ips = s.allowedIps.length > 0 ? compileIpRanges(s.allowedIps) : undefined;
  const keyMethods = s.allowedMethods.length > 0 ? compileMethods(s.allowedMethods) : undefined;
  const keyAddresses = s.allowedAddresses.length > 0 ? new Set(s.allowedAddresses) : undefined;
  const baseItems = itemRules(keyMethods ? [keyMethods] : [], keyAddresses ? [keyAddresses] : []);
  /** The common answer (no secret, no token), made once rather than per request. */
  const baseAdmission: Admission = Object.freeze({ secret: false, items: baseItems });
  const secretDigest = keySecretHash === null ? undefined : Buffer.from(keySecretHash, 'hex');
  const jwtKeys = new Map<string, { keyObject: KeyObject; alg: string }>();
  for (const key of s.jwtKeys) {
    try {
      jwtKeys.set(key.id, jwtKeyObject(key));
    } catch {
      // Validated when stored; a key that no longer loads verifies nothing.
    }
  }
  const algorithms = [...new Set([...jwtKeys.values()].map((key) => key.alg))];

  function secretMatches(header: string): boolean {
    const match = BASIC.exec(header);
    if (match === null || secretDigest === undefined) return false;
    const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return false;
    const digest = Buffer.from(hashSecret(decoded.slice(colon + 1)), 'hex');
    return digest.length === secretDigest.length && timingSafeEqual(digest, secretDigest);
  }

  /** Request rules (origin, user agent, IP), with a JWT's `origins` claim narrowing the origin rule. */
  function checkRequest(facts: RequestFacts, claimOrigins: OriginMatcher | undefined): void {
    if (origins !== undefined || claimOrigins !== undefined) {
      const origin = facts.origin;
      if (origin === undefined) throw rejected('origin');
      if (origins !== undefined && !origins(origin)) throw rejected('origin');
      if (claimOrigins !== undefined && !claimOrigins(origin)) throw rejected('origin');
    }
    if (userAgents !== undefined) {
      const agent = facts.userAgent?.toLowerCase();
      if (agent === undefined || !userAgents.some((entry) => agent.includes(entry))) throw rejected('user_agent');
    }
    if (ips !== undefined) {
      const address = facts.clientAddress();
      if (address === undefined || !ips(address)) throw rejected('ip');
    }
  }

  async function verify(token: string): Promise<VerifiedToken> {
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(
        token,
        (header: JWTHeaderParameters) => {
          const key = header.kid === undefined ? (jwtKeys.size === 1 ? [...jwtKeys.values()][0] : undefined) : jwtKeys.get(header.kid);
          if (key === undefined) throw invalidJwt('unknown_kid');
          if (header.alg !== key.alg) throw invalidJwt('malformed');
          return key.keyObject;
        },
        {
          algorithms,
          currentDate: new Date(now()),
          requiredClaims: ['exp'],
          ...(s.jwtAudience !== null ? { audience: s.jwtAudience } : {}),
        },
      ));
    } catch (error) {
      throw error instanceof GatewayError ? error : invalidJwt(jwtFailureOf(error));
    }
    const claimMethods = stringsClaim(payload, 'methods');
    const claimAddresses = stringsClaim(payload, 'addresses');
    const claimOrigins = stringsClaim(payload, 'origins');
    const methods = [keyMethods, claimMethods && compileMethods(claimMethods)].filter((matcher): matcher is NameMatcher => matcher !== undefined);
    const addresses = [keyAddresses, claimAddresses && new Set(claimAddresses.map((entry) => entry.toLowerCase()))].filter(
      (set): set is Set<string> => set !== undefined,
    );
    return {
      policy,
      expiresAtMs: payload.exp! * 1000,
      origins: claimOrigins && compileOrigins(claimOrigins.filter((entry) => entry !== '*')),
      items: claimMethods === undefined && claimAddresses === undefined ? baseItems : itemRules(methods, addresses),
    };
  }

  function admitWithJwt(facts: RequestFacts, token: string): Admission | Promise<Admission> {
    const cached = jwtCache.get(token);
    if (cached !== undefined && cached.policy === policy) {
      if (cached.expiresAtMs <= now()) throw invalidJwt('expired');
      checkRequest(facts, cached.origins);
      return { secret: false, items: cached.items };
    }
    return verify(token).then((verified) => {
      jwtCache.set(token, verified);
      checkRequest(facts, verified.origins);
      return { secret: false, items: verified.items };
    });
  }

  const policy: KeyPolicy = {
    allowsOrigin: (origin) => origins === undefined || origins(origin),
    admit(facts) {
      const authorization = facts.authorization;
      if (authorization !== undefined && authorization.length >= 6 && authorization.slice(0, 6).toLowerCase() === 'basic ') {
        // Whatever else the key requires, its secret admits the request (server-side use).
        if (!secretMatches(authorization)) throw new GatewayError('TG_ERR_INVALID_KEY_SECRET');
        return { secret: true, items: undefined };
      }
      if (s.requireSecret) throw new GatewayError('TG_ERR_INVALID_KEY_SECRET');
      if (jwtKeys.size > 0 && authorization !== undefined && authorization.slice(0, 6).toLowerCase() === 'bearer') {
        const match = BEARER.exec(authorization);
        if (match === null) throw invalidJwt('malformed');
        return admitWithJwt(facts, match[1]!);
      }
      if (s.requireJwt) throw invalidJwt('missing');
      checkRequest(facts, undefined);
      return baseAdmission;
    },
  };
  return policy;
}

function jwtFailureOf(error: unknown): JwtFailure {
  if (error instanceof joseErrors.JWTExpired) return 'expired';
  if (error instanceof joseErrors.JWSSignatureVerificationFailed) return 'bad_signature';
  if (error instanceof joseErrors.JWTClaimValidationFailed) {
    if (error.claim === 'aud') return 'wrong_audience';
    if (error.claim === 'nbf') return 'not_yet_valid';
    if (error.claim === 'iat' && error.reason === 'check_failed') return 'not_yet_valid';
  }
  return 'malformed';
}
