-- idem redisstore: the owner check that SaveStep's and Steps' scripts begin
-- with (step.go puts it in front of each). KEYS[1] is the record, ARGV[1]
-- the owner token, ARGV[2] its fence; r holds the record's version, state,
-- token, fence, creation and expiry. Returns 0 (lease lost) when the owner
-- does not hold the record.
local r = redis.call('HMGET', KEYS[1], 'v', 's', 'tok', 'f', 'c', 'x')
if not r[1] then
  return 0
end
if r[1] ~= '1' then
  return redis.error_reply('IDEMVERSION record ' .. KEYS[1] .. ' has version ' .. r[1] .. ', this idem reads version 1')
end
if r[2] ~= 'p' or r[3] ~= ARGV[1] or r[4] ~= ARGV[2] then
  return 0
end
-- keepPoints makes the points' hash (KEYS[2]) live at least as long as
-- the record.
local function keepPoints()
  local t = redis.call('TIME')
  local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local want = math.ceil(tonumber(r[6]) / 1000)
  local pttl = redis.call('PTTL', KEYS[2])
  if pttl < 0 or nowms + pttl < want then
    redis.call('PEXPIREAT', KEYS[2], want)
  end
end
