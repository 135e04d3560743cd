package inbox

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strings"
	"syscall"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqlerr"
)

// A handler's error is its verdict on the message. The broker adapters
// (natsinbox, amqpinbox, kafkainbox) act on it:
//
//   - nil: done. The transaction commits and the message is acked.
//   - an error marked with [Permanent]: this message can never succeed (it
//     does not parse, it refers to something that does not exist). It is
//     dead-lettered now, without further attempts.
//   - an infrastructure failure ([IsTransient]: the database or Redis
//     unreachable, a connection reset, a lock timeout, a deadlock, a
//     serialization failure): not the message's fault. It is retried with
//     backoff for as long as the failure lasts and never spends the
//     message's poison budget.
//   - any other error: retry. The message comes back after a backoff; after
//     the adapter's maximum number of failed attempts it is poison and is
//     dead-lettered.

// Permanent marks err as a permanent failure of the message: retrying
// cannot help, so the adapters dead-letter it at once. The returned error
// has err's text and unwraps to err. Permanent(nil) is nil.
//
// Return it from a Handler (or a MessageIDFunc) for a message that is
// malformed or refers to nothing: "dead-letter now" is a decision of the
// business code, never of the infrastructure.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// IsTransient reports whether err is an infrastructure failure that says
// nothing about the message: retrying the same message later may succeed.
// It holds only for failures idem can recognise as coming from the
// infrastructure:
//
//   - the inbox's own statements (begin, the dedup insert, commit,
//     rollback) failing in any way internal/sqlerr classifies as
//     transient, a connection closed in the middle of a reply (EOF)
//     included;
//   - database errors from the handler that a driver produces: the server
//     unreachable or the connection broken (dial, reset, driver.ErrBadConn,
//     PostgreSQL class 08, admin shutdown, too many connections, MySQL
//     "gone away"), deadlocks, serialization failures, lock timeouts, and
//     statements the server cancelled (PostgreSQL 57014 statement_timeout
//     or pg_cancel_backend, MySQL/MariaDB 1317 KILL QUERY, 1969 and 3024
//     statement timeouts);
//   - sql.ErrConnDone;
//   - network errors (net.Error, connection refused, reset, broken pipe),
//     also when they come from Redis or any other client the handler uses;
//   - Redis replies that mean "not now" (LOADING, READONLY, MASTERDOWN,
//     CLUSTERDOWN, TRYAGAIN, BUSY) and go-redis's pool timeout and closed
//     client;
//   - idem.ErrInFlight, not the infrastructure's but no more the
//     message's: another holder has a live claim on the key of the
//     step.Do or idem.Do the handler called (MessageKey). A consumer that
//     died in the middle of the handler keeps its claim until its lease
//     runs out; the message's redelivery waits for that, and is never
//     dead-lettered for it.
//
// It is false for nil, for an error marked Permanent (the explicit verdict
// wins), and for context.Canceled and context.DeadlineExceeded: a caller
// whose own context ended is stopping, not facing an outage. (The adapters
// treat the expiry of their own per-attempt timeout as transient
// themselves.) It is false for an io.EOF or io.ErrUnexpectedEOF that no
// recognisable infrastructure error accompanies: encoding/json returns
// them for an empty or truncated body, and a message that does not decode
// is poison, not an outage. (When a driver's connection closes under the
// handler, the inbox's rollback of the transaction fails too, and that
// failure is recognised.)
func IsTransient(err error) bool {
	if err == nil || IsPermanent(err) {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var se *storeError
	if errors.As(err, &se) && sqlerr.IsTransient(se.err) {
		return true
	}
	if sqlerr.IsDriverTransient(err) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, idem.ErrInFlight) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH} {
		if errors.Is(err, e) {
			return true
		}
	}
	return isRedisTransient(err)
}

// storeError is a failure of one of the inbox's own statements: its cause
// comes from the database driver, whatever its shape.
type storeError struct{ err error }

func (e *storeError) Error() string { return e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// storeErr marks err (nil stays nil) as a failure of the inbox's own
// statements, for IsTransient.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	return &storeError{err: err}
}

// redisTransientPrefixes are Redis error replies after which the same
// command may succeed later (a replica loading, a failover, a busy script).
var redisTransientPrefixes = []string{"LOADING ", "READONLY ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ", "BUSY "}

// isRedisTransient recognises go-redis errors without importing go-redis
// (the inbox must not depend on a Redis client): server replies implement
// RedisError(), and the pool's own failures have fixed texts.
func isRedisTransient(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := err.(interface{ RedisError() }); ok {
		msg := err.Error()
		for _, p := range redisTransientPrefixes {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	switch err.Error() {
	case "redis: connection pool timeout", "redis: client is closed":
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return isRedisTransient(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if isRedisTransient(e) {
				return true
			}
		}
	}
	return false
}
