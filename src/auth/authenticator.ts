import { LRUCache } from 'lru-cache';
import { GatewayError } from '../errors.js';
import type { KeyDirectory, KeyWithTeam } from '../store/index.js';
import { hashSecret } from './api-key.js';
import type { KeyPolicy } from './key-policy.js';

/**
 * Turns the secret from the URL into a key and its team, or a `-32016`/`-32002` error.
 * Lookups, found or not, are remembered for `ttlMs`, so a flood of unknown keys costs one store
 * read per distinct key per TTL instead of one per request. The TTL is therefore the bound on
 * how long a key revoked elsewhere stays usable here; `clear` drops every lookup at once after
 * a local admin change. The cache is keyed by the secret as it came in the URL, so a hit needs
 * no SHA-256 (the secret is in this process's memory for the request anyway; only the store
 * never sees it).
 */

export interface AuthenticatorOptions {
  ttlMs: number;
  maxEntries: number;
  now?: () => number;
  /**
   * Compiles a loaded key's settings into its checks (key-policy.ts), once per store read; a key
   * without settings gets none, so its requests check nothing.
   */
  compilePolicy?: (found: KeyWithTeam) => KeyPolicy | undefined;
}

/** A key and its team as authentication found them, with the key's compiled settings. */
export interface AuthenticatedKey extends KeyWithTeam {
  policy: KeyPolicy | undefined;
}

type CachedLookup = { found: AuthenticatedKey } | { found: null };

export interface Authenticator {
  /**
   * The key and team of a secret; `-32016` if the key is unknown, revoked, expired or rotated
   * out. Answers synchronously from the cache (the common case: no promise on the hot path);
   * returns a promise when the store has to be asked. Errors are thrown either way.
   */
  authenticate(secret: string): AuthenticatedKey | Promise<AuthenticatedKey>;
  /** Drops every cached lookup (after an admin change that this process made). */
  clear(): void;
}

export function createAuthenticator(store: Pick<KeyDirectory, 'findKeyBySecretHash'>, options: AuthenticatorOptions): Authenticator {
  const now = options.now ?? Date.now;
  const cache =
    options.ttlMs > 0
      ? new LRUCache<string, CachedLookup>({
          max: options.maxEntries,
          ttl: options.ttlMs,
          // The TTL runs on the gateway's clock (tests move it instead of sleeping), read on every
          // lookup: by default the cache reuses a reading for 1 ms of real time, so a clock moved
          // less than 1 ms after the last lookup would not be seen.
          perf: { now },
          ttlResolution: 0,
          ttlAutopurge: false,
          // Expired lookups stay (until LRU eviction) as a fallback while the store is unreachable.
          noDeleteOnStaleGet: true,
        })
      : undefined;
  // Concurrent first lookups of one key share one store read.
  const pending = new Map<string, Promise<CachedLookup>>();

  /** The store's answer for a secret the cache does not hold. */
  function lookup(secret: string): Promise<CachedLookup> {
    let inFlight = pending.get(secret);
    if (inFlight === undefined) {
      inFlight = store
        .findKeyBySecretHash(hashSecret(secret))
        .then(
          (found): CachedLookup => {
            const entry: CachedLookup = { found: found === null ? null : { ...found, policy: options.compilePolicy?.(found) } };
            cache?.set(secret, entry);
            return entry;
          },
          (error: unknown): CachedLookup => {
            // Store unreachable: a key seen before keeps its last known state; others get 503.
            const stale = cache?.get(secret, { allowStale: true });
            if (stale !== undefined) return stale;
            throw new GatewayError('TG_ERR_STORE_UNAVAILABLE', undefined, undefined, undefined, error);
          },
        )
        .finally(() => pending.delete(secret));
      pending.set(secret, inFlight);
    }
    return inFlight;
  }

  function check({ found }: CachedLookup): AuthenticatedKey {
    if (found === null) throw new GatewayError('TG_ERR_INVALID_KEY');
    const { key, secretValidUntil } = found;
    // A rotated-out secret works until its grace period ends.
    if (secretValidUntil !== null && secretValidUntil <= now()) throw new GatewayError('TG_ERR_INVALID_KEY');
    if (key.revokedAt !== null && key.revokedAt <= now()) throw new GatewayError('TG_ERR_INVALID_KEY');
    if (key.expiresAt !== null && key.expiresAt <= now()) throw new GatewayError('TG_ERR_INVALID_KEY');
    return found;
  }

  return {
    authenticate(secret) {
      const cached = cache?.get(secret);
      return cached !== undefined ? check(cached) : lookup(secret).then(check);
    },
    clear() {
      cache?.clear();
    },
  };
}

/** `-32002` unless the key's network allow-list (if any) includes the network. */
export function checkNetworkAllowed(auth: KeyWithTeam, networkId: string): void {
  const allowed = auth.key.allowedNetworks;
  if (allowed !== null && !allowed.includes(networkId)) {
    throw new GatewayError('TG_ERR_NETWORK_NOT_ALLOWED', `this API key is not allowed on network ${networkId}`);
  }
}
