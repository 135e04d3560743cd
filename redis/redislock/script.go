package redislock

import "github.com/idemkit/idem/redis/internal/redisclient"

// A lock is one string key, prefix{name}, whose value is the owner's token
// followed by ':' (tokens are base32 and never contain ':'; the colon ends
// the token, and whatever might follow it is reserved). Its fence
// counter is prefix{name}:fence; the hash tag {name} puts both keys in the
// same Redis Cluster slot, so one script may touch both. The fence lives only
// in the counter: the lock value is compared with plain string equality, and
// the scripts do no string work on the hot path.
//
// Fences are written with string.format('%.0f'): Lua numbers are doubles,
// exact up to 2^53, and tostring() would print 1.7e+15.

// acquireScript takes the lock if it is free (SET NX) and only then draws a
// fence. If the lock already holds this value, an earlier attempt of the
// same Acquire call took it and its reply was lost: the attempt recovers the
// lock, its TTL refreshed, and reports the counter.
//
// Drawing a fence: f = max(counter + 1, TIME in microseconds), written back
// to the counter, all in this script. The counter alone goes back when Redis
// loses data it had acknowledged: a restart from an older RDB snapshot, a
// failover to a replica that had not received the last INCRs. Then a new
// holder would get a fence that a live earlier holder already has. The
// server's clock does not go back with the data: a fence drawn after the
// loss is above every fence drawn before it, as long as the server's clock
// did not step back across the loss by more than the time the loss took
// (a restart takes far longer than one microsecond). The counter covers the
// opposite case, a clock that steps back while the data stays: counter + 1
// keeps the order. Fences are unique per name because each acquisition gets
// one above the last one written.
//
// Why the counter is a recovering attempt's fence: the counter is written
// only by (1) this script, and only right after its own SET NX succeeded, so
// never while another owner's value is in the lock key; and (2) RaiseFence,
// which, when it raises the counter of a held lock, sets it one above the
// minimum it was asked for, reserving that number for the holder. So while
// the lock holds our value the counter is either our fence or a number
// reserved for us that nobody else has, and above every fence handed out
// before. A snapshot restore cannot split the two: the lock key and the
// counter are written by one script, and a snapshot holds both or neither.
// If the counter is gone (it expired, was evicted) the attempt draws a new
// fence. Either way the fence the lost reply carried was never seen by
// anybody.
//
// KEYS[1] lock key, KEYS[2] fence key
// ARGV[1] lock value, ARGV[2] ttl ms, ARGV[3] fence counter ttl ms (0 = none)
// Returns {fence, 0} when acquired, {0, pttl of the holder} when not.
var acquireScript = redisclient.NewScript(`
local function draw()
  local t = redis.call('TIME')
  local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local c = tonumber(redis.call('GET', KEYS[2]) or '')
  if c and c >= f then f = c + 1 end
  if tonumber(ARGV[3]) > 0 then
    redis.call('SET', KEYS[2], string.format('%.0f', f), 'PX', ARGV[3])
  else
    redis.call('SET', KEYS[2], string.format('%.0f', f))
  end
  return f
end
local f
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  f = draw()
elseif redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  f = tonumber(redis.call('GET', KEYS[2]) or '')
  if not f or f < 1 then
    f = draw()
  end
else
  return {0, redis.call('PTTL', KEYS[1])}
end
return {f, 0}
`)

// Results of releaseScript and extendScript.
const (
	resultOK      = 1
	resultExpired = 0  // the key is gone
	resultNotHeld = -1 // the key holds another owner's token
)

// releaseScript deletes the lock only if it holds this value.
// KEYS[1] lock key; ARGV[1] lock value.
var releaseScript = redisclient.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if v then return -1 end
return 0
`)

// extendScript resets the TTL only if the lock holds this value.
// KEYS[1] lock key; ARGV[1] lock value, ARGV[2] ttl ms.
var extendScript = redisclient.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then return -1 end
return 0
`)

// raiseFenceScript lifts the fence counter to at least ARGV[1]. If the lock
// is held at that moment it lifts it to ARGV[1]+1 instead: the holder may be
// an Acquire call whose reply was lost, and its recovery reports the counter
// as its fence (see acquireScript), which must not be ARGV[1], a fence some
// earlier holder may have used.
// KEYS[1] fence key, KEYS[2] lock key; ARGV[1] minimum, ARGV[2] counter ttl
// ms (0 = none). Returns the counter after the call.
var raiseFenceScript = redisclient.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local m = tonumber(ARGV[1])
if c < m then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    m = m + 1
  end
  c = m
  redis.call('SET', KEYS[1], string.format('%.0f', c))
end
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return c
`)
