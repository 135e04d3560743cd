-- idem redisstore: Hold. Writes an in-progress claim of ARGV[2], replacing
-- whatever the key holds. A layered store (tiered) calls it after its
-- durable store granted a claim that this copy did not show (a stale
-- record, or an answer lost on the wire): the copy is made to show the
-- durable decision. The fence still grows.
-- KEYS[1]  the record
-- ARGV[1]  fingerprint
-- ARGV[2]  owner token
-- ARGV[3]  lease in microseconds
-- ARGV[4]  retention in microseconds
-- Returns  the fence, as a decimal string.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local r = redis.call('HMGET', key, 'v', 'f')
if r[1] and r[1] ~= '1' then
  return redis.error_reply('IDEMVERSION record ' .. key .. ' has version ' .. r[1] .. ', this idem reads version 1')
end
local fence = (tonumber(r[2] or '0') or 0) + 1
if now > fence then
  fence = now
end
local lease_until = now + tonumber(ARGV[3])
local expires = now + tonumber(ARGV[4])
if expires < lease_until then
  expires = lease_until
end
redis.call('DEL', key)
redis.call('HSET', key,
  'v', '1', 's', 'p', 'fp', ARGV[1], 'tok', ARGV[2],
  'f', string.format('%.0f', fence),
  'c', string.format('%.0f', now),
  'lu', string.format('%.0f', lease_until),
  'x', string.format('%.0f', expires),
  'tk', '0')
redis.call('PEXPIREAT', key, math.ceil(expires / 1000))
return string.format('%.0f', fence)
