import { GatewayError } from '../errors.js';
import { checkNetworkAllowed, type AuthenticatedKey, type Authenticator } from '../auth/authenticator.js';
import { rejected, type ItemRules, type RequestFacts } from '../auth/key-policy.js';
import { compileIpRanges, type OriginMatcher } from '../auth/key-settings.js';
import { clientAddressOf } from '../auth/client-address.js';

/**
 * Who may call, decided once for both transports: an HTTP request, a WebSocket upgrade, every
 * message on that connection and its periodic re-check all go through {@link Admitter.admit}, so a
 * revoked key, a network outside the key's list, an origin the gateway does not serve or a key
 * setting (secret / JWT, origin, user agent, IP) refuses them in the same order, with the same
 * error. The transports only differ in how they answer a refusal (a status and body, a refused
 * upgrade, a closing frame).
 */

/** Why a caller was refused: the error to answer with, and the key when it was known by then. */
export interface Refusal {
  kind: 'refused';
  error: GatewayError;
  /** The key, once authenticated: a refusal after that carries the team's credit headers. */
  auth: AuthenticatedKey | undefined;
  /** The key-settings rule type that refused (for the metric), when a rule did. */
  rule: string | undefined;
  /** Refused by the key's own settings (its origin list then also decides whether the page may read the refusal). */
  bySettings: boolean;
}

export interface Admitted {
  kind: 'admitted';
  auth: AuthenticatedKey;
  /** The key's method and address rules, checked per call; undefined when it has none. */
  rules: ItemRules | undefined;
  /** The key secret came with the call: no rule applies, its origin list included. */
  secret: boolean;
}

export type Admission = Admitted | Refusal;

export interface Admitter {
  /** The gateway's own origin list (`server.cors.allowedOrigins`): pages of other origins are refused. */
  gatewayAllowsOrigin: OriginMatcher;
  /** The client's address: the connection's, or the one a trusted proxy (`server.trustedProxies`) forwarded. */
  clientAddress(remoteAddress: string | undefined, forwardedFor: string | string[] | undefined): string | undefined;
  /**
   * Authenticates `apiKey` and checks it may call `networkId` with what the caller shows. Settles
   * without waiting when the key is cached and has no settings (the common case). Errors that
   * are not refusals (bugs) are thrown.
   */
  admit(apiKey: string, networkId: string, caller: RequestFacts): Admission | Promise<Admission>;
  /**
   * A CORS preflight's question: may a page of `origin` call with this key? True for a key that
   * does not authenticate (unknown, revoked, the store unreachable): the actual request says why.
   */
  keyAllowsOrigin(apiKey: string, origin: string): Promise<{ allowed: boolean; auth: AuthenticatedKey | undefined }>;
}

function refusalOf(error: unknown, auth: AuthenticatedKey | undefined, bySettings: boolean): Refusal {
  if (!(error instanceof GatewayError)) throw error;
  const rule = error.code === 'TG_ERR_KEY_SETTINGS' ? (error.data as { rule: string }).rule : undefined;
  return { kind: 'refused', error, auth, rule, bySettings };
}

export function createAdmitter(deps: { authenticator: Authenticator; gatewayAllowsOrigin: OriginMatcher; trustedProxies: readonly string[] }): Admitter {
  const { authenticator, gatewayAllowsOrigin } = deps;
  const trustedProxies = deps.trustedProxies.length > 0 ? compileIpRanges([...deps.trustedProxies]) : undefined;

  function check(auth: AuthenticatedKey, networkId: string, caller: RequestFacts): Admission | Promise<Admission> {
    try {
      checkNetworkAllowed(auth, networkId);
    } catch (error) {
      return refusalOf(error, auth, false);
    }
    // A page of an origin the gateway does not serve: refused before any key setting runs.
    if (caller.origin !== undefined && !gatewayAllowsOrigin(caller.origin)) return refusalOf(rejected('origin'), auth, false);
    const policy = auth.policy;
    if (policy === undefined) return { kind: 'admitted', auth, rules: undefined, secret: false };
    try {
      const admitting = policy.admit(caller);
      if (!(admitting instanceof Promise)) return { kind: 'admitted', auth, rules: admitting.items, secret: admitting.secret };
      return admitting.then(
        (admission): Admission => ({ kind: 'admitted', auth, rules: admission.items, secret: admission.secret }),
        (error: unknown) => refusalOf(error, auth, true),
      );
    } catch (error) {
      return refusalOf(error, auth, true);
    }
  }

  return {
    gatewayAllowsOrigin,
    clientAddress: (remoteAddress, forwardedFor) => clientAddressOf(remoteAddress, forwardedFor, trustedProxies),
    admit(apiKey, networkId, caller) {
      let authenticated: AuthenticatedKey | Promise<AuthenticatedKey>;
      try {
        authenticated = authenticator.authenticate(apiKey);
      } catch (error) {
        return refusalOf(error, undefined, false);
      }
      if (!(authenticated instanceof Promise)) return check(authenticated, networkId, caller);
      return authenticated.then(
        (auth) => check(auth, networkId, caller),
        (error: unknown) => refusalOf(error, undefined, false),
      );
    },

    async keyAllowsOrigin(apiKey, origin) {
      let auth: AuthenticatedKey | undefined;
      try {
        auth = await authenticator.authenticate(apiKey);
      } catch {
        return { allowed: true, auth: undefined }; // unknown, revoked, or the store is unreachable
      }
      return { allowed: auth.policy === undefined || auth.policy.allowsOrigin(origin), auth };
    },
  };
}
