-- idem redisstore: Complete. Compares the owner token and writes in one step.
-- KEYS[1]  the record
-- ARGV[1]  owner token
-- ARGV[2]  result
-- Returns  1 completed (also when this owner had completed it already: the
--          first result stays), 0 lease lost (nothing changed).
-- The key's TTL is not touched: a completed record keeps its expiry.
local key = KEYS[1]
local r = redis.call('HMGET', key, 'v', 's', 'tok')
if not r[1] then
  return 0
end
if r[1] ~= '1' then
  return redis.error_reply('IDEMVERSION record ' .. key .. ' has version ' .. r[1] .. ', this idem reads version 1')
end
if r[3] ~= ARGV[1] then
  return 0
end
if r[2] == 'c' then
  return 1
end
if r[2] ~= 'p' then
  return 0
end
redis.call('HSET', key, 's', 'c', 'res', ARGV[2], 'lu', '0')
return 1
