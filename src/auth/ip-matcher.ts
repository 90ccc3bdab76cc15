import { BlockList, isIP } from 'node:net';

/**
 * IPv4 / IPv6 addresses and CIDR ranges and their matcher: what a key's `allowedIps` and the
 * trusted proxies hold. A leaf module: the config schema and the key settings both validate with it.
 */


interface ParsedRange {
  address: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

export function parseRange(entry: string): ParsedRange | undefined {
  const [address = '', prefixText, ...rest] = entry.trim().split('/');
  if (rest.length > 0) return undefined;
  const version = isIP(address);
  if (version === 0) return undefined;
  const max = version === 4 ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return undefined;
  const prefix = prefixText === undefined ? max : Number(prefixText);
  if (prefix > max) return undefined;
  return { address, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

/** True for an IPv4 / IPv6 address or CIDR range. */
export const isIpRange = (entry: string): boolean => parseRange(entry) !== undefined;

/** A set of CIDR ranges (node:net's BlockList does the address arithmetic). */
export interface IpMatcher {
  (address: string): boolean;
}

export function compileIpRanges(entries: readonly string[]): IpMatcher {
  const list = new BlockList();
  for (const entry of entries) {
    const range = parseRange(entry);
    if (range !== undefined) list.addSubnet(range.address, range.prefix, range.family);
  }
  return (address) => {
    const version = isIP(address);
    if (version === 0) return false;
    // An IPv4 client on a dual-stack socket shows as ::ffff:a.b.c.d; it matches IPv4 ranges.
    if (version === 6 && address.startsWith('::ffff:') && isIP(address.slice(7)) === 4) return list.check(address.slice(7), 'ipv4');
    return list.check(address, version === 4 ? 'ipv4' : 'ipv6');
  };
}
