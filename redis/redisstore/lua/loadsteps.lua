-- idem redisstore: Steps. Returns the recovery points of the operation
-- that holds the record, ties them to the record (their expiry becomes
-- its expiry) and deletes those of an earlier operation, in one step.
-- KEYS[1]  the record
-- KEYS[2]  the record's recovery points (see savestep.lua)
-- ARGV[1]  owner token
-- ARGV[2]  owner fence (decimal)
-- Returns  {name, result, …} when the owner holds the record, 0 when not.
-- (stepowner.lua comes first: r is the owner's record.)
local created = tonumber(r[5])
local all = redis.call('HGETALL', KEYS[2])
local out = {}
for i = 1, #all, 2 do
  local f = all[i]
  if string.sub(f, 1, 2) == 'x:' then
    local name = string.sub(f, 3)
    if tonumber(all[i + 1]) > created then
      out[#out + 1] = name
      out[#out + 1] = redis.call('HGET', KEYS[2], 'r:' .. name) or ''
      if all[i + 1] ~= r[6] then
        redis.call('HSET', KEYS[2], f, r[6])
      end
    else
      redis.call('HDEL', KEYS[2], f, 'r:' .. name)
    end
  end
end
if #out > 0 then
  keepPoints()
end
return out
