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
package testenv
