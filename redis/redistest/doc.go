// Package redistest gives the tests of the redis module their Redis
// clients: a go-redis client on the shared test server with a private key
// prefix (RedisClient), rueidis and go-redis cluster clients, clients
// through a private Sentinel, and a redisstore per client kind for the
// suites that run once per client (testenv.RunOnEachRedisClient).
//
// What needs only the standard library (private redis-server processes,
// clusters, the per-client suite runner) lives in internal/testenv.
package redistest
