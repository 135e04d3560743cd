-- A new Idempotency-Key on every request (first executions), one caller.
-- Each wrk thread gets its own prefix so that threads never share a key.
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n = 0
local body = '{"amount":4200,"currency":"EUR","description":"benchmark order"}'
function request()
  n = n + 1
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer sk_bench",
    ["Idempotency-Key"] = string.format("w%d-%d-%d", tid, os.time(), n),
  }, body)
end
