-- idem redisstore: Begin. One atomic step: read the record, decide, write.
-- KEYS[1]  the record (a hash)
-- ARGV[1]  fingerprint (32 raw bytes)
-- ARGV[2]  owner token (16 raw bytes, from crypto/rand in Go)
-- ARGV[3]  lease in microseconds
-- ARGV[4]  retention in microseconds
-- ARGV[5]  optional: '1' when the caller sends WAIT behind the script
--          (Config.WaitReplicas): a replay then rewrites the record's
--          version field, so that the WAIT covers the result it serves.
-- Returns  {1, fence, takeover, started}  acquired (takeover, started 0 or 1)
--          {2, result}            replay (completed, same fingerprint)
--          {3, retry_after_us}    in flight (live lease, same fingerprint)
--          {4}                    mismatch (live record, other fingerprint)
-- Time is the server's (TIME); Redis >= 5 replicates the script's effects,
-- so replicas never re-run TIME.
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local r = redis.call('HMGET', key, 'v', 's', 'fp', 'f', 'lu', 'x', 'tok', 'tk', 'm')
local prev = 0
local takeover = 0
local started = 0
if r[1] then
  if r[1] ~= '1' then
    return redis.error_reply('IDEMVERSION record ' .. key .. ' has version ' .. r[1] .. ', this idem reads version 1')
  end
  if r[2] == 'p' and r[7] == ARGV[2] then
    -- This token's own claim: the client library resent a Begin whose
    -- answer was lost on the wire. Answer as the first run did, with the
    -- lease renewed from now (the caller has only just learnt of it).
    local lease_until = now + tonumber(ARGV[3])
    redis.call('HSET', key, 'lu', string.format('%.0f', lease_until))
    if tonumber(r[6]) < lease_until then
      redis.call('HSET', key, 'x', string.format('%.0f', lease_until))
      redis.call('PEXPIREAT', key, math.ceil(lease_until / 1000))
    end
    local tk = 0
    if r[8] == '1' then tk = 1 end
    local m = 0
    if tk == 1 and r[9] == '1' then m = 1 end
    return {1, r[4], tk, m}
  end
  prev = tonumber(r[4])
  if tonumber(r[6]) > now and r[2] ~= 'r' then
    if r[3] ~= ARGV[1] then
      return {4}
    end
    if r[2] == 'c' then
      if ARGV[5] == '1' then
        -- The result may have been written by a connection whose WAIT
        -- fell short; this write is replicated after it, so the WAIT
        -- that follows this script covers both.
        redis.call('HSET', key, 'v', '1')
      end
      return {2, redis.call('HGET', key, 'res') or ''}
    end
    local left = tonumber(r[5]) - now
    if left > 0 then
      return {3, left}
    end
    -- Takeover: the holder's lease ran out. Its "started" mark stays, so
    -- that this and every later takeover learns the work may have run.
    takeover = 1
    if r[9] == '1' then started = 1 end
  end
end
local fence = prev + 1
if now > fence then
  fence = now
end
local lease_until = now + tonumber(ARGV[3])
local expires = now + tonumber(ARGV[4])
redis.call('DEL', key)
redis.call('HSET', key,
  'v', '1', 's', 'p', 'fp', ARGV[1], 'tok', ARGV[2],
  'f', string.format('%.0f', fence),
  'c', string.format('%.0f', now),
  'lu', string.format('%.0f', lease_until),
  'x', string.format('%.0f', expires),
  'tk', tostring(takeover))
if started == 1 then
  redis.call('HSET', key, 'm', '1')
end
redis.call('PEXPIREAT', key, math.ceil(expires / 1000))
return {1, string.format('%.0f', fence), takeover, started}
