-- idem redisstore: SaveStep. Stores a recovery point of the operation that
-- holds the record, if the owner still holds it, in one atomic step.
-- KEYS[1]  the record
-- KEYS[2]  the record's recovery points (a hash in the record's slot):
--          field 'r:'..name the step's result, 'x:'..name the expiry of
--          the record that saved or last loaded it (µs). A point belongs
--          to the record acquired before that expiry: a record acquired
--          afresh later (the old one expired) does not see it.
-- ARGV[1]  owner token
-- ARGV[2]  owner fence (decimal)
-- ARGV[3]  step name
-- ARGV[4]  result
-- Returns  1 saved (also when the step was saved already in this
--          operation: the first result stays), 0 lease lost (nothing
--          written).
-- (stepowner.lua comes first: r is the owner's record.)
local x = redis.call('HGET', KEYS[2], 'x:' .. ARGV[3])
if x and tonumber(x) > tonumber(r[5]) then
  return 1
end
redis.call('HSET', KEYS[2], 'r:' .. ARGV[3], ARGV[4], 'x:' .. ARGV[3], r[6])
keepPoints()
return 1
