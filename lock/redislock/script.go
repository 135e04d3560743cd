package redislock

import "github.com/redis/go-redis/v9"

// A lock is one string key, prefix{name}, whose value is "token:fence".
// Its fence counter is prefix{name}:fence; the hash tag {name} puts both keys
// in the same Redis Cluster slot, so one script may touch both.
//
// Fences are written with string.format('%.0f'): Lua numbers are doubles,
// exact up to 2^53, and tostring() would print 1.7e+15.

// acquireScript takes the lock if it is free, or if it already holds this
// token (an earlier attempt whose reply was lost: the same token recovers the
// lock, its TTL refreshed and its fence unchanged).
//
// KEYS[1] lock key, KEYS[2] fence key
// ARGV[1] token, ARGV[2] ttl ms, ARGV[3] fence counter ttl ms (0 = none)
// Returns {fence, 0} when acquired, {0, pttl of the holder} when not.
var acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local mine = ARGV[1] .. ':'
  if string.sub(v, 1, #mine) == mine then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {tonumber(string.sub(v, #mine + 1)), 0}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local f = redis.call('INCR', KEYS[2])
if f == 1 then
  -- A new, expired or lost counter starts at the server's clock in
  -- microseconds, above any fence handed out before: a counter gains one per
  -- acquisition, far less than one per microsecond. (A live counter never
  -- reads 1: it starts near 1.7e15.) For the same reason the counter may
  -- expire whenever it likes; its TTL is set here only.
  local t = redis.call('TIME')
  f = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if tonumber(ARGV[3]) > 0 then
    redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3])
  else
    redis.call('SET', KEYS[2], string.format('%.0f', f))
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. string.format('%.0f', f), 'PX', ARGV[2])
return {f, 0}
`)

// Results of releaseScript and extendScript.
const (
	resultOK      = 1
	resultExpired = 0  // the key is gone
	resultNotHeld = -1 // the key holds another owner's token
)

// releaseScript deletes the lock only if it holds this token.
// KEYS[1] lock key; ARGV[1] token.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local mine = ARGV[1] .. ':'
if string.sub(v, 1, #mine) ~= mine then return -1 end
redis.call('DEL', KEYS[1])
return 1
`)

// extendScript resets the TTL only if the lock holds this token.
// KEYS[1] lock key; ARGV[1] token, ARGV[2] ttl ms.
var extendScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local mine = ARGV[1] .. ':'
if string.sub(v, 1, #mine) ~= mine then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// raiseFenceScript lifts the fence counter to at least ARGV[1].
// KEYS[1] fence key; ARGV[1] minimum, ARGV[2] counter ttl ms (0 = none).
// Returns the counter after the call.
var raiseFenceScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local m = tonumber(ARGV[1])
if c < m then
  c = m
  redis.call('SET', KEYS[1], ARGV[1])
end
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return c
`)
