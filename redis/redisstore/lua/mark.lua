-- idem redisstore: MarkStarted. Records, in the same step as the owner
-- check, that the owner's work is about to have effects outside the store.
-- KEYS[1]  the record
-- ARGV[1]  owner token
-- Returns  1 marked (also when it was marked already), 0 lease lost.
-- The mark ('m') survives takeovers (begin.lua copies it) and goes away
-- only when the key is acquired afresh.
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
redis.call('HSET', key, 'm', '1')
return 1
