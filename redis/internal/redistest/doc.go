// Package redistest gives the tests of the redis tree their Redis
// clients: a go-redis client on the shared test server with a private key
// prefix (RedisClient), rueidis and go-redis cluster clients, clients
// through a private Sentinel, and a redisstore per client kind for the
// suites that run once per client (testenv.RunOnEachRedisClient).
//
// It is internal to github.com/idemkit/idem/redis: the redis module's own
// tests use it, and so do the driver tests in redis/internal/drivertest, a
// test-only module inside the redis tree (a path under redis/ is what the
// go command checks, not the module).
//
// What needs only the standard library (the shared server and its key
// prefix, private redis-server processes, clusters, the per-client suite
// runner) lives in internal/testenv.
package redistest
