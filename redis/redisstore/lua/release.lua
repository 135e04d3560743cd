-- idem redisstore: Release. Frees an in-progress claim of this owner; the
-- record stays (with its TTL) so that the key's fence keeps growing. The
-- MarkStarted mark goes: the next Begin acquires afresh.
-- KEYS[1]  the record
-- ARGV[1]  owner token
-- ARGV[2]  this Release call's nonce (16 random bytes)
-- Returns  1 released, 0 lease lost (nothing changed).
-- The nonce tells a resend of the same call (the client library sent it
-- again after the first answer was lost: the same nonce finds its own
-- release and answers 1 again) from a second Release by the owner (a new
-- nonce: the claim is gone, 0).
local key = KEYS[1]
local r = redis.call('HMGET', key, 'v', 's', 'tok', 'rn')
if not r[1] then
  return 0
end
if r[1] ~= '1' then
  return redis.error_reply('IDEMVERSION record ' .. key .. ' has version ' .. r[1] .. ', this idem reads version 1')
end
if r[3] ~= ARGV[1] then
  return 0
end
if r[2] == 'r' and r[4] == ARGV[2] then
  redis.call('HSET', key, 'v', '1') -- for WAIT: see complete.lua
  return 1
end
if r[2] ~= 'p' then
  return 0
end
redis.call('HSET', key, 's', 'r', 'lu', '0', 'rn', ARGV[2])
redis.call('HDEL', key, 'm')
return 1
