-- The same Idempotency-Key on every request (replays after the first).
local body = '{"amount":4200,"currency":"EUR","description":"benchmark order"}'
wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk_bench"
wrk.headers["Idempotency-Key"] = "replay-" .. os.time()
