/**
 * Every key name of the Redis store, for one Redis and for Redis Cluster, in one place.
 *
 * One Redis keeps the layout it always had, so an upgraded deployment finds its data:
 *   used:team:<teamId>:<day>, used:key:<keyId>:<day>, bucket:<teamId>, resv:<id>, reservations,
 *   usage:c|r|h:<teamId>:<day>, team-alerts:<teamId>, requests:<teamId>, team:<id>, key:<id>, ...
 *
 * Redis Cluster runs a script only on keys of one node, and a MULTI only on keys of one slot, so:
 * - every key of a team's ledger starts with the team's slot tag and id, `{<tag>}<teamId>:`: its
 *   day totals, its keys' day totals, its throughput bucket, its usage hashes, its reservations
 *   and their index, its alert settings, its recent requests. A team's keys all sit in one slot;
 *   teams spread over every shard by the hash of their id. The tag is one to three characters
 *   derived from the id ({@link clusterTeamTag}), not the id itself: in cluster mode Redis hashes
 *   the tag of every key each command of a script touches, and a pinned `redis-benchmark` of a
 *   reserve and a settle's commands cost a cluster node 0.97-1.16x one Redis per call with the
 *   23-byte tag `{t:team_<16 hex>}` (median 1.11x, five rounds of eight at 1.10x or more) and
 *   0.99-1.09x with a one-character tag. The names after the id are short (`d:<day>`, `r:<id>`):
 *   every name a commit touches travels in the script's arguments.
 * - the directory (teams, keys, secrets, team tokens, webhook deliveries) carries one tag, `{d}`:
 *   it is read on a key-cache miss and written by admins, little next to the ledger, and one slot
 *   keeps its multi-key writes (a team and its listing, a key rotation) atomic.
 * - single values written alone spread by their own name: event claims, process heartbeats.
 */

export interface RedisKeyspace {
  /** True for the Redis Cluster layout (hash tags). */
  clustered: boolean;
  prefix: string;
  teamDay(teamId: string, day: string): string;
  keyDay(teamId: string, keyId: string, day: string): string;
  bucket(teamId: string): string;
  reservation(teamId: string, reservationId: string): string;
  /** Zset of a team's reservations by creation time (one Redis: every team's, one key). */
  reservations(teamId: string): string;
  /** The start of the reservation hashes indexed by {@link reservations}: + id gives the key. */
  reservationPrefix(teamId: string): string;
  /** Hash `<keyId>\t<network>\t<method>` -> credits charged. */
  usageCredits(teamId: string, day: string): string;
  /** Hash `<keyId>\t<network>\t<method>` -> requests charged. */
  usageRequests(teamId: string, day: string): string;
  /** Hash `u|d|s\t<keyId>\t<network>\t<method>` -> provider units, money, saved units. */
  providerSpend(teamId: string, day: string): string;
  /** Hash `c\t<keyId>\t<hour>` -> credits, `r\t<keyId>\t<hour>` -> requests. */
  usageHours(teamId: string, day: string): string;
  teamAlerts(teamId: string): string;
  /** Zset of a team's recent requests (the request explorer), scored by arrival time. */
  requests(teamId: string): string;

  team(teamId: string): string;
  teamName(name: string): string;
  teams: string;
  key(keyId: string): string;
  keys: string;
  teamKeys(teamId: string): string;
  secret(hash: string): string;
  keySecrets(keyId: string): string;
  /** The start of every secret hash, for ROTATE_SCRIPT (+ hash gives the key). */
  secretPrefix: string;
  teamToken(tokenId: string): string;
  teamTokenHash(tokenHash: string): string;
  teamTokens: string;
  teamTokensOf(teamId: string): string;
  deliveries: string;
  deliveriesOf(teamId: string): string;
  sharedSecret(name: string): string;
  /** SCAN pattern of every shared secret (the name follows the pattern's `*`). */
  sharedSecretPattern: string;

  claim(eventKey: string): string;
  owner(tag: string): string;
  /** Zset of the permits an upstream's rate-limit window holds (`<network>/<upstream>`). */
  upstreamWindow(scope: string): string;
  /** Hash `<network>/<upstream>` -> units spent in one quota period (a UTC day or month). */
  upstreamUnits(period: string): string;
}

/** Team key prefixes a cluster keyspace remembers before it starts again. */
const MAX_REMEMBERED_TEAMS = 100_000;

export function createRedisKeyspace(prefix: string, clustered: boolean): RedisKeyspace {
  const p = prefix;
  if (!clustered) {
    return {
      clustered,
      prefix,
      teamDay: (teamId, day) => `${p}used:team:${teamId}:${day}`,
      keyDay: (_teamId, keyId, day) => `${p}used:key:${keyId}:${day}`,
      bucket: (teamId) => `${p}bucket:${teamId}`,
      reservation: (_teamId, id) => `${p}resv:${id}`,
      reservations: () => `${p}reservations`,
      reservationPrefix: () => `${p}resv:`,
      usageCredits: (teamId, day) => `${p}usage:c:${teamId}:${day}`,
      usageRequests: (teamId, day) => `${p}usage:r:${teamId}:${day}`,
      usageHours: (teamId, day) => `${p}usage:h:${teamId}:${day}`,
      providerSpend: (teamId, day) => `${p}usage:s:${teamId}:${day}`,
      teamAlerts: (teamId) => `${p}team-alerts:${teamId}`,
      requests: (teamId) => `${p}requests:${teamId}`,
      team: (id) => `${p}team:${id}`,
      teamName: (name) => `${p}team-name:${name}`,
      teams: `${p}teams`,
      key: (id) => `${p}key:${id}`,
      keys: `${p}keys`,
      teamKeys: (teamId) => `${p}team-keys:${teamId}`,
      secret: (hash) => `${p}secret:${hash}`,
      keySecrets: (keyId) => `${p}key-secrets:${keyId}`,
      secretPrefix: `${p}secret:`,
      teamToken: (id) => `${p}team-token:${id}`,
      teamTokenHash: (hash) => `${p}team-token-hash:${hash}`,
      teamTokens: `${p}team-tokens`,
      teamTokensOf: (teamId) => `${p}team-tokens:${teamId}`,
      deliveries: `${p}deliveries`,
      deliveriesOf: (teamId) => `${p}deliveries:${teamId}`,
      sharedSecret: (name) => `${p}shared-secret:${name}`,
      sharedSecretPattern: `${p}shared-secret:*`,
      claim: (eventKey) => `${p}claim:${eventKey}`,
      owner: (tag) => `${p}owner:${tag}`,
      upstreamWindow: (scope) => `${p}upstream-window:${scope}`,
      upstreamUnits: (period) => `${p}upstream-units:${period}`,
    };
  }
  // A ledger batch names several keys of each of its teams: the prefix (a hash of the id) is
  // computed once per team, kept while the teams seen stay within a directory's size.
  const teamPrefixes = new Map<string, string>();
  const t = (teamId: string): string => {
    let start = teamPrefixes.get(teamId);
    if (start === undefined) {
      if (teamPrefixes.size >= MAX_REMEMBERED_TEAMS) teamPrefixes.clear();
      teamPrefixes.set(teamId, (start = clusterTeamPrefix(p, teamId)));
    }
    return start;
  };
  const d = `${p}{d}:`;
  return {
    clustered,
    prefix,
    teamDay: (teamId, day) => `${t(teamId)}d:${day}`,
    keyDay: (teamId, keyId, day) => `${t(teamId)}k:${keyId}:${day}`,
    bucket: (teamId) => `${t(teamId)}b`,
    reservation: (teamId, id) => `${t(teamId)}r:${id}`,
    reservations: (teamId) => `${t(teamId)}rs`,
    reservationPrefix: (teamId) => `${t(teamId)}r:`,
    usageCredits: (teamId, day) => `${t(teamId)}uc:${day}`,
    usageRequests: (teamId, day) => `${t(teamId)}ur:${day}`,
    usageHours: (teamId, day) => `${t(teamId)}uh:${day}`,
    providerSpend: (teamId, day) => `${t(teamId)}us:${day}`,
    teamAlerts: (teamId) => `${t(teamId)}alerts`,
    requests: (teamId) => `${t(teamId)}requests`,
    team: (id) => `${d}team:${id}`,
    teamName: (name) => `${d}team-name:${name}`,
    teams: `${d}teams`,
    key: (id) => `${d}key:${id}`,
    keys: `${d}keys`,
    teamKeys: (teamId) => `${d}team-keys:${teamId}`,
    secret: (hash) => `${d}secret:${hash}`,
    keySecrets: (keyId) => `${d}key-secrets:${keyId}`,
    secretPrefix: `${d}secret:`,
    teamToken: (id) => `${d}team-token:${id}`,
    teamTokenHash: (hash) => `${d}team-token-hash:${hash}`,
    teamTokens: `${d}team-tokens`,
    teamTokensOf: (teamId) => `${d}team-tokens:${teamId}`,
    deliveries: `${d}deliveries`,
    deliveriesOf: (teamId) => `${d}deliveries:${teamId}`,
    sharedSecret: (name) => `${d}shared-secret:${name}`,
    sharedSecretPattern: `${d}shared-secret:*`,
    claim: (eventKey) => `${p}claim:${eventKey}`,
    owner: (tag) => `${p}owner:${tag}`,
    upstreamWindow: (scope) => `${p}{u:${scope}}:window`,
    upstreamUnits: (period) => `${p}{q}:upstream-units:${period}`,
  };
}

/**
 * A team's slot tag on Redis Cluster: 14 bits of the FNV-1a hash of its id, in base 36 (one to
 * three characters). Never empty: a settle of a reservation whose team is unknown names it with
 * the team id '', and `{}` would be no tag at all (Redis would hash the whole name and spread
 * that batch's keys over several nodes). Teams whose tags collide share a slot, which only
 * places them together; their names differ by the id that follows the tag.
 */
export function clusterTeamTag(teamId: string): string {
  let hash = 0x811c9dc5;
  for (let index = 0; index < teamId.length; index += 1) {
    hash ^= teamId.charCodeAt(index);
    hash = Math.imul(hash, 0x01000193);
  }
  return ((hash >>> 0) & 0x3fff).toString(36);
}

/** The start every key of a team's ledger shares on Redis Cluster: `<prefix>{<tag>}<teamId>:`. */
export function clusterTeamPrefix(prefix: string, teamId: string): string {
  return `${prefix}{${clusterTeamTag(teamId)}}${teamId}:`;
}
