// Package testenv finds the real services the tests run against and gives each
// test an isolated corner of them.
//
// Every service is read from an environment variable with a loopback default:
//
//	IDEM_TEST_POSTGRES  postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	IDEM_TEST_MYSQL     root@tcp(127.0.0.1:3306)/test
//	IDEM_TEST_REDIS     redis://127.0.0.1:6379/0
//	IDEM_TEST_NATS      nats://127.0.0.1:4222
//	IDEM_TEST_AMQP      amqp://guest:guest@127.0.0.1:5672/
//
// When a service does not answer, the test is skipped with a message that names
// the variable; with IDEM_REQUIRE_SERVICES=1 (set by .ci/run) it fails instead, so
// CI can never go green by skipping.
//
// The package needs only the standard library (and go.uber.org/goleak), so
// that any module's tests may use it: service lookups, fresh names and free
// ports, the fault proxy, private redis-server processes, crash children
// (StartChild, KillAtLine, and RunSQLChild/KillSQLChild for SQL writers),
// parallelism and runnable-Example checks. Its SQL helpers open databases
// by driver name; the drivers are registered by internal/drivertest/sqlenv
// (or by the module under test). UseRedis gives a test the shared Redis
// and a key prefix of its own, deleted when the test ends; go-redis and
// rueidis clients come from redis/internal/redistest, which the redis
// module's tests and the Redis driver tests (redis/internal/drivertest)
// share.
//
// Replicated topologies for the failover tests (idemtest.RunFailover) are
// started privately on free ports: a PostgreSQL primary with a streaming
// standby (PGPair), a three-node MariaDB Galera cluster (StartGalera) and a
// MariaDB primary with an asynchronous replica (StartMariaDBPair).
package testenv
