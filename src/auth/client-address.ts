import type { IpMatcher } from './ip-matcher.js';

/**
 * The client's address for a key's IP rule. `X-Forwarded-For` is believed only when the
 * connection comes from a trusted proxy (`server.trustedProxies`): its entries are walked right to
 * left, each proxy vouching for the one before it, and the first address that is not a trusted
 * proxy is the client. Anything unparsable ends the walk at the last address believed.
 */
export function clientAddressOf(remoteAddress: string | undefined, forwardedFor: string | string[] | undefined, trusted: IpMatcher | undefined): string | undefined {
  if (remoteAddress === undefined || trusted === undefined || forwardedFor === undefined || !trusted(remoteAddress)) return remoteAddress;
  const hops = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor).split(',');
  let client = remoteAddress;
  for (let index = hops.length - 1; index >= 0; index -= 1) {
    const hop = hops[index]!.trim();
    if (hop === '') break;
    client = hop;
    if (!trusted(hop)) break;
  }
  return client;
}
