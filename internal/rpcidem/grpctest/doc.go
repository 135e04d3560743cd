// Package grpctest holds the gRPC test service that the tests of grpcidem
// and those in internal/drivertest/grpcidem share: a service that counts
// its executions and misbehaves on request, served on loopback behind the
// caller's interceptor, and a client dialled to it.
//
// It is internal (users cannot import it) and lives in the internal/rpcidem
// module because that module is one both grpcidem and internal/drivertest
// reach; its gRPC requirement adds nothing to the build lists of
// rpcidem's requirers (grpcidem and connectidem already require gRPC).
package grpctest
