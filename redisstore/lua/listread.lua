-- idem redisstore: read one record's fields for List, and whether it is
-- held, without sending its result.
-- KEYS[1]  the record
-- ARGV[1]  the exact held marker
-- ARGV[2]  the held response prefix (4 bytes)
-- ARGV[3…] the field names
-- Returns  one value per field (nil for a missing one), then 1 if the
--          record is completed with a held result, else 0.
local vals = redis.call('HMGET', KEYS[1], unpack(ARGV, 3))
local held = 0
local r = redis.call('HMGET', KEYS[1], 's', 'res')
if r[1] == 'c' and r[2] and (r[2] == ARGV[1] or string.sub(r[2], 1, 4) == ARGV[2]) then
  held = 1
end
table.insert(vals, held)
return vals
