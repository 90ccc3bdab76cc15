/**
 * The Redis store's Lua scripts. Redis runs one script at a time, so each is atomic: replicas on
 * different machines can never both spend a team's last credits. None of them holds the credit
 * rule; that is ledger-rule.ts, in TypeScript, for both drivers.
 *
 * Key layout (one Redis; redis-keyspace.ts names every key, and Redis Cluster's hash tags):
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
 *
 * On Redis Cluster the apply and sweep scripts run once per master for the keys of several teams
 * (several slots of that node): they declare one key (which routes the call to its node) and take
 * the others as arguments, and carry the `allow-cross-slot-keys` flag (Redis 7.0 or newer), which
 * lets a script touch keys of other slots of its own node. A key of another node makes the script
 * fail on its first read, before it wrote anything; the driver then asks again where the keys are.
 */

/**
 * Compare and apply: commits a ledger batch the driver decided against the values it read.
 * Every value read is compared first; if any differs (another replica committed since), nothing
 * is written and the current values are returned, so the driver decides again without another
 * read. Otherwise the writes are applied.
 *
 * Keys: KEYS, then the E names given as ARGV[2..E+1] (ARGV[1] is E): the keys compared, in order
 * (keys[1..C]), then the keys only written.
 * ARGV after the key names: C; per compared key: F (0 for a string value), F field names, then max(F, 1) expected
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
local keys = {}
for k = 1, #KEYS do keys[k] = KEYS[k] end
for _ = 1, tonumber(arg()) do keys[#keys + 1] = arg() end
local reply = {0}
local conflict = false
for c = 1, tonumber(arg()) do
  local fieldCount = tonumber(arg())
  local values
  if fieldCount == 0 then
    values = {redis.call('GET', keys[c])}
    fieldCount = 1
  else
    local fields = {}
    for f = 1, fieldCount do fields[f] = arg() end
    values = redis.call('HMGET', keys[c], unpack(fields))
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
  local key = keys[tonumber(arg())]
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

/** The shebang that lets a script touch keys of several slots of its node (Redis Cluster, Redis 7.0+). */
export const CROSS_SLOT_SHEBANG = '#!lua flags=allow-cross-slot-keys\n';

/** The reservation fields the credit rule reads, in the order the scripts return them. */
export const RESERVATION_FIELDS = ['teamId', 'keyId', 'day', 'network', 'method', 'cost'] as const;

/**
 * Finds the reservations the sweep may have to refund, in one call per node: those created
 * before a cutoff ('old'), and those of another process ('other': the driver then checks that
 * process's heartbeat, and for a process of its own host its pid, which a script cannot).
 * Index entries whose reservation no longer exists are dropped on the way.
 * KEYS[1] a reservations index; ARGV = cutoff (epoch ms), own owner tag, the start of the
 * reservation keys KEYS[1] indexes (+ id gives the key), then pairs of another index and its
 * start (Redis Cluster: the indexes of every team on this node).
 * Returns, per reservation found, 9 values: id, why ('old' | 'other'), owner, then the
 * RESERVATION_FIELDS, each encoded as APPLY_SCRIPT's expected values ('' or '=' .. value).
 */
export const STALE_RESERVATIONS_SCRIPT = `
local cutoff, self = tonumber(ARGV[1]), ARGV[2]
local function encoded(value)
  if value then return '=' .. value end
  return ''
end
local reply = {}
local function sweep(index, prefix)
  for _, id in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    local r = redis.call('HMGET', prefix .. id, 'owner', 'createdAt', 'teamId', 'keyId', 'day', 'network', 'method', 'cost')
    local owner = r[1]
    if not owner then
      redis.call('ZREM', index, id)
    else
      local why = nil
      if tonumber(r[2] or '0') < cutoff then
        why = 'old'
      elseif owner ~= self then
        why = 'other'
      end
      if why then
        reply[#reply + 1] = id
        reply[#reply + 1] = why
        reply[#reply + 1] = owner
        for f = 3, 8 do reply[#reply + 1] = encoded(r[f]) end
      end
    end
  end
end
sweep(KEYS[1], ARGV[3])
for a = 4, #ARGV, 2 do sweep(ARGV[a], ARGV[a + 1]) end
return reply
`;

/**
 * Rotates a key's secret atomically: every current secret of the key stays valid until the
 * bound, or its earlier bound from a previous rotation; the new secret is added.
 * KEYS = key:<id>, key-secrets:<id>, secret:<newHash>; ARGV = the start of every secret key
 * (+ hash gives the key), newHash, bound (epoch ms), keyId.
 * Returns 1, or 0 when there is no such key.
 */
export const ROTATE_SCRIPT = `
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
local bound = tonumber(ARGV[3])
for _, hash in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local secret = ARGV[1] .. hash
  local current = tonumber(redis.call('HGET', secret, 'validUntil') or '')
  if current == nil or current > bound then
    redis.call('HSET', secret, 'validUntil', ARGV[3])
  end
end
redis.call('HSET', KEYS[3], 'keyId', ARGV[4], 'validUntil', '')
redis.call('SADD', KEYS[2], ARGV[2])
return 1
`;

/**
 * One permit of an upstream's rate-limit window, shared by every replica: a sorted set of the
 * permits taken in the last window, scored by Redis's own clock in microseconds (one clock for
 * every replica, whatever their machines' clocks say). At most `limit` in the window, and at
 * most `sliceLimit` in the last slice of it, so the permits spread.
 * KEYS[1] the window; ARGV: limit, window length in ms, slice length in ms, sliceLimit, a member
 * unique to this permit. Returns 0 when the permit is taken, else the ms until one may free.
 */
export const UPSTREAM_PERMIT_SCRIPT = `
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2]) * 1000
local slice = tonumber(ARGV[3]) * 1000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return math.max(1, math.ceil((tonumber(oldest[2]) + window - now) / 1000))
end
local sliceStart = '(' .. (now - slice)
if redis.call('ZCOUNT', KEYS[1], sliceStart, '+inf') >= tonumber(ARGV[4]) then
  -- Only the oldest permit of the slice is read: the wait ends when it leaves the slice.
  local oldestInSlice = redis.call('ZRANGEBYSCORE', KEYS[1], sliceStart, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  return math.max(1, math.ceil((tonumber(oldestInSlice[2]) + slice - now) / 1000))
end
redis.call('ZADD', KEYS[1], now, ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 0
`;
