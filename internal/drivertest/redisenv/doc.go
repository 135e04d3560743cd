// Package redisenv gives the driver tests (tests that need Redis and a SQL
// driver, or several backends at once) their Redis clients. It is the
// drivertest module's copy of redis/internal/redistest, which this module
// cannot import (it is internal to the redis module): keep the two in step.
package redisenv
