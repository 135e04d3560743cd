module github.com/idemkit/idem/redis

go 1.26.0

require github.com/idemkit/idem v0.0.0

replace github.com/idemkit/idem => ..

require (
	github.com/bits-and-blooms/bloom/v3 v3.7.1 // indirect
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/bits-and-blooms/bitset v1.24.2 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/redis/rueidis v1.0.79
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
