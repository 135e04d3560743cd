-- idem redisstore: Resolve. Settles a held record, if it is still the one
-- the operator looked at: the same fence, held (completed with the held
-- mark h, or, written by a release before the mark existed, with a held
-- result: idem's outcome-unknown result, or httpidem's outcome-unknown
-- response), and not expired by the server's clock. Decided and written
-- in one step; the held mark is cleared.
-- KEYS[1]  the record
-- ARGV[1]  the fence looked at, decimal
-- ARGV[2]  'r': release the key; 'c': store ARGV[5] as its result
-- ARGV[3]  the exact legacy held result
-- ARGV[4]  the legacy held response prefix (4 bytes)
-- ARGV[5]  the result ('c' only)
-- Returns  1 resolved (also when a resend finds it already resolved this
--          way: released, or completed with exactly ARGV[5], at that
--          fence), 0 no record, 2 not held (anything else).
local key = KEYS[1]
local r = redis.call('HMGET', key, 'v', 's', 'f', 'x', 'res', 'h')
if not r[1] then
  return 0
end
if r[1] ~= '1' then
  return redis.error_reply('IDEMVERSION record ' .. key .. ' has version ' .. r[1] .. ', this idem reads version 1')
end
if r[3] ~= ARGV[1] then
  return 2
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if tonumber(r[4]) <= now then
  return 2
end
local res = r[5] or ''
if r[2] == 'c' and (r[6] == '1' or res == ARGV[3] or string.sub(res, 1, 4) == ARGV[4]) then
  if ARGV[2] == 'r' then
    redis.call('HSET', key, 's', 'r', 'lu', '0')
    redis.call('HDEL', key, 'm', 'res', 'h')
  else
    redis.call('HSET', key, 'res', ARGV[5], 'lu', '0')
    redis.call('HDEL', key, 'h')
  end
  return 1
end
if (ARGV[2] == 'r' and r[2] == 'r') or (ARGV[2] == 'c' and r[2] == 'c' and res == ARGV[5]) then
  redis.call('HSET', key, 'v', '1') -- for WAIT: see complete.lua
  return 1
end
return 2
