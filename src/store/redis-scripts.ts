/**
 * The Redis store's Lua scripts. Redis runs one script at a time, so each is atomic: replicas on
 * different machines can never both spend a team's last credits. None of them holds the credit
 * rule; that is ledger-rule.ts, in TypeScript, for both drivers.
 *
 * Key layout (all under the store's prefix):
 *   used:team:<teamId>:<day>   credits spent or reserved by a team on a UTC day
 *   used:key:<keyId>:<day>     the same for one key (for per-key caps)
 *   usage:c:<teamId>:<day>     hash <keyId>\t<network>\t<method> -> credits charged
 *   usage:r:<teamId>:<day>     hash <keyId>\t<network>\t<method> -> requests charged
 *   bucket:<teamId>            hash {tokens, at}: the credits-per-second token bucket
 *   resv:<reservationId>       hash of one reservation; `reservations` zset indexes them by time
 *   owner:<tag>                a process's heartbeat (expires when it stops beating)
 *   team:<id>, team-name:<name>, teams, key:<id>, keys, team-keys:<teamId>,
 *   secret:<hash> {keyId, validUntil}, key-secrets:<keyId>   the key directory
 *   shared-secret:<name>       a value all replicas agree on (the filter ids' HMAC key)
 * Invariant: used:team = Σ usage:c + Σ reserved costs, per team and day.
 */

/**
 * Compare and apply: commits a ledger batch the driver decided against the values it read.
 * Every value read is compared first; if any differs (another replica committed since), nothing
 * is written and the current values are returned, so the driver decides again without another
 * read. Otherwise the writes are applied.
 *
 * KEYS: the keys compared, in order (KEYS[1..C]), then the keys only written.
 * ARGV: C; per compared key: F (0 for a string value), F field names, then max(F, 1) expected
 * values, each '' for absent or '=' .. value; then W; per write: an operation, a KEYS index and
 * its arguments:
 *   incrby  i n ttlSeconds          hincrby i field n ttlSeconds
 *   hset    i pexpireMs|0 N f1 v1 … fN vN
 *   del     i                       zadd i score member        zrem i member
 * Returns {1}, or {0, current values of every compared field in order, encoded as expected}.
 */
export const APPLY_SCRIPT = `
local at = 1
local function arg()
  local value = ARGV[at]
  at = at + 1
  return value
end
local reply = {0}
local conflict = false
for c = 1, tonumber(arg()) do
  local fieldCount = tonumber(arg())
  local values
  if fieldCount == 0 then
    values = {redis.call('GET', KEYS[c])}
    fieldCount = 1
  else
    local fields = {}
    for f = 1, fieldCount do fields[f] = arg() end
    values = redis.call('HMGET', KEYS[c], unpack(fields))
  end
  for f = 1, fieldCount do
    local seen = ''
    if values[f] then seen = '=' .. values[f] end
    if seen ~= arg() then conflict = true end
    reply[#reply + 1] = seen
  end
end
if conflict then
  return reply
end
for _ = 1, tonumber(arg()) do
  local op = arg()
  local key = KEYS[tonumber(arg())]
  if op == 'incrby' then
    local n = arg()
    local ttl = arg()
    redis.call('INCRBY', key, n)
    redis.call('EXPIRE', key, ttl)
  elseif op == 'hincrby' then
    local field = arg()
    local n = arg()
    local ttl = arg()
    redis.call('HINCRBY', key, field, n)
    redis.call('EXPIRE', key, ttl)
  elseif op == 'hset' then
    local pexpire = tonumber(arg())
    local fieldValues = {}
    for p = 1, 2 * tonumber(arg()) do fieldValues[p] = arg() end
    redis.call('HSET', key, unpack(fieldValues))
    if pexpire > 0 then redis.call('PEXPIRE', key, pexpire) end
  elseif op == 'del' then
    redis.call('DEL', key)
  elseif op == 'zadd' then
    local score = arg()
    local member = arg()
    redis.call('ZADD', key, score, member)
  elseif op == 'zrem' then
    redis.call('ZREM', key, arg())
  else
    return redis.error_reply('unknown ledger write ' .. tostring(op))
  end
end
return {1}
`;

/** The reservation fields the credit rule reads, in the order the scripts return them. */
export const RESERVATION_FIELDS = ['teamId', 'keyId', 'day', 'network', 'method', 'cost'] as const;

/**
 * Finds the reservations the sweep should refund, in one call: those created before a cutoff,
 * those of another process whose heartbeat has expired ('dead'), and those of another process of
 * this host ('local': the caller checks whether that process still runs, which Redis cannot).
 * Index entries whose reservation no longer exists are dropped on the way.
 * KEYS[1] reservations; ARGV = prefix, own owner tag, cutoff (epoch ms), this host's tag prefix.
 * Returns, per reservation found, 11 values: id, why ('old' | 'dead' | 'local'), owner, then
 * the RESERVATION_FIELDS and the team's and key's day totals, each encoded as APPLY_SCRIPT's
 * expected values ('' or '=' .. value), so that refunding them is one APPLY_SCRIPT call.
 */
export const STALE_RESERVATIONS_SCRIPT = `
local prefix, self, cutoff, host = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local function encoded(value)
  if value then return '=' .. value end
  return ''
end
local reply = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local r = redis.call('HMGET', prefix .. 'resv:' .. id, 'owner', 'createdAt', 'teamId', 'keyId', 'day', 'network', 'method', 'cost')
  local owner = r[1]
  if not owner then
    redis.call('ZREM', KEYS[1], id)
  else
    local why = nil
    if tonumber(r[2] or '0') < cutoff then
      why = 'old'
    elseif owner ~= self then
      if redis.call('EXISTS', prefix .. 'owner:' .. owner) == 0 then
        why = 'dead'
      elseif string.sub(owner, 1, #host) == host then
        why = 'local'
      end
    end
    if why then
      reply[#reply + 1] = id
      reply[#reply + 1] = why
      reply[#reply + 1] = owner
      for f = 3, 8 do reply[#reply + 1] = encoded(r[f]) end
      reply[#reply + 1] = encoded(redis.call('GET', prefix .. 'used:team:' .. r[3] .. ':' .. r[5]))
      reply[#reply + 1] = encoded(redis.call('GET', prefix .. 'used:key:' .. r[4] .. ':' .. r[5]))
    end
  end
end
return reply
`;

/**
 * Rotates a key's secret atomically: every current secret of the key stays valid until the
 * bound, or its earlier bound from a previous rotation; the new secret is added.
 * KEYS = key:<id>, key-secrets:<id>, secret:<newHash>; ARGV = prefix, newHash, bound (epoch ms), keyId.
 * Returns 1, or 0 when there is no such key.
 */
export const ROTATE_SCRIPT = `
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local bound = tonumber(ARGV[3])
for _, hash in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local secret = ARGV[1] .. 'secret:' .. hash
  local current = tonumber(redis.call('HGET', secret, 'validUntil') or '')
  if current == nil or current > bound then
    redis.call('HSET', secret, 'validUntil', ARGV[3])
  end
end
redis.call('HSET', KEYS[3], 'keyId', ARGV[4], 'validUntil', '')
redis.call('SADD', KEYS[2], ARGV[2])
return 1
`;
