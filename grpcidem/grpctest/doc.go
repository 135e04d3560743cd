// Package grpctest is test support, not API: it holds the gRPC test
// service that the tests of grpcidem and those in
// internal/drivertest/grpcidem share, served behind grpcidem's
// interceptor and dialled. It exists because test files cannot be
// imported across modules. It makes no stability promise: it changes
// with those tests, in any release.
package grpctest
