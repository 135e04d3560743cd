-- idem redisstore: Purge one key. Deletes the record only if its logical
-- expiry passed at least grace ago by the server's clock, decided in the
-- same step as the delete: a record re-created under the key is never
-- touched. Keys that are not version-1 idem records are left alone.
-- KEYS[1]  the record
-- ARGV[1]  grace in microseconds
-- Returns  1 deleted, 0 kept.
local key = KEYS[1]
if redis.call('TYPE', key).ok ~= 'hash' then
  return 0
end
local r = redis.call('HMGET', key, 'v', 'x')
if r[1] ~= '1' or not r[2] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if tonumber(r[2]) + tonumber(ARGV[1]) <= now then
  redis.call('DEL', key)
  return 1
end
return 0
