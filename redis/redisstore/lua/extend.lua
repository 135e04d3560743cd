-- idem redisstore: Extend. Renews an in-progress claim of this owner to
-- lease from now (server time) and keeps the record at least that long.
-- KEYS[1]  the record
-- ARGV[1]  owner token
-- ARGV[2]  lease in microseconds
-- Returns  1 extended, 0 lease lost (nothing changed).
local key = KEYS[1]
local r = redis.call('HMGET', key, 'v', 's', 'tok', 'x')
if not r[1] then
  return 0
end
if r[1] ~= '1' then
  return redis.error_reply('IDEMVERSION record ' .. key .. ' has version ' .. r[1] .. ', this idem reads version 1')
end
if r[3] ~= ARGV[1] or r[2] ~= 'p' then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local lease_until = now + tonumber(ARGV[2])
redis.call('HSET', key, 'lu', string.format('%.0f', lease_until))
if tonumber(r[4]) < lease_until then
  redis.call('HSET', key, 'x', string.format('%.0f', lease_until))
  redis.call('PEXPIREAT', key, math.ceil(lease_until / 1000))
end
return 1
