-- idem redisstore: read one record's fields for List, and whether it is
-- held, without sending its result.
-- KEYS[1]  the record
-- ARGV[1]  the exact legacy held result
-- ARGV[2]  the legacy held response prefix (4 bytes)
-- ARGV[3…] the field names
-- Returns  one value per field (nil for a missing one), then 1 if the
--          record is held (completed with the held mark h, or, written by
--          a release before the mark existed, with a held result), else 0.
local vals = redis.call('HMGET', KEYS[1], unpack(ARGV, 3))
local held = 0
local r = redis.call('HMGET', KEYS[1], 's', 'h')
if r[1] == 'c' then
  if r[2] == '1' then
    held = 1
  else
    local res = redis.call('HGET', KEYS[1], 'res')
    if res and (res == ARGV[1] or string.sub(res, 1, 4) == ARGV[2]) then
      held = 1
    end
  end
end
table.insert(vals, held)
return vals
