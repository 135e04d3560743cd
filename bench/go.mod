module github.com/idemkit/idem/bench

go 1.26.0

require (
	github.com/idemkit/idem v0.0.0 // indirect
	github.com/idemkit/idem/redis v0.0.0
)

replace (
	github.com/idemkit/idem => ..
	github.com/idemkit/idem/redis => ../redis
)

require github.com/redis/go-redis/v9 v9.23.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.18.1
)
