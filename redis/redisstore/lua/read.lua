-- idem redisstore: read one record's fields for List, pipelined per node
-- by EvalMany (a plain HMGET, run as a script so that both clients send a
-- batch of them the same way).
-- KEYS[1]  the record
-- ARGV     the field names
-- Returns  one value per field, nil for a missing one (and for every
--          field of a missing key).
return redis.call('HMGET', KEYS[1], unpack(ARGV))
