/**
 * The Redis store's ledger operations, each one Lua script so that Redis runs it atomically:
 * replicas on different machines can never both spend a team's last credits. Redis runs one
 * script at a time, so "read the balance, decide, write" cannot interleave.
 *
 * Key layout (all under the store's prefix):
 *   used:team:<teamId>:<day>   credits spent or reserved by a team on a UTC day
 *   used:key:<keyId>:<day>     the same for one key (for per-key caps)
 *   usage:c:<teamId>:<day>     hash <keyId>\t<network>\t<method> -> credits charged
 *   usage:r:<teamId>:<day>     hash <keyId>\t<network>\t<method> -> requests charged
 *   bucket:<teamId>            hash {tokens, at}: the credits-per-second token bucket
 *   resv:<reservationId>       hash of one reservation; `reservations` zset indexes them by time
 * Invariant: used:team = Σ usage:c + Σ reserved costs, per team and day.
 */

/**
 * Admission, shared by `reserve` and `charge`: checks the team's daily quota, the key's cap, then
 * the throughput bucket (consumed only when everything passes), and adds the cost to the day
 * counters. Returns nil and the team's new spend, or a refusal:
 * {0, teamUsed, scope, limit, used} (daily credits) | {2, teamUsed, retryAfterMs} (throughput).
 * KEYS[1] used:team, KEYS[2] used:key, KEYS[3] bucket; ARGV[1..6] cost, teamLimit, keyCap|'',
 * rate|'', now, ttl.
 */
const ADMIT = `
local cost = tonumber(ARGV[1])
local teamLimit = tonumber(ARGV[2])
local keyCap = tonumber(ARGV[3])
local rate = tonumber(ARGV[4])
local now = tonumber(ARGV[5])
local ttl = tonumber(ARGV[6])
local function admit()
  local teamUsed = tonumber(redis.call('GET', KEYS[1]) or '0')
  if teamUsed + cost > teamLimit then
    return {0, teamUsed, 'team', teamLimit, teamUsed}
  end
  local keyUsed = tonumber(redis.call('GET', KEYS[2]) or '0')
  if keyCap ~= nil and keyUsed + cost > keyCap then
    return {0, teamUsed, 'key', keyCap, keyUsed}
  end
  if rate ~= nil then
    local bucket = redis.call('HMGET', KEYS[3], 'tokens', 'at')
    local tokens = tonumber(bucket[1])
    local at = tonumber(bucket[2])
    if tokens == nil then
      tokens = rate
    else
      tokens = math.min(rate, tokens + math.max(0, now - at) * rate / 1000)
    end
    local needed = math.min(cost, rate)
    local stamp = tostring(math.max(now, at or now))
    if tokens < needed then
      redis.call('HSET', KEYS[3], 'tokens', tostring(tokens), 'at', stamp)
      redis.call('PEXPIRE', KEYS[3], 60000)
      return {2, teamUsed, math.max(1, math.ceil((needed - tokens) * 1000 / rate))}
    end
    redis.call('HSET', KEYS[3], 'tokens', tostring(tokens - cost), 'at', stamp)
    redis.call('PEXPIRE', KEYS[3], 60000)
  end
  teamUsed = redis.call('INCRBY', KEYS[1], cost)
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('INCRBY', KEYS[2], cost)
  redis.call('EXPIRE', KEYS[2], ttl)
  return nil, teamUsed
end
`;

/**
 * charge, for `count` identical calls in a row (one script call for a turn's cache hits of one
 * key): admits them one by one and stops at the first refusal, which is the outcome of every
 * later one too (they are identical and nothing else runs in between).
 * KEYS = used:team, used:key, bucket, usage:c, usage:r; ARGV = cost, teamLimit, keyCap|'',
 * rate|'', now, ttl, usageField, count.
 * Returns {admitted, teamUsedAfterLastAdmitted, refusal...} where refusal is as ADMIT's, or none.
 */
export const CHARGE_SCRIPT = `${ADMIT}
local count = tonumber(ARGV[8])
local admitted = 0
local lastUsed = 0
local refusal = nil
for _ = 1, count do
  local refused, teamUsed = admit()
  if refused then
    refusal = refused
    break
  end
  admitted = admitted + 1
  lastUsed = teamUsed
end
if admitted > 0 then
  redis.call('HINCRBY', KEYS[4], ARGV[7], admitted * cost)
  redis.call('EXPIRE', KEYS[4], ttl)
  redis.call('HINCRBY', KEYS[5], ARGV[7], admitted)
  redis.call('EXPIRE', KEYS[5], ttl)
end
if refusal then
  return {admitted, lastUsed, unpack(refusal)}
end
return {admitted, lastUsed}
`;

/**
 * reserve: KEYS = used:team, used:key, bucket, resv:<id>, reservations
 * ARGV = cost, teamLimit, keyCap|'', rate|'', now, ttl, reservationId, teamId, keyId, day, network, method, owner
 */
export const RESERVE_SCRIPT = `${ADMIT}
local refused, teamUsed = admit()
if refused then
  return refused
end
redis.call('HSET', KEYS[4], 'teamId', ARGV[8], 'keyId', ARGV[9], 'day', ARGV[10], 'network', ARGV[11],
  'method', ARGV[12], 'cost', cost, 'owner', ARGV[13], 'createdAt', now)
redis.call('ZADD', KEYS[5], now, ARGV[7])
return {1, teamUsed}
`;

/**
 * settle / refund: KEYS = resv:<id>, reservations; ARGV = prefix, reservationId, ttl, mode ('settle'|'refund').
 * Key names are derived from the reservation inside the script (standalone Redis, not Cluster).
 * Returns {1, teamUsed}, or {3, 0} when the reservation no longer exists (already swept).
 */
export const FINISH_SCRIPT = `
local r = redis.call('HMGET', KEYS[1], 'teamId', 'keyId', 'day', 'network', 'method', 'cost')
if r[1] == false then
  return {3, 0}
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
local prefix, ttl, cost = ARGV[1], tonumber(ARGV[3]), tonumber(r[6])
local teamKey = prefix .. 'used:team:' .. r[1] .. ':' .. r[3]
if ARGV[4] == 'settle' then
  local field = r[2] .. '\\t' .. r[4] .. '\\t' .. r[5]
  redis.call('HINCRBY', prefix .. 'usage:c:' .. r[1] .. ':' .. r[3], field, cost)
  redis.call('EXPIRE', prefix .. 'usage:c:' .. r[1] .. ':' .. r[3], ttl)
  redis.call('HINCRBY', prefix .. 'usage:r:' .. r[1] .. ':' .. r[3], field, 1)
  redis.call('EXPIRE', prefix .. 'usage:r:' .. r[1] .. ':' .. r[3], ttl)
  return {1, tonumber(redis.call('GET', teamKey) or '0')}
end
local teamUsed = redis.call('DECRBY', teamKey, cost)
redis.call('DECRBY', prefix .. 'used:key:' .. r[2] .. ':' .. r[3], cost)
return {1, teamUsed}
`;
