-- idem redisstore: Complete. Compares the owner token and writes in one step.
-- KEYS[1]  the record
-- ARGV[1]  owner token
-- ARGV[2]  result
-- ARGV[3]  optional: latest expiry in µs since the epoch (0 or absent: none).
--          The record's expiry is lowered to it when it is earlier, so that
--          a copy of a durable record never outlives the original (tiered).
-- ARGV[4]  optional: '1' to hold (Store.Hold): the record is completed with
--          the held mark, field h.
-- Returns  1 completed (also when this owner had completed or held it
--          already: the first outcome stays), 0 lease lost (nothing changed).
-- Without a cap the key's TTL is not touched: a completed record keeps its
-- expiry.
local key = KEYS[1]
local r = redis.call('HMGET', key, 'v', 's', 'tok', 'x')
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
  -- A resend after a lost reply: the first write may have gone out on a
  -- connection that is gone. Rewriting the version field puts a write of
  -- this connection behind it in the replication stream, so that a WAIT
  -- sent behind this script covers the first one (Config.WaitReplicas).
  redis.call('HSET', key, 'v', '1')
  return 1
end
if r[2] ~= 'p' then
  return 0
end
redis.call('HSET', key, 's', 'c', 'res', ARGV[2], 'lu', '0')
if ARGV[4] == '1' then
  redis.call('HSET', key, 'h', '1')
end
local cap = tonumber(ARGV[3] or '0') or 0
if cap > 0 and cap < tonumber(r[4]) then
  redis.call('HSET', key, 'x', string.format('%.0f', cap))
  redis.call('PEXPIREAT', key, math.floor(cap / 1000)) -- down: never past cap
end
return 1
