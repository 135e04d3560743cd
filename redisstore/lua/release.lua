-- idem redisstore: Release. Frees an in-progress claim of this owner; the
-- record stays (with its TTL) so that the key's fence keeps growing. The
-- MarkStarted mark goes: the next Begin acquires afresh.
-- KEYS[1]  the record
-- ARGV[1]  owner token
-- Returns  1 released, 0 lease lost (nothing changed).
local key = KEYS[1]
local r = redis.call('HMGET', key, 'v', 's', 'tok')
if not r[1] then
  return 0
end
if r[1] ~= '1' then
  return redis.error_reply('IDEMVERSION record ' .. key .. ' has version ' .. r[1] .. ', this idem reads version 1')
end
if r[3] ~= ARGV[1] or r[2] ~= 'p' then
  return 0
end
redis.call('HSET', key, 's', 'r', 'lu', '0')
redis.call('HDEL', key, 'm')
return 1
