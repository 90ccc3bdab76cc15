import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * The filter ids the gateway hands out (docs/routing.md#filters). A filter lives on the
 * upstream node that created it, so the id the client gets says which upstream that was and
 * what the upstream called it, and is bound to the network and the API key that created it:
 *
 *   0x <version 01> <upstream tag: 8 bytes> <length: 1 byte> <upstream's filter id, ASCII> <MAC: 16 bytes>
 *
 * - the upstream tag is HMAC(secret, [network, upstream id, upstream URL]) cut to 8 bytes: it
 *   names the upstream without showing its id or URL, and an upstream whose id or URL changed in
 *   a reload no longer matches (its filters are gone with it);
 * - the MAC is HMAC(secret, [network, key id] ‖ everything before it) cut to 16 bytes, so an id
 *   cannot be forged, altered, or used by another key or on another network.
 * Every replica with the same secret decodes every other's ids: no state is shared but the
 * secret. The id is `0x` and lower-case hex, which viem and ethers pass back as they got it.
 */

export interface FilterScope {
  network: string;
  /** The API key's id (not its secret: a rotated key keeps its filters). */
  keyId: string;
}

/** What identifies an upstream for its tag. */
export interface TaggedUpstream {
  readonly id: string;
  readonly config: { readonly url: string };
}

export interface PinnedFilter<U extends TaggedUpstream> {
  upstream: U;
  /** The filter id the upstream itself returned. */
  upstreamFilterId: string;
}

export interface FilterIds {
  /**
   * The client's id for a filter `upstream` created, or undefined when the upstream's own id is
   * not 1–255 printable ASCII characters (node filter ids are hex quantities; anything else is an
   * upstream fault).
   */
  encode(scope: FilterScope, upstream: TaggedUpstream, upstreamFilterId: string): string | undefined;
  /** The upstream and upstream filter id of a client's id, or undefined when it is not a valid id of this key on one of `upstreams`. */
  decode<U extends TaggedUpstream>(scope: FilterScope, id: string, upstreams: readonly U[]): PinnedFilter<U> | undefined;
}

const VERSION = 0x01;
const TAG_BYTES = 8;
const MAC_BYTES = 16;
const MAX_UPSTREAM_FILTER_ID_BYTES = 255;
const MAX_ID_CHARS = 2 + 2 * (1 + TAG_BYTES + 1 + MAX_UPSTREAM_FILTER_ID_BYTES + MAC_BYTES);
const UPSTREAM_FILTER_ID = new RegExp(`^[\\x21-\\x7e]{1,${MAX_UPSTREAM_FILTER_ID_BYTES}}$`);
const HEX_ID = /^0x(?:[0-9a-fA-F]{2})+$/;
/** Bound on remembered upstream tags (one per network and upstream of each config loaded). */
const MAX_CACHED_TAGS = 10_000;

export function createFilterIds(secret: string): FilterIds {
  if (secret.length < 32) throw new Error('the filter id secret must have at least 32 characters');
  const tags = new Map<string, Buffer>();

  function tagOf(network: string, upstream: TaggedUpstream): Buffer {
    const input = JSON.stringify(['upstream', network, upstream.id, upstream.config.url]);
    let tag = tags.get(input);
    if (tag === undefined) {
      tag = createHmac('sha256', secret).update(input).digest().subarray(0, TAG_BYTES);
      if (tags.size >= MAX_CACHED_TAGS) tags.clear();
      tags.set(input, tag);
    }
    return tag;
  }

  function macOf(scope: FilterScope, body: Buffer): Buffer {
    // The JSON array is self-delimiting, so scope and body cannot run into each other.
    return createHmac('sha256', secret).update(JSON.stringify(['filter', scope.network, scope.keyId])).update(body).digest().subarray(0, MAC_BYTES);
  }

  return {
    encode(scope, upstream, upstreamFilterId) {
      if (!UPSTREAM_FILTER_ID.test(upstreamFilterId)) return undefined;
      const own = Buffer.from(upstreamFilterId, 'latin1');
      const body = Buffer.concat([Buffer.of(VERSION), tagOf(scope.network, upstream), Buffer.of(own.length), own]);
      return `0x${Buffer.concat([body, macOf(scope, body)]).toString('hex')}`;
    },
    decode(scope, id, upstreams) {
      if (id.length > MAX_ID_CHARS || !HEX_ID.test(id)) return undefined;
      const bytes = Buffer.from(id.slice(2), 'hex');
      const ownLength = bytes[1 + TAG_BYTES];
      if (bytes[0] !== VERSION || ownLength === undefined || bytes.length !== 1 + TAG_BYTES + 1 + ownLength + MAC_BYTES) return undefined;
      const body = bytes.subarray(0, bytes.length - MAC_BYTES);
      if (!timingSafeEqual(macOf(scope, body), bytes.subarray(body.length))) return undefined;
      const tag = bytes.subarray(1, 1 + TAG_BYTES);
      const upstream = upstreams.find((candidate) => tagOf(scope.network, candidate).equals(tag));
      if (upstream === undefined) return undefined;
      return { upstream, upstreamFilterId: body.subarray(2 + TAG_BYTES).toString('latin1') };
    },
  };
}
